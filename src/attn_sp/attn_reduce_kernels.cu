/*
 * CUDA kernels of nested attention's reductions (attn_reduce_map.h): the
 * replica sum (one thread per element), the partial merge (one thread
 * per row), the conversion and the accumulation (one thread per element).
 * The element math is the header's, shared with the host twins
 * the tests check; a kernel only maps threads to units.
 */
#include "attn_sp/attn_reduce_kernels.h"

namespace {

constexpr unsigned kThreads   = 256;
constexpr uint64_t kMaxBlocks = 8192; /* grid-stride beyond */

__global__ void __launch_bounds__(kThreads) rd_sum(const __grid_constant__ nsp_rd_sum_args_t a,
                                                   uint64_t units)
{
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += step) {
        nsp_rd_sum_unit(&a, u);
    }
}

__global__ void __launch_bounds__(kThreads)
    rd_merge(const __grid_constant__ nsp_rd_merge_args_t a)
{
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; r < (uint64_t)a.rows;
         r += step) {
        nsp_rd_merge_row(&a, (int64_t)r);
    }
}

__global__ void __launch_bounds__(kThreads)
    rd_convert(const __grid_constant__ nsp_rd_convert_args_t a)
{
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (uint64_t)a.n;
         i += step) {
        nsp_rd_convert_unit(&a, (int64_t)i);
    }
}

__global__ void __launch_bounds__(kThreads) rd_acc(const __grid_constant__ nsp_rd_acc_args_t a)
{
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (uint64_t)a.n;
         i += step) {
        nsp_rd_acc_unit(&a, (int64_t)i);
    }
}

unsigned rd_blocks(uint64_t units)
{
    uint64_t blocks = (units + kThreads - 1) / kThreads;
    return (unsigned)(blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

} // namespace

extern "C" cudaError_t nsp_rd_launch_sum(const nsp_rd_sum_args_t *a, cudaStream_t stream)
{
    uint64_t units = nsp_rd_sum_units(a);

    if (units == 0) {
        return cudaSuccess;
    }
    rd_sum<<<rd_blocks(units), kThreads, 0, stream>>>(*a, units);
    return cudaGetLastError();
}

extern "C" cudaError_t nsp_rd_launch_merge(const nsp_rd_merge_args_t *a, cudaStream_t stream)
{
    if (a->rows <= 0) {
        return cudaSuccess;
    }
    rd_merge<<<rd_blocks((uint64_t)a->rows), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t nsp_rd_launch_convert(const nsp_rd_convert_args_t *a, cudaStream_t stream)
{
    if (a->n <= 0) {
        return cudaSuccess;
    }
    rd_convert<<<rd_blocks((uint64_t)a->n), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t nsp_rd_launch_acc(const nsp_rd_acc_args_t *a, cudaStream_t stream)
{
    if (a->n <= 0) {
        return cudaSuccess;
    }
    rd_acc<<<rd_blocks((uint64_t)a->n), kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}
