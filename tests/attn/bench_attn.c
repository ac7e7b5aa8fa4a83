/*
 * Time the host reference attention on one causal sequence.
 *   bench_attn [tokens=4096] [q_heads=8] [kv_heads=2] [head_dim=64] [reps=3]
 *              [variant=auto|generic|avx2]
 * Prints the best of `reps` thread-CPU times for forward and backward and
 * the rate in GFLOP/s (causal: 4 T^2/2 n_q D forward, 10 T^2/2 n_q D
 * backward, counting the recomputed scores).
 */
#include "nspcomm.h"

#include "attn_sp/attn_tile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double thread_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_buffer(size_t n, unsigned *seed)
{
    float *b = malloc(n * sizeof(*b));

    for (size_t i = 0; b != NULL && i < n; ++i) {
        b[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
    }
    return b;
}

int main(int argc, char **argv)
{
    int64_t T = argc > 1 ? atoll(argv[1]) : 4096;
    int nq = argc > 2 ? atoi(argv[2]) : 8;
    int nkv = argc > 3 ? atoi(argv[3]) : 2;
    int D = argc > 4 ? atoi(argv[4]) : 64;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(nq, nkv, D);
    int64_t offsets[2] = {0, T};
    size_t nqe = (size_t)(T * nq * D), nkve = (size_t)(T * nkv * D);
    unsigned seed = 42;
    float *q = random_buffer(nqe, &seed), *k = random_buffer(nkve, &seed);
    float *v = random_buffer(nkve, &seed), *dout = random_buffer(nqe, &seed);
    float *o = malloc(nqe * sizeof(float)), *lse = malloc((size_t)(T * nq) * sizeof(float));
    float *dq = malloc(nqe * sizeof(float));
    float *dk = malloc(nkve * sizeof(float)), *dv = malloc(nkve * sizeof(float));
    double best_f = 1e30, best_b = 1e30;
    double pairs = (double)T * (double)(T + 1) / 2.0 * nq;

    if (argc > 6) {
        nsp_attn_isa_t isa = strcmp(argv[6], "generic") == 0 ? NSP_ATTN_ISA_GENERIC
                           : strcmp(argv[6], "avx2") == 0    ? NSP_ATTN_ISA_AVX2
                                                              : NSP_ATTN_ISA_AUTO;
        if (nsp_attn_tile_force_isa(isa) != NSP_OK) {
            fprintf(stderr, "bench_attn: variant %s: %s\n", argv[6], nsp_last_error());
            return 1;
        }
    }
    if (!q || !k || !v || !dout || !o || !lse || !dq || !dk || !dv || reps < 1) {
        fprintf(stderr, "bench_attn: out of memory or bad arguments\n");
        return 1;
    }
    for (int i = 0; i < reps; ++i) {
        double t0 = thread_seconds(), t1, t2;

        if (nsp_attn_fwd(&p, 1, offsets, q, k, v, o, lse) != NSP_OK) {
            fprintf(stderr, "forward failed: %s\n", nsp_last_error());
            return 1;
        }
        t1 = thread_seconds();
        if (nsp_attn_bwd(&p, 1, offsets, q, k, v, o, lse, dout, dq, dk, dv) != NSP_OK) {
            fprintf(stderr, "backward failed: %s\n", nsp_last_error());
            return 1;
        }
        t2 = thread_seconds();
        best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
        best_b = t2 - t1 < best_b ? t2 - t1 : best_b;
    }
    printf("[%s] tokens %lld q_heads %d kv_heads %d head_dim %d causal: "
           "fwd %.3f s (%.1f GFLOP/s)  bwd %.3f s (%.1f GFLOP/s)  fwd+bwd %.3f s\n",
           nsp_attn_tile_isa() == NSP_ATTN_ISA_AVX2 ? "avx2" : "generic",
           (long long)T, nq, nkv, D, best_f, 4.0 * pairs * D / best_f * 1e-9, best_b,
           10.0 * pairs * D / best_b * 1e-9, best_f + best_b);
    free(q); free(k); free(v); free(dout); free(o); free(lse); free(dq); free(dk); free(dv);
    return 0;
}
