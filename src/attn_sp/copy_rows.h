/*
 * Two-dimensional host copies: `rows` rows of `row_len` bytes between two
 * strided buffers, through the cache (memcpy) or around it (non-temporal
 * stores), and the rule that chooses.
 */
#ifndef NSP_ATTN_SP_COPY_ROWS_H
#define NSP_ATTN_SP_COPY_ROWS_H

#include <stddef.h>

/**
 * Copy row t (0 <= t < rows) of `row_len` bytes from src + t * src_stride
 * to dst + t * dst_stride (strides in bytes; rows must not overlap). With
 * `stream` set, and where this CPU has AVX, the stores bypass the cache
 * (non-temporal) and a store fence ends the call, so another process sees
 * the bytes once this one signals it; otherwise memcpy per row. Borrows
 * both buffers.
 */
void nsp_copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
                   size_t row_len, size_t rows, int stream);

/**
 * Should a copy that writes `bytes` in all (one call's whole output of a
 * rank) bypass the cache? Yes from nsp_copy_stream_min_bytes() up: output
 * that large would evict itself and its sources from the shared cache
 * anyway, and non-temporal stores skip reading every destination line
 * first. Pure.
 */
int nsp_copy_should_stream(size_t bytes);

/** The output size from which nsp_copy_should_stream() says yes, in bytes. */
size_t nsp_copy_stream_min_bytes(void);

#endif
