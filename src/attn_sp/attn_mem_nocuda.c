/*
 * Nested attention's memory ops for device memory in a build without CUDA
 * (attn_mem.h): every entry says so. A world that moves device memory
 * cannot exist in such a build, so only a misconfigured caller gets here.
 */
#include "config.h"

#include "attn_sp/attn_mem.h"
#include "common/log.h"

static nsp_status_t nocuda_error(void)
{
    return nsp_error(NSP_ERR_UNSUPPORTED, "nested attention on device memory: this build "
                     "has no CUDA (configure --with-cuda)");
}

static nsp_status_t nocuda_check_kernel(int reference)
{
    (void)reference;
    return nocuda_error();
}

static nsp_status_t nocuda_check_level(int level, const nsp_layout_level_t *lv)
{
    (void)level;
    (void)lv;
    return nocuda_error();
}

static nsp_status_t nocuda_check_stream(void *stream)
{
    (void)stream;
    return nocuda_error();
}

static nsp_status_t nocuda_buffer(void **ptr, size_t *cap, size_t bytes)
{
    (void)ptr;
    (void)cap;
    (void)bytes;
    return nocuda_error();
}

static void nocuda_release(void *ptr)
{
    (void)ptr; /* buffer() never gave one */
}

static nsp_status_t nocuda_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                  float *dst, void *stream)
{
    (void)dtype;
    (void)n;
    (void)src;
    (void)dst;
    (void)stream;
    return nocuda_error();
}

static nsp_status_t nocuda_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src,
                                    void *dst, void *stream)
{
    (void)dtype;
    (void)n;
    (void)src;
    (void)dst;
    (void)stream;
    return nocuda_error();
}

static nsp_status_t nocuda_sync(void *stream)
{
    (void)stream;
    return nocuda_error();
}

const nsp_attn_mem_t nsp_attn_mem_cuda = {
    .name         = "cuda (not built)",
    .check_kernel = nocuda_check_kernel,
    .check_level  = nocuda_check_level,
    .check_stream = nocuda_check_stream,
    .buffer       = nocuda_buffer,
    .release      = nocuda_release,
    .to_f32       = nocuda_to_f32,
    .from_f32     = nocuda_from_f32,
    .sync         = nocuda_sync,
};
