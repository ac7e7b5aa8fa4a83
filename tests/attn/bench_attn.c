/*
 * Time the host reference attention on one causal sequence.
 *   bench_attn [tokens=4096] [q_heads=8] [kv_heads=2] [head_dim=64] [reps=3]
 *              [variant=auto|generic|avx2]
 * Prints the best of `reps` thread-CPU times for forward and backward and
 * the rate in GFLOP/s (causal: 4 T^2/2 n_q D forward, 10 T^2/2 n_q D
 * backward, counting the recomputed scores).
 */
#include "nspcomm.h"
#include "nsp_opt.h"

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

/* The positional arguments [T n_q n_kv D reps], checked (tools/nsp_opt.h). */
static int bench_args(int argc, char **argv, int64_t *T, int *nq, int *nkv, int *D, int *reps)
{
    const char *p = "bench_attn";

    return (argc > 1 && nsp_opt_i64(p, "T", argv[1], 1, (int64_t)1 << 24, T) != NSP_OK) ||
           (argc > 2 && nsp_opt_int(p, "n_q", argv[2], 1, 1024, nq) != NSP_OK) ||
           (argc > 3 && nsp_opt_int(p, "n_kv", argv[3], 1, 1024, nkv) != NSP_OK) ||
           (argc > 4 && nsp_opt_int(p, "D", argv[4], 1, 1024, D) != NSP_OK) ||
           (argc > 5 && nsp_opt_int(p, "reps", argv[5], 1, 1000000, reps) != NSP_OK);
}

static int bench(int argc, char **argv, int64_t T, int nq, int nkv, int D, int reps)
{
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

int main(int argc, char **argv)
{
    int64_t T = 4096;
    int     nq = 8, nkv = 2, D = 64, reps = 3;

    if (bench_args(argc, argv, &T, &nq, &nkv, &D, &reps) != 0) {
        return NSP_OPT_EXIT_USAGE;
    }
    return bench(argc, argv, T, nq, nkv, D, reps);
}
