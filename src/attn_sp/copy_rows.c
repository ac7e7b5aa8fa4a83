/*
 * Two-dimensional host copies (copy_rows.h). The streaming variant uses
 * 32-byte AVX loads and non-temporal stores, chosen at run time; it is
 * built on x86-64 with GCC or Clang and is memcpy elsewhere.
 */
#include "config.h"

#include "attn_sp/copy_rows.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NSP_COPY_HAVE_AVX 1
#include <immintrin.h>
#else
#define NSP_COPY_HAVE_AVX 0
#endif

/* bytes: a cache line, so that every streamed line is written whole (a
 * partly written line leaves the write-combining buffer as slow partial
 * writes); 32-byte stores need only half of it */
#define STREAM_ALIGN 64
#define STREAM_BLOCK 64 /* bytes per loop step: one cache line */

#if NSP_COPY_HAVE_AVX
/* One row: memcpy up to dst's next cache-line boundary, whole cache lines
 * with streaming stores, memcpy for the tail. */
__attribute__((target("avx"))) static void stream_row(char *dst, const char *src, size_t n)
{
    size_t head = (STREAM_ALIGN - ((uintptr_t)dst & (STREAM_ALIGN - 1))) & (STREAM_ALIGN - 1);
    size_t i;

    if (head > n) {
        head = n;
    }
    memcpy(dst, src, head);
    for (i = head; i + STREAM_BLOCK <= n; i += STREAM_BLOCK) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(src + i + 32));
        _mm256_stream_si256((__m256i *)(void *)(dst + i), a);
        _mm256_stream_si256((__m256i *)(void *)(dst + i + 32), b);
    }
    memcpy(dst + i, src + i, n - i);
}

/* Rows ahead whose first line is prefetched: a row that starts on a new
 * page (the all-to-all's sources are 1-8 KiB runs at a stride of a whole
 * token) would otherwise begin with a page walk and a cold hardware
 * prefetcher; touching its first line a few rows early hides both.
 * Measured on 4 MiB of 1 KiB runs at an 8 KiB stride, two copies at once:
 * ~14% less time at 2-32 rows ahead, none from prefetching whole rows. */
#define PREFETCH_ROWS 4

__attribute__((target("avx"))) static void stream_rows(char *dst, size_t dst_stride,
                                                       const char *src, size_t src_stride,
                                                       size_t row_len, size_t rows)
{
    int gaps = src_stride > row_len; /* contiguous rows need no help */

    for (size_t t = 0; t < rows; ++t) {
        if (gaps && t + PREFETCH_ROWS < rows) {
            _mm_prefetch(src + (t + PREFETCH_ROWS) * src_stride, _MM_HINT_T0);
        }
        stream_row(dst + t * dst_stride, src + t * src_stride, row_len);
    }
    _mm_sfence(); /* non-temporal stores are weakly ordered */
}

static int cpu_can_stream(void)
{
    return __builtin_cpu_supports("avx");
}
#endif

void nsp_copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
                   size_t row_len, size_t rows, int stream)
{
    char       *d = dst;
    const char *s = src;

#if NSP_COPY_HAVE_AVX
    if (stream && cpu_can_stream()) {
        stream_rows(d, dst_stride, s, src_stride, row_len, rows);
        return;
    }
#else
    (void)stream;
#endif
    for (size_t t = 0; t < rows; ++t) {
        memcpy(d + t * dst_stride, s + t * src_stride, row_len);
    }
}

/* Measured with nsp_a2a_perf's flat-mapped exchange, 8 ranks on 2 cores
 * sharing a 16 MiB L3: at 512 KiB of output per rank copies through the
 * cache are faster (2.3 vs 1.3-1.9 GB/s busbw), from 1 MiB up streamed
 * ones (1 MiB: 2.44 vs 2.1-2.35; 2 MiB: 2.2-2.3 vs 1.5-1.6). */
size_t nsp_copy_stream_min_bytes(void)
{
    return (size_t)1 << 20;
}

int nsp_copy_should_stream(size_t bytes)
{
    return bytes >= nsp_copy_stream_min_bytes();
}
