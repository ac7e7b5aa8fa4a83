/*
 * Test support for the nested all-to-all: random nested plans and an
 * independent single-process computation of every rank's buffers from a
 * global tensor whose value is a function of (sequence, token, head, dim).
 *
 * The reference code deliberately does not use the layout or pack code: it
 * derives chunks by handing tokens out one at a time and head shares by
 * scanning heads, so a shared mistake cannot hide.
 */
#ifndef NSP_TESTS_A2A_REF_H_
#define NSP_TESTS_A2A_REF_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** splitmix64 step: a reproducible 64-bit random number. */
uint64_t a2a_rand(uint64_t *state);
/** Uniform integer in [lo, hi]. */
int64_t a2a_rand_range(uint64_t *state, int64_t lo, int64_t hi);

/** What a random plan looks like. */
typedef struct a2a_plan_opts {
    int     nranks;      /**< ranks of the cluster */
    int     nrounds;     /**< rounds (each gets seqs_per_round sequences) */
    int     seqs_per_round;
    int64_t max_len;     /**< longest sequence, tokens (long-tailed below it) */
    int     ndegrees;    /**< the tree's degrees, ascending, each dividing the next */
    int     degrees[16]; /**< and nranks % each == 0; degrees[0] == 1 */
    int     messy;       /**< shuffle group order, split groups into duplicate entries */
} a2a_plan_opts_t;

/** A random chain of degrees 1 = d0 < d1 < ... each dividing the next and
 *  nranks; sometimes skipping some (empty levels). */
void a2a_random_degrees(uint64_t *rng, int nranks, a2a_plan_opts_t *opts);

/**
 * A random valid nested plan (aligned groups: rank0 % size == 0). Lengths
 * are long-tailed in [1, max_len], with some shorter than their degree (empty
 * chunks). Free with nsp_plan_free(). Returns NULL on allocation failure.
 */
nsp_plan_t *a2a_random_plan(uint64_t *rng, const a2a_plan_opts_t *opts);

/**
 * A random disjoint plan (FlexSP-like, one round per nrounds): each round
 * cuts the ranks into consecutive groups of sizes from {1, 2, 4} placed
 * WITHOUT alignment (a group of 4 may start at rank 2), and puts each
 * sequence in a random group. opts->degrees gets {1, 2, 4} (for
 * a2a_random_heads). Free with nsp_plan_free(); NULL on allocation failure.
 */
nsp_plan_t *a2a_random_disjoint_plan(uint64_t *rng, a2a_plan_opts_t *opts);

/** A head count that every degree of opts can shard (H % d == 0 or
 *  d % H == 0), chosen at random among 1 .. 2 * nranks. */
int a2a_random_heads(uint64_t *rng, const a2a_plan_opts_t *opts);

/** The global tensor: element (seq, token, head, dim), elem_size 2 or 4
 *  bytes, written little-endian at `out`. */
void a2a_value(int seq, int64_t token, int head, int dim, size_t elem_size, void *out);

/** As a2a_value but as a float (for SUM_F32 tests): small integers, exact. */
float a2a_value_f32(int seq, int64_t token, int head, int dim);

/** What the `f32` argument of the functions below selects: raw bytes of
 *  a2a_value, or numbers for replica sums (float32 a2a_value_f32; bfloat16
 *  or binary16 a2a_value_small, integers in [-8, 8), so that every partial
 *  sum of up to 16 replicas is exact in 16 bits). */
enum { A2A_NUM_BYTES = 0, A2A_NUM_F32 = 1, A2A_NUM_BF16 = 2, A2A_NUM_FP16 = 3 };

/** Integers in [-8, 8) (for the 16-bit replica-sum tests). */
float a2a_value_small(int seq, int64_t token, int head, int dim);

/** Store v at p as number kind `kind` (A2A_NUM_F32, _BF16, _FP16). */
void a2a_put_num(int kind, void *p, float v);

/**
 * The sequence-sharded buffer [T_local, H, D] of `rank` in `round`, from
 * the plan alone. *buf is malloc'ed (free()), *tokens its token count.
 * `f32` is an A2A_NUM_* kind (F32: elem_size 4; BF16, FP16: 2). Returns 0 or -1.
 */
int a2a_ref_seq_sharded(const nsp_plan_t *plan, int round, int rank, int heads, int head_dim,
                        size_t elem_size, int f32, void **buf, int64_t *tokens);

/**
 * The head-sharded buffer of `rank` in `round` (every level's block
 * [T_l, h_l, D], levels ascending; level 0 with all heads). With
 * `replica_sum` > 0 and f32, every replicated head's value is multiplied by
 * its replica count (what head-to-sequence with SUM_F32 gives back is the
 * sequence-sharded buffer scaled that way instead). *buf malloc'ed,
 * *rows its row count (rows of D elements). Returns 0 or -1.
 */
int a2a_ref_head_sharded(const nsp_plan_t *plan, int round, int rank, int heads, int head_dim,
                         size_t elem_size, int f32, void **buf, int64_t *rows);

/**
 * The sequence-sharded buffer after h2s with a summing mode of a
 * head-sharded buffer that held the numbers of `kind` (A2A_NUM_F32,
 * _BF16, _FP16) on every replica: each element of head h
 * at a level of degree d is multiplied by the number of ranks of the group
 * that hold h. *buf malloc'ed. Returns 0 or -1.
 */
int a2a_ref_seq_sharded_summed(const nsp_plan_t *plan, int round, int rank, int heads,
                               int head_dim, int kind, void **buf, int64_t *tokens);

/**
 * Random plan number `p` of a multi-rank case seeded `seed` (the batches of
 * test_a2a_mp and test_a2a_device): 1-2 rounds of 1-10 sequences of up to
 * 6000 tokens, groups shuffled on odd p; `disjoint`: unaligned disjoint
 * groups, else nested over random degrees. Fills *opts and *rng (the test
 * draws on from it). Free with nsp_plan_free(); NULL on allocation failure.
 */
nsp_plan_t *a2a_case_plan(uint64_t seed, int p, int nranks, int disjoint,
                          a2a_plan_opts_t *opts, uint64_t *rng);

/** One tensor of a multi-rank test for one rank and round: its
 *  sequence-sharded input `seq` [T, heads, head_dim] and head-sharded
 *  reference `ref` [rows, head_dim] (from the plan alone), and room for an
 *  exchange's head-sharded result `head` (0xab) and its way back `back`
 *  (0xcd). */
typedef struct a2a_tensor {
    int     heads, head_dim, f32;
    size_t  elem, row; /* row: head_dim * elem bytes */
    void   *seq, *head, *back, *ref;
    int64_t T, rows;
} a2a_tensor_t;

/** Fill *t (f32: a2a_value_f32, elem must be 4). Returns 0, or -1 with
 *  what was allocated still to free (a2a_tensor_free). */
int  a2a_tensor_init(a2a_tensor_t *t, const nsp_plan_t *plan, int round, int rank, int heads,
                     int head_dim, size_t elem, int f32);
void a2a_tensor_free(a2a_tensor_t *t);

#endif /* NSP_TESTS_A2A_REF_H_ */
