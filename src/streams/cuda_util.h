/*
 * CUDA runtime errors at the boundary (internal, CUDA builds only).
 *
 * Every CUDA call of nspcomm goes through nsp_cuda_status(): a cudaError_t
 * becomes an nsp_status_t with the CUDA name and message in ours, decided
 * (and logged) once, as STYLE asks for foreign codes. The sticky error state
 * of the runtime is cleared so a later call does not report it again.
 */
#ifndef NSP_STREAMS_CUDA_UTIL_H_
#define NSP_STREAMS_CUDA_UTIL_H_

#include "nspcomm.h"

#include <cuda_runtime.h>

/**
 * Translate `err` from the CUDA call named `call` (e.g. "cudaMalloc(2 MiB)")
 * made for `what` (e.g. "nccl world"): NSP_OK for cudaSuccess, otherwise
 * nsp_error(NSP_ERR_BACKEND, ...) naming the call, the CUDA error name and
 * its message, with a hint when no device is usable (no GPU, driver too
 * old) or the device ran out of memory.
 */
nsp_status_t nsp_cuda_status(cudaError_t err, const char *what, const char *call);

/** Evaluate a CUDA call; on error store the translated status and jump. */
#define NSP_CUDA_GOTO(expr, what, status, label)                       \
    do {                                                               \
        cudaError_t nsp_cuda_err_ = (expr);                            \
        if (nsp_cuda_err_ != cudaSuccess) {                            \
            (status) = nsp_cuda_status(nsp_cuda_err_, (what), #expr);  \
            goto label;                                                \
        }                                                              \
    } while (0)

/** Same, returning the translated status. */
#define NSP_CUDA_CHECK(expr, what)                                     \
    do {                                                               \
        cudaError_t nsp_cuda_err_ = (expr);                            \
        if (nsp_cuda_err_ != cudaSuccess) {                            \
            return nsp_cuda_status(nsp_cuda_err_, (what), #expr);      \
        }                                                              \
    } while (0)

/**
 * Is a CUDA device usable here? NSP_OK with *count >= 1, or
 * NSP_ERR_UNSUPPORTED with the runtime's reason in the message (quietly
 * recorded: callers such as tests decide whether it is an error), e.g.
 * "cudaGetDeviceCount: cudaErrorInsufficientDriver (35): CUDA driver
 * version is insufficient for CUDA runtime version".
 */
nsp_status_t nsp_cuda_device_probe(int *count);

/**
 * Make `device` current (a no-op when it already is). device < 0 keeps the
 * current one. Errors: NSP_ERR_BACKEND.
 */
nsp_status_t nsp_cuda_use_device(int device, const char *what);

#endif /* NSP_STREAMS_CUDA_UTIL_H_ */
