/* CUDA runtime errors translated at the boundary (see cuda_util.h). */
#include "streams/cuda_util.h"

#include "common/log.h"

nsp_status_t nsp_cuda_status(cudaError_t err, const char *what, const char *call)
{
    const char *hint = "";

    if (err == cudaSuccess) {
        return NSP_OK;
    }
    (void)cudaGetLastError(); /* clear the sticky state of a non-fatal error */
    switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        hint = "; no usable CUDA device here: run on a machine with an NVIDIA GPU and a driver "
               "at least as new as the CUDA runtime, or use the ucx backend";
        break;
    case cudaErrorMemoryAllocation:
        hint = "; the device is out of memory: free device memory or reduce the batch";
        break;
    case cudaErrorInvalidDevice:
        hint = "; the device ordinal is not visible: check config.cuda_device and "
               "CUDA_VISIBLE_DEVICES";
        break;
    default:
        break;
    }
    return nsp_error(NSP_ERR_BACKEND, "%s: %s failed: %s (%d): %s%s", what, call,
                     cudaGetErrorName(err), (int)err, cudaGetErrorString(err), hint);
}

nsp_status_t nsp_cuda_device_probe(int *count)
{
    int         n   = 0;
    cudaError_t err = cudaGetDeviceCount(&n);

    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return nsp_error_quiet(NSP_ERR_UNSUPPORTED, "cudaGetDeviceCount: %s (%d): %s",
                               cudaGetErrorName(err), (int)err, cudaGetErrorString(err));
    }
    if (n < 1) {
        return nsp_error_quiet(NSP_ERR_UNSUPPORTED, "cudaGetDeviceCount: 0 devices");
    }
    *count = n;
    return NSP_OK;
}

nsp_status_t nsp_cuda_use_device(int device, const char *what)
{
    int current = -1;

    if (device < 0) {
        return NSP_OK;
    }
    NSP_CUDA_CHECK(cudaGetDevice(&current), what);
    if (current != device) {
        NSP_CUDA_CHECK(cudaSetDevice(device), what);
    }
    return NSP_OK;
}
