/*
 * Nested attention's memory ops on host memory (attn_mem.h): malloc'd
 * buffers, any kernel, every level, no stream; conversions by
 * attn_reduce.h.
 */
#include "config.h"

#include "attn_sp/attn_mem.h"
#include "attn_sp/attn_reduce.h"
#include "common/log.h"

#include <stdlib.h>

static nsp_status_t host_check_kernel(int reference)
{
    (void)reference;
    return NSP_OK;
}

static nsp_status_t host_check_level(int level, const nsp_layout_level_t *lv)
{
    (void)level;
    (void)lv;
    return NSP_OK;
}

static nsp_status_t host_check_stream(void *stream)
{
    if (stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested attention: a CUDA stream was given but "
                         "the world moves host memory (UCX); pass stream = NULL");
    }
    return NSP_OK;
}

static nsp_status_t host_buffer(void **ptr, size_t *cap, size_t bytes)
{
    void *p;

    bytes = bytes > 0 ? bytes : 1;
    if (*ptr != NULL && *cap >= bytes) {
        return NSP_OK;
    }
    p = realloc(*ptr, bytes);
    if (p == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %zu bytes "
                         "of head-sharded buffers", bytes);
    }
    *ptr = p;
    *cap = bytes;
    return NSP_OK;
}

static void host_release(void *ptr)
{
    free(ptr);
}

static nsp_status_t host_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                                void *stream)
{
    (void)stream; /* check_stream() allows none */
    return nsp_reduce_to_f32(dtype, n, src, dst);
}

static nsp_status_t host_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                                  void *stream)
{
    (void)stream;
    return nsp_reduce_from_f32(dtype, n, src, dst);
}

static nsp_status_t host_sync(void *stream)
{
    (void)stream; /* everything ran when it returned */
    return NSP_OK;
}

const nsp_attn_mem_t nsp_attn_mem_host = {
    .name         = "host",
    .check_kernel = host_check_kernel,
    .check_level  = host_check_level,
    .check_stream = host_check_stream,
    .buffer       = host_buffer,
    .release      = host_release,
    .to_f32       = host_to_f32,
    .from_f32     = host_from_f32,
    .sync         = host_sync,
};
