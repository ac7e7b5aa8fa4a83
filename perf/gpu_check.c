/*
 * perf/gpu_check: the CUDA pack/unpack kernels on realistic level shapes —
 * bit-exact against the host pack.c on the same bytes, and timed (GB/s,
 * and as a fraction of a device-to-device cudaMemcpy of the same output
 * size measured in the same run). Run by perf/gpu_check.sh; needs a GPU.
 *
 *   gpu_check [--tokens T] [--iters N] [--quick]
 *
 * Shapes (one level of the nested all-to-all seen by index 3 of a group of
 * 8, long-tailed sequences of T tokens in all, D = 128):
 *   q   H = 32, bf16           (H/d = 4 heads per rank)
 *   kv  H = 4,  bf16           (d > H: each head on 2 ranks, replicated)
 *   dkv H = 4,  fp32 SUM_F32   (head-to-sequence sums the replicas)
 *   dkv H = 4,  bf16 SUM_BF16  (the same in bfloat16, rounded per addition)
 * Exit status: 0 when every check passed, 1 otherwise, 2 without a GPU.
 */
#include "attn_sp/attn_reduce_map.h"
#include "attn_sp/pack.h"
#include "attn_sp/pack_cuda.h"
#include "common/log.h"
#include "nsp_opt.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char        *name;
    int                heads;
    size_t             elem;
    nsp_a2a_replicas_t replicas;
} shape_t;

typedef enum { OP_PACK_S2H, OP_UNPACK_S2H, OP_PACK_H2S, OP_UNPACK_H2S, OP_SELF_S2H, OP_SELF_H2S,
               OP_N } op_t;

static const char *const op_names[OP_N] = {"pack s2h",   "unpack s2h",    "pack h2s",
                                           "unpack h2s", "self copy s2h", "self copy h2s"};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Random bytes, or with a summing mode numbers in [-0.5, 0.5) of its
 * element type (float32, bfloat16), so the sums are of numbers. */
static void fill(char *buf, size_t bytes, nsp_a2a_replicas_t sums)
{
    if (sums == NSP_A2A_REPLICAS_SUM_F32) {
        for (size_t k = 0; k + 4 <= bytes; k += 4) {
            float f = (float)((double)(rnd() >> 40) / 16777216.0 - 0.5);
            memcpy(buf + k, &f, 4);
        }
    } else if (sums == NSP_A2A_REPLICAS_SUM_BF16) {
        for (size_t k = 0; k + 2 <= bytes; k += 2) {
            uint16_t h = nsp_rd_float_to_bf16((float)((double)(rnd() >> 40) / 16777216.0 - 0.5));
            memcpy(buf + k, &h, 2);
        }
    } else {
        for (size_t k = 0; k + 8 <= bytes; k += 8) {
            uint64_t v = rnd();
            memcpy(buf + k, &v, 8);
        }
    }
}

/* Long-tailed lengths summing to `tokens`: a few long, many short. */
static int make_lens(int64_t tokens, int64_t *lens, int max)
{
    int     n    = 0;
    int64_t left = tokens;

    while (left > 0 && n < max) {
        int64_t len = n == 0 ? tokens / 2 : n < 3 ? tokens / 8 : 64 + (int64_t)(rnd() % 4000);
        len         = len > left ? left : len;
        lens[n++]   = len;
        left -= len;
    }
    if (left > 0) {
        lens[n - 1] += left;
    }
    return n;
}

static int run_host(const nsp_level_view_t *v, const shape_t *s, op_t op, size_t rb,
                    const size_t *c, const size_t *dsp, const void *src, void *dst)
{
    nsp_status_t st = NSP_ERR_INTERNAL;

    switch (op) {
    case OP_PACK_S2H: st = nsp_pack_s2h(v, s->heads, rb, src, dst, c, dsp); break;
    case OP_UNPACK_S2H: st = nsp_unpack_s2h(v, s->heads, rb, src, c, dsp, dst); break;
    case OP_PACK_H2S: st = nsp_pack_h2s(v, s->heads, rb, src, dst, c, dsp); break;
    case OP_UNPACK_H2S: st = nsp_unpack_h2s(v, s->heads, rb, s->replicas, src, c, dsp, dst); break;
    case OP_SELF_S2H:
        st = nsp_pack_copy_self(v, NSP_A2A_SEQ_TO_HEAD, s->heads, rb, s->replicas, src, dst);
        break;
    default:
        st = nsp_pack_copy_self(v, NSP_A2A_HEAD_TO_SEQ, s->heads, rb, s->replicas, src, dst);
        break;
    }
    return st == NSP_OK;
}

static nsp_status_t run_cuda(nsp_cuda_level_t *L, const shape_t *s, op_t op, size_t rb,
                             const size_t *c, const size_t *dsp, const void *src, void *dst,
                             cudaStream_t stream)
{
    switch (op) {
    case OP_PACK_S2H: return nsp_cuda_pack_s2h(L, s->heads, rb, src, dst, c, dsp, stream);
    case OP_UNPACK_S2H: return nsp_cuda_unpack_s2h(L, s->heads, rb, src, c, dsp, dst, stream);
    case OP_PACK_H2S: return nsp_cuda_pack_h2s(L, s->heads, rb, src, dst, c, dsp, stream);
    case OP_UNPACK_H2S:
        return nsp_cuda_unpack_h2s(L, s->heads, rb, s->replicas, src, c, dsp, dst, stream);
    case OP_SELF_S2H:
        return nsp_cuda_pack_copy_self(L, NSP_A2A_SEQ_TO_HEAD, s->heads, rb, s->replicas, src,
                                       dst, stream);
    default:
        return nsp_cuda_pack_copy_self(L, NSP_A2A_HEAD_TO_SEQ, s->heads, rb, s->replicas, src,
                                       dst, stream);
    }
}

/* Time `iters` launches of one op (or of a cudaMemcpy when L == NULL). */
static double time_us(nsp_cuda_level_t *L, const shape_t *s, op_t op, size_t rb,
                      const size_t *c, const size_t *dsp, const void *src, void *dst,
                      size_t copy_bytes, cudaStream_t stream, int iters)
{
    cudaEvent_t t0, t1;
    float       ms = 0;

    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (int w = 0; w < 2; ++w) { /* warm up */
        if (L == NULL) {
            cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream);
        } else {
            run_cuda(L, s, op, rb, c, dsp, src, dst, stream);
        }
    }
    cudaEventRecord(t0, stream);
    for (int i = 0; i < iters; ++i) {
        if (L == NULL) {
            cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream);
        } else {
            run_cuda(L, s, op, rb, c, dsp, src, dst, stream);
        }
    }
    cudaEventRecord(t1, stream);
    cudaEventSynchronize(t1);
    cudaEventElapsedTime(&ms, t0, t1);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return 1000.0 * (double)ms / iters;
}

int main(int argc, char **argv)
{
    static const shape_t shapes[] = {
        {"q   H=32 bf16", 32, 2, NSP_A2A_REPLICAS_FIRST},
        {"kv  H=4  bf16", 4, 2, NSP_A2A_REPLICAS_FIRST},
        {"dkv H=4  f32 SUM", 4, 4, NSP_A2A_REPLICAS_SUM_F32},
        {"dkv H=4  bf16 SUM", 4, 2, NSP_A2A_REPLICAS_SUM_BF16},
    };
    int64_t          tokens = 65536, lens[64];
    int              iters = 20, failures = 0, ndev = 0;
    const int        D = 128, d = 8, index = 3;
    nsp_level_view_t v;
    cudaStream_t     stream;
    struct cudaDeviceProp prop;

    for (int a = 1; a < argc; ++a) {
        if (strcmp(argv[a], "--tokens") == 0 && a + 1 < argc) {
            if (nsp_opt_i64("gpu_check", "--tokens", argv[++a], 64, (int64_t)1 << 28, &tokens) !=
                NSP_OK) {
                return NSP_OPT_EXIT_USAGE;
            }
        } else if (strcmp(argv[a], "--iters") == 0 && a + 1 < argc) {
            if (nsp_opt_int("gpu_check", "--iters", argv[++a], 1, 1000000, &iters) != NSP_OK) {
                return NSP_OPT_EXIT_USAGE;
            }
        } else if (strcmp(argv[a], "--quick") == 0) {
            tokens = 8192;
            iters  = 5;
        } else {
            fprintf(stderr, "usage: %s [--tokens T] [--iters N] [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (nsp_cuda_device_probe(&ndev) != NSP_OK) {
        printf("gpu_check: no CUDA device (%s)\n", nsp_last_error());
        return 2;
    }
    cudaGetDeviceProperties(&prop, 0);
    printf("# device 0: %s, %d SMs, %.1f GiB, compute capability %d.%d\n", prop.name,
           prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30), prop.major,
           prop.minor);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    v.degree  = d;
    v.index   = index;
    v.nseqs   = make_lens(tokens, lens, 64);
    v.seq_len = lens;
    printf("# level: degree %d, index %d, %d sequences, %lld tokens (longest %lld), D = %d, "
           "%d timed launches each\n",
           d, index, v.nseqs, (long long)tokens, (long long)lens[0], D, iters);
    printf("# %-18s %-14s %12s %10s %9s %9s %8s\n", "shape", "op", "out bytes", "time us",
           "GB/s", "memcpy%", "check");
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); ++si) {
        const shape_t    *s  = &shapes[si];
        size_t            rb = (size_t)D * s->elem;
        nsp_cuda_level_t *L  = NULL;
        size_t            cnt[2][4][8]; /* [dir][sb, sd, rb, rd][peer] */

        if (nsp_cuda_level_create(&v, &L) != NSP_OK) {
            printf("FAIL %s: nsp_cuda_level_create: %s\n", s->name, nsp_last_error());
            ++failures;
            continue;
        }
        for (int dir = 0; dir < 2; ++dir) {
            nsp_pack_counts(&v, (nsp_a2a_dir_t)dir, s->heads, rb, s->replicas,
                            NSP_PACK_SKIP_SELF, cnt[dir][0], cnt[dir][1], cnt[dir][2],
                            cnt[dir][3]);
        }
        for (int op = 0; op < OP_N; ++op) {
            int           dir = (op == OP_PACK_S2H || op == OP_UNPACK_S2H || op == OP_SELF_S2H)
                                    ? 0 : 1;
            int           send_side = op == OP_PACK_S2H || op == OP_PACK_H2S;
            const size_t *c   = op >= OP_SELF_S2H ? NULL : cnt[dir][send_side ? 0 : 2];
            const size_t *dsp = op >= OP_SELF_S2H ? NULL : cnt[dir][send_side ? 1 : 3];
            int64_t       mine = 0, total = 0;
            size_t        chunks, block, sum_s = 0, sum_r = 0, in_b, out_b;
            int           first, h_me, r;
            char         *hsrc, *hdst, *hout, *dsrc = NULL, *ddst = NULL;
            double        us, ref_us;
            int           ok;

            nsp_cuda_level_tokens(L, &mine, &total);
            nsp_head_share(s->heads, d, index, &first, &h_me, &r);
            for (int p = 0; p < d; ++p) {
                sum_s += cnt[dir][0][p];
                sum_r += cnt[dir][2][p];
            }
            chunks = (size_t)mine * (size_t)s->heads * rb;
            block  = (size_t)total * (size_t)h_me * rb;
            switch (op) {
            case OP_PACK_S2H: in_b = chunks, out_b = sum_s; break;
            case OP_UNPACK_S2H: in_b = sum_r, out_b = block; break;
            case OP_PACK_H2S: in_b = block, out_b = sum_s; break;
            case OP_UNPACK_H2S: in_b = sum_r, out_b = chunks; break;
            case OP_SELF_S2H: in_b = chunks, out_b = block; break;
            default: in_b = block, out_b = chunks; break;
            }
            hsrc = malloc(in_b + 8);
            hdst = malloc(out_b + 8);
            hout = malloc(out_b + 8);
            if (hsrc == NULL || hdst == NULL || hout == NULL ||
                cudaMalloc((void **)&dsrc, in_b + 8) != cudaSuccess ||
                cudaMalloc((void **)&ddst, out_b + 8) != cudaSuccess) {
                printf("FAIL %s %s: out of memory (%zu + %zu bytes)\n", s->name, op_names[op],
                       in_b, out_b);
                ++failures;
                goto next;
            }
            fill(hsrc, in_b, s->replicas);
            fill(hdst, out_b, s->replicas);
            cudaMemcpy(dsrc, hsrc, in_b, cudaMemcpyHostToDevice);
            cudaMemcpy(ddst, hdst, out_b, cudaMemcpyHostToDevice);
            ok = run_cuda(L, s, (op_t)op, rb, c, dsp, dsrc, ddst, stream) == NSP_OK &&
                 cudaStreamSynchronize(stream) == cudaSuccess &&
                 cudaMemcpy(hout, ddst, out_b, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 run_host(&v, s, (op_t)op, rb, c, dsp, hsrc, hdst) &&
                 memcmp(hout, hdst, out_b) == 0;
            us     = time_us(L, s, (op_t)op, rb, c, dsp, dsrc, ddst, 0, stream, iters);
            ref_us = time_us(NULL, s, (op_t)op, rb, c, dsp, dsrc, ddst, out_b < in_b ? out_b
                                                                                      : in_b,
                             stream, iters);
            printf("  %-18s %-14s %12zu %10.1f %9.1f %8.0f%% %8s\n", s->name, op_names[op],
                   out_b, us, out_b > 0 && us > 0 ? 2.0 * (double)out_b / (us * 1e3) : 0.0,
                   us > 0 ? 100.0 * ref_us / us : 0.0, ok ? "ok" : "WRONG");
            if (!ok) {
                printf("FAIL %s %s: the CUDA kernel differs from pack.c (%s)\n", s->name,
                       op_names[op], nsp_last_error());
                ++failures;
            }
        next:
            cudaFree(dsrc);
            cudaFree(ddst);
            free(hsrc);
            free(hdst);
            free(hout);
        }
        cudaStreamSynchronize(stream);
        nsp_cuda_level_free(L);
    }
    printf("# GB/s counts each output byte twice (read + write); memcpy%% = a cudaMemcpy of "
           "the same bytes (device to device) timed alike, in percent of the kernel's time\n");
    printf("gpu_check: %s (%d failures)\n", failures == 0 ? "PASS" : "FAIL", failures);
    cudaStreamDestroy(stream);
    return failures == 0 ? 0 : 1;
}
