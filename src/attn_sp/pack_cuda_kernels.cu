/*
 * CUDA pack/unpack kernels of the nested all-to-all. Each thread moves one
 * vector (1 to 16 bytes) of one unit; the unit maps are the pure functions
 * of pack_map.h, shared with the host emulation the tests check against
 * pack.c. Launch arguments travel by value as a __grid_constant__ struct.
 */
#include "attn_sp/pack_cuda_kernels.h"
#include "attn_sp/replica_sum.h"

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

/* float32 replica sums (a.sum_dtype FP32), in the host's order: the first replica's row (or
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

/* 16-bit replica sums (bfloat16 or binary16, a.sum_dtype), one element per
 * thread and step, in the host's order and with its rounding: every
 * addition in float32, rounded to the 16-bit type (replica_sum.h). */
__device__ __forceinline__ uint16_t h16_add(int32_t dt, uint16_t x, uint16_t y)
{
    float s = nsp_rs_add1(dt, nsp_rd_load(dt, &x, 0), nsp_rd_load(dt, &y, 0));
    uint16_t out;

    nsp_rd_store(dt, &out, 0, s);
    return out;
}

__global__ void __launch_bounds__(kThreads) pk_sum16(const __grid_constant__ nsp_pk_args_t a,
                                                     uint64_t epu)
{
    const uint64_t total = a.units * epu;
    const uint64_t step  = (uint64_t)gridDim.x * blockDim.x;
    const int32_t  dt    = a.sum_dtype;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        uint64_t u = i / epu, k = i - u * epu, so = 0, dof = 0;
        if (a.op == NSP_PK_H2S_SELF_ADD) {
            if (nsp_pk_unit(&a, u, &so, &dof)) {
                uint16_t *d = reinterpret_cast<uint16_t *>(a.dst + dof) + k;
                *d = h16_add(dt, *d, reinterpret_cast<const uint16_t *>(a.src + so)[k]);
            }
            continue;
        }
        uint16_t v    = 0;
        bool     have = false;
        for (uint32_t r = 0; r < (uint32_t)a.replicas; ++r) {
            if (!nsp_pk_sum_row(&a, u, r, &so, &dof)) {
                continue;
            }
            uint16_t x = reinterpret_cast<const uint16_t *>(a.src + so)[k];
            if (r == 0) {
                v = x;
            } else {
                if (!have) {
                    v = reinterpret_cast<const uint16_t *>(a.dst + dof)[k];
                }
                v = h16_add(dt, v, x);
            }
            have = true;
        }
        if (have) {
            reinterpret_cast<uint16_t *>(a.dst + dof)[k] = v;
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
    if (sums && a->sum_dtype != NSP_RD_FP32) {
        uint64_t epu = a->unit_bytes / 2, blocks;
        if (vector_bytes % 2 != 0) {
            return cudaErrorInvalidValue;
        }
        blocks = (a->units * epu + kThreads - 1) / kThreads;
        pk_sum16<<<(unsigned)(blocks > kMaxBlocks ? kMaxBlocks : blocks), kThreads, 0, stream>>>(
            *a, epu);
        return cudaGetLastError();
    }
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
