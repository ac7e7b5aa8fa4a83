/*
 * CUDA pack/unpack kernels of the nested all-to-all. Each thread moves one
 * vector (1 to 16 bytes) of one unit; the unit maps are the pure functions
 * of pack_map.h, shared with the host emulation the tests check against
 * pack.c. Launch arguments travel by value as a __grid_constant__ struct.
 */
#include "attn_sp/pack_cuda_kernels.h"

#include <stdint.h>

namespace {

constexpr unsigned kThreads   = 256;
constexpr uint64_t kMaxBlocks = 8192; /* grid-stride beyond: enough to fill any GPU */

/* Rows copied whole: one vector of type V per thread and step. */
template <typename V>
__global__ void __launch_bounds__(kThreads) pk_copy(const __grid_constant__ nsp_pk_args_t a,
                                                    uint64_t vpu)
{
    const uint64_t total = a.units * vpu;
    const uint64_t step  = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        uint64_t u = i / vpu, k = i - u * vpu, so, dof;
        if (nsp_pk_unit(&a, u, &so, &dof)) {
            reinterpret_cast<V *>(a.dst + dof)[k] = reinterpret_cast<const V *>(a.src + so)[k];
        }
    }
}

__device__ __forceinline__ float vadd(float x, float y)
{
    return x + y;
}
__device__ __forceinline__ float2 vadd(float2 x, float2 y)
{
    return make_float2(x.x + y.x, x.y + y.y);
}
__device__ __forceinline__ float4 vadd(float4 x, float4 y)
{
    return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

/* float32 replica sums, in the host's order: the first replica's row (or
 * the chunk's own value when it sent none), then the others ascending. */
template <typename V>
__global__ void __launch_bounds__(kThreads) pk_sum(const __grid_constant__ nsp_pk_args_t a,
                                                   uint64_t vpu)
{
    const uint64_t total = a.units * vpu;
    const uint64_t step  = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        uint64_t u = i / vpu, k = i - u * vpu, so = 0, dof = 0;
        if (a.op == NSP_PK_H2S_SELF_ADD) {
            if (nsp_pk_unit(&a, u, &so, &dof)) {
                V *d = reinterpret_cast<V *>(a.dst + dof) + k;
                *d   = vadd(*d, reinterpret_cast<const V *>(a.src + so)[k]);
            }
            continue;
        }
        V    v    = V();
        bool have = false;
        for (uint32_t r = 0; r < (uint32_t)a.replicas; ++r) {
            if (!nsp_pk_sum_row(&a, u, r, &so, &dof)) {
                continue;
            }
            V x = reinterpret_cast<const V *>(a.src + so)[k];
            if (r == 0) {
                v = x;
            } else {
                if (!have) {
                    v = reinterpret_cast<const V *>(a.dst + dof)[k];
                }
                v = vadd(v, x);
            }
            have = true;
        }
        if (have) {
            reinterpret_cast<V *>(a.dst + dof)[k] = v;
        }
    }
}

template <typename V, bool Sum>
cudaError_t pk_launch_as(const nsp_pk_args_t *a, uint64_t vpu, cudaStream_t stream)
{
    uint64_t total  = a->units * vpu;
    uint64_t blocks = (total + kThreads - 1) / kThreads;

    if (blocks > kMaxBlocks) {
        blocks = kMaxBlocks;
    }
    if constexpr (Sum) {
        pk_sum<V><<<(unsigned)blocks, kThreads, 0, stream>>>(*a, vpu);
    } else {
        pk_copy<V><<<(unsigned)blocks, kThreads, 0, stream>>>(*a, vpu);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t nsp_pk_launch(const nsp_pk_args_t *a, unsigned vector_bytes,
                                     cudaStream_t stream)
{
    bool     sums = a->op == NSP_PK_H2S_UNPACK_SUM || a->op == NSP_PK_H2S_SELF_ADD;
    uint64_t vpu;

    if (a->units == 0 || a->unit_bytes == 0) {
        return cudaSuccess;
    }
    if (vector_bytes == 0 || a->unit_bytes % vector_bytes != 0) {
        return cudaErrorInvalidValue;
    }
    vpu = a->unit_bytes / vector_bytes;
    if (sums) {
        switch (vector_bytes) {
        case 16: return pk_launch_as<float4, true>(a, vpu, stream);
        case 8:  return pk_launch_as<float2, true>(a, vpu, stream);
        case 4:  return pk_launch_as<float, true>(a, vpu, stream);
        default: return cudaErrorInvalidValue;
        }
    }
    switch (vector_bytes) {
    case 16: return pk_launch_as<uint4, false>(a, vpu, stream);
    case 8:  return pk_launch_as<uint2, false>(a, vpu, stream);
    case 4:  return pk_launch_as<uint32_t, false>(a, vpu, stream);
    case 2:  return pk_launch_as<uint16_t, false>(a, vpu, stream);
    case 1:  return pk_launch_as<uint8_t, false>(a, vpu, stream);
    default: return cudaErrorInvalidValue;
    }
}
