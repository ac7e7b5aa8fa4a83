/*
 * Index maps of the CUDA pack/unpack kernels (pure; C and CUDA).
 *
 * The CUDA kernels (pack_cuda_kernels.cu) do exactly what the host
 * pack/unpack of pack.h does, for the same counts and displacements from
 * nsp_pack_counts(). Every kernel is "for each unit u: move unit_bytes from
 * src + src_off(u) to dst + dst_off(u)" (or add, for replica sums);
 * this header holds the unit maps, compiled both for the GPU and for the
 * host, so the maps are tested on a CPU against pack.c (tests/gpu/
 * test_pack_map.c through nsp_pk_emulate()) and the GPU adds only the copy.
 *
 * Units (a row is D elements, row_bytes bytes; d = degree, me = index,
 * H heads, h_p = heads held by index p, r = replicas per head):
 *
 *  op                     units          unit bytes   from -> to
 *  S2H_PACK               (t, p) L*d     h_p rows     chunks[t, first_p..] -> send[p][t]
 *  H2S_UNPACK (r == 1)    (t, p) L*d     h_p rows     recv[p][t] -> chunks[t, first_p..]
 *  H2S_UNPACK_REPL        (t, h) L*H     1 row        recv[last sending replica of h][t]
 *                                                     -> chunks[t, h]
 *  H2S_UNPACK_SUM         (t, h) L*H     1 row        first replica copied, others added,
 *                                                     in ascending index (sum_dtype)
 *  S2H_UNPACK             tau in [0,T)   h_me rows    recv[q][k] -> block[tau]
 *  H2S_PACK               tau in [0,T)   h_me rows    block[tau] -> send[q][k]
 *  S2H_SELF               t in [0,L)     h_me rows    chunks[t, first_me..] -> block[tau(t)]
 *  H2S_SELF               t in [0,L)     h_me rows    block[tau(t)] -> chunks[t, first_me..]
 *  H2S_SELF_ADD           t in [0,L)     h_me rows    chunks[t, first_me..] += block[tau(t)]
 *
 * where L = tokens of my chunks at this level, T = tokens of the whole
 * sequences, t a token of my chunks (in [L, H, D]), tau a token of the
 * head-sharded block [T, h_me, D], and (q, k) the owner of tau and the
 * position of tau among q's chunk tokens. Units whose peer has a zero count
 * move nothing, exactly as the host skips them.
 *
 * Tables per level (uploaded once per layout, int64):
 *   seq_len [nseqs]              tokens of each whole sequence
 *   seq_off [nseqs + 1]          cu_seqlens: first token of sequence j in the block
 *   cum     [d][nseqs + 1]       cum[q][j] = tokens of index q's chunks in sequences < j
 */
#ifndef NSP_ATTN_SP_PACK_MAP_H_
#define NSP_ATTN_SP_PACK_MAP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NSP_PK_FN static __host__ __device__ __forceinline__
#else
#define NSP_PK_FN static inline
#endif

typedef enum nsp_pk_op {
    NSP_PK_S2H_PACK        = 0,
    NSP_PK_H2S_UNPACK      = 1,
    NSP_PK_H2S_UNPACK_REPL = 2,
    NSP_PK_H2S_UNPACK_SUM  = 3,
    NSP_PK_S2H_UNPACK      = 4,
    NSP_PK_H2S_PACK        = 5,
    NSP_PK_S2H_SELF        = 6,
    NSP_PK_H2S_SELF        = 7,
    NSP_PK_H2S_SELF_ADD    = 8,
    NSP_PK_NOPS            = 9
} nsp_pk_op_t;

/** A level's tables as a kernel (device pointers) or the host sees them. */
typedef struct nsp_pk_level {
    int32_t        degree;
    int32_t        index;
    int32_t        nseqs;
    int32_t        unused_;
    const int64_t *seq_len;  /**< [nseqs] */
    const int64_t *seq_off;  /**< [nseqs + 1] */
    const int64_t *cum;      /**< [degree][nseqs + 1] */
} nsp_pk_level_t;

/** Everything one kernel launch needs, passed by value. */
typedef struct nsp_pk_args {
    nsp_pk_level_t  lv;
    int32_t         op;          /**< nsp_pk_op_t */
    int32_t         heads;       /**< H */
    int32_t         replicas;    /**< r: indices holding each head (1: no replication) */
    int32_t         share;       /**< h_p: heads per index (H/d, or 1 when replicated) */
    uint64_t        row_bytes;   /**< D * elem_size */
    const uint64_t *counts;      /**< [degree] bytes per peer of this side (send or recv) */
    const uint64_t *displs;      /**< [degree] byte displacement of each peer's block */
    const char     *src;
    char           *dst;
    uint64_t        units;
    uint64_t        unit_bytes;
    int32_t         sum_dtype;   /**< NSP_RD_* the sum ops add (replica_sum.h); FP32 else */
    int32_t         unused_;
} nsp_pk_args_t;

/* ---- pure maps ----------------------------------------------------------- */

/** First head held by index i of d for H heads (layout.h's nsp_head_share,
 *  for arguments it accepted). */
NSP_PK_FN int32_t nsp_pk_first_head(int32_t heads, int32_t d, int32_t i)
{
    return heads % d == 0 ? i * (heads / d) : i / (d / heads);
}

/** Index q owning token s of a sequence of n tokens cut over d, and where
 *  q's chunk starts (nsp_chunk_of inverted). */
NSP_PK_FN int32_t nsp_pk_owner(int64_t n, int32_t d, int64_t s, int64_t *start)
{
    int64_t base = n / d, rem = n % d, big = rem * (base + 1);
    int64_t q;

    if (s < big) {
        q      = s / (base + 1);
        *start = q * (base + 1);
    } else {
        q      = rem + (s - big) / base;
        *start = q * base + rem;
    }
    return (int32_t)q;
}

/** Block token tau -> its owner q and its position among q's chunk tokens. */
NSP_PK_FN void nsp_pk_block_token(const nsp_pk_level_t *lv, int64_t tau, int32_t *q,
                                  int64_t *q_tok)
{
    int32_t lo = 0, hi = lv->nseqs - 1;
    int64_t start, s;

    while (lo < hi) { /* largest j with seq_off[j] <= tau */
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (lv->seq_off[mid] <= tau) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    s      = tau - lv->seq_off[lo];
    *q     = nsp_pk_owner(lv->seq_len[lo], lv->degree, s, &start);
    *q_tok = lv->cum[(int64_t)*q * (lv->nseqs + 1) + lo] + (s - start);
}

/** Index q's chunk token t -> its token in the block. */
NSP_PK_FN int64_t nsp_pk_chunk_token(const nsp_pk_level_t *lv, int32_t q, int64_t t)
{
    const int64_t *c  = lv->cum + (int64_t)q * (lv->nseqs + 1);
    int32_t        lo = 0, hi = lv->nseqs - 1;
    int64_t        n, base, rem;

    while (lo < hi) { /* largest j < nseqs with c[j] <= t: its chunk holds t */
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (c[mid] <= t) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    n    = lv->seq_len[lo];
    base = n / lv->degree;
    rem  = n % lv->degree;
    return lv->seq_off[lo] + (int64_t)q * base + (q < rem ? q : rem) + (t - c[lo]);
}

/**
 * The copy of unit u: 1 with byte offsets into src and dst, or 0 when the
 * unit moves nothing (its peer's count is zero). Not for the _SUM and
 * _ADD ops (see nsp_pk_sum_row()).
 */
NSP_PK_FN int nsp_pk_unit(const nsp_pk_args_t *a, uint64_t u, uint64_t *src_off,
                          uint64_t *dst_off)
{
    const uint64_t d  = (uint64_t)a->lv.degree;
    const uint64_t H  = (uint64_t)a->heads;
    const uint64_t rb = a->row_bytes;
    const uint64_t me = (uint64_t)a->lv.index;

    switch (a->op) {
    case NSP_PK_S2H_PACK:
    case NSP_PK_H2S_UNPACK: {
        uint64_t t = u / d, p = u - t * d;
        uint64_t chunk, peer;
        if (a->counts[p] == 0) {
            return 0;
        }
        chunk = (t * H + (uint64_t)nsp_pk_first_head(a->heads, a->lv.degree, (int32_t)p)) * rb;
        peer  = a->displs[p] + t * (uint64_t)a->share * rb;
        *src_off = a->op == NSP_PK_S2H_PACK ? chunk : peer;
        *dst_off = a->op == NSP_PK_S2H_PACK ? peer : chunk;
        return 1;
    }
    case NSP_PK_H2S_UNPACK_REPL: {
        uint64_t t = u / H, h = u - t * H;
        int64_t  p = -1;
        /* The last replica that sent the head wins, as on the host. */
        for (uint64_t k = 0; k < (uint64_t)a->replicas; ++k) {
            if (a->counts[h * (uint64_t)a->replicas + k] != 0) {
                p = (int64_t)(h * (uint64_t)a->replicas + k);
            }
        }
        if (p < 0) {
            return 0;
        }
        *src_off = a->displs[p] + t * rb;
        *dst_off = (t * H + h) * rb;
        return 1;
    }
    case NSP_PK_S2H_UNPACK:
    case NSP_PK_H2S_PACK: {
        int32_t  q;
        int64_t  k;
        uint64_t tok = (uint64_t)a->share * rb;
        nsp_pk_block_token(&a->lv, (int64_t)u, &q, &k);
        if (a->counts[q] == 0) {
            return 0;
        }
        *src_off = a->op == NSP_PK_S2H_UNPACK ? a->displs[q] + (uint64_t)k * tok : u * tok;
        *dst_off = a->op == NSP_PK_S2H_UNPACK ? u * tok : a->displs[q] + (uint64_t)k * tok;
        return 1;
    }
    case NSP_PK_S2H_SELF:
    case NSP_PK_H2S_SELF:
    case NSP_PK_H2S_SELF_ADD: {
        uint64_t tok   = (uint64_t)a->share * rb;
        uint64_t block = (uint64_t)nsp_pk_chunk_token(&a->lv, (int32_t)me, (int64_t)u) * tok;
        uint64_t chunk = (u * H + (uint64_t)nsp_pk_first_head(a->heads, a->lv.degree,
                                                              (int32_t)me)) * rb;
        *src_off = a->op == NSP_PK_S2H_SELF ? chunk : block;
        *dst_off = a->op == NSP_PK_S2H_SELF ? block : chunk;
        return 1;
    }
    default:
        return 0;
    }
}

/**
 * H2S_UNPACK_SUM, unit u = (t, h), replica k of head h: 1 with the byte
 * offset of that replica's row in src when it sent one, else 0. The kernel
 * copies k = 0's row (or keeps the chunk's value when it sent none), adds
 * the others in ascending k, and writes the row back to dst at *dst_off.
 */
NSP_PK_FN int nsp_pk_sum_row(const nsp_pk_args_t *a, uint64_t u, uint32_t k, uint64_t *src_off,
                             uint64_t *dst_off)
{
    const uint64_t H = (uint64_t)a->heads, rb = a->row_bytes;
    uint64_t       t = u / H, h = u - t * H;
    uint64_t       p = h * (uint64_t)a->replicas + k;

    *dst_off = (t * H + h) * rb;
    if (a->counts[p] == 0) {
        return 0;
    }
    *src_off = a->displs[p] + t * rb;
    return 1;
}

/* ---- host side (pack_map.c) ----------------------------------------------- */
#ifndef __CUDACC__

#include "attn_sp/pack.h"

/** A level's tables in host memory (pure index math from the view). */
typedef struct nsp_pk_tables {
    nsp_pk_level_t lv;      /**< pointers into data */
    int64_t       *data;    /**< owned: seq_len | seq_off | cum */
    size_t         words;   /**< int64 words in data */
    int64_t        mine;    /**< L: tokens of this index's chunks */
    int64_t        total;   /**< T: tokens of the whole sequences */
} nsp_pk_tables_t;

/** Build the tables of a level view (d >= 1). On success t->data is owned
 *  by the caller (nsp_pk_tables_free). Errors: NSP_ERR_INVALID_ARG,
 *  NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_pk_tables_build(const nsp_level_view_t *view, nsp_pk_tables_t *t);
void         nsp_pk_tables_free(nsp_pk_tables_t *t);

/**
 * Fill *a for one op: units, unit bytes, head share and replicas from the
 * host tables `t` (totals); `lv` is the level as the kernel will see it
 * (device pointers for a launch, &t->lv for the emulation); counts and
 * displs as they will be seen (device or host). The host pack functions'
 * errors are the same here: NSP_ERR_INVALID_ARG (heads and degree do not
 * divide one another; a sum op whose rows are not whole elements of the
 * replica mode's sum). `mode` is the exchange's replica mode: a sum op
 * adds in its element type (sum_dtype), the other ops ignore it.
 */
nsp_status_t nsp_pk_args_make(const nsp_pk_tables_t *t, const nsp_pk_level_t *lv,
                              nsp_pk_op_t op, nsp_a2a_replicas_t mode, int heads,
                              size_t row_bytes,
                              const uint64_t *counts, const uint64_t *displs, const void *src,
                              void *dst, nsp_pk_args_t *a);

/**
 * Bytes per vector of a launch: the largest power of two <= 16 dividing
 * the row bytes, both base addresses and every displacement in
 * host_displs[n] (NULL: none), so every access of the kernel is aligned.
 * Pure.
 */
size_t nsp_pk_vector_bytes(const nsp_pk_args_t *a, const uint64_t *host_displs, int n);

/**
 * Which op does what the host nsp_unpack_h2s() does for this level:
 * H2S_UNPACK without replication (the replica mode does not matter then),
 * H2S_UNPACK_REPL (REPLICAS_FIRST) or H2S_UNPACK_SUM (a summing mode) with it.
 * Errors: as nsp_head_share().
 */
nsp_status_t nsp_pk_op_unpack_h2s(const nsp_pk_tables_t *t, int heads,
                                  nsp_a2a_replicas_t replicas, nsp_pk_op_t *op);

/**
 * Which op does what nsp_pack_copy_self() does: S2H_SELF; H2S_SELF for the
 * first replica of its heads; for another replica H2S_SELF_ADD with
 * a summing mode, or nothing (*op = NSP_PK_NOPS) with REPLICAS_FIRST.
 * Errors: as nsp_head_share().
 */
nsp_status_t nsp_pk_op_copy_self(const nsp_pk_tables_t *t, nsp_a2a_dir_t dir, int heads,
                                 nsp_a2a_replicas_t replicas, nsp_pk_op_t *op);

/** Run an op's units on the host exactly as the kernel does (tests, and
 *  the host pack ops of pack_ops.h). */
void nsp_pk_emulate(const nsp_pk_args_t *a);

/** Name of an op, for messages. */
const char *nsp_pk_op_name(nsp_pk_op_t op);

#endif /* !__CUDACC__ */

#endif /* NSP_ATTN_SP_PACK_MAP_H_ */
