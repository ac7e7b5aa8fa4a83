/*
 * nspcomm.h — the one public header of nspcomm.
 *
 * nspcomm runs nested sequence parallelism (NSP) for LLM training: long
 * sequences of a batch are split over large sequence-parallel groups, short
 * ones over small groups, and the groups are nested on the same ranks.
 *
 * Conventions of this header (they hold for every function below):
 *  - Every function returns nsp_status_t: NSP_OK (0) on success, NSP_INPROGRESS
 *    (1) where work is still in flight, a negative code on error. On error,
 *    nsp_last_error() gives a message a user can act on, and no output
 *    argument has been written.
 *  - "Borrowed" pointers stay owned by the caller and are only read during the
 *    call unless the comment says otherwise. Objects returned through a `**`
 *    argument are owned by the caller and freed with the matching *_free or
 *    *_destroy function.
 *  - Units: bytes, seconds, FLOP/s, tokens. Buffer shapes are written
 *    [outer, ..., inner] in row-major order.
 *
 * Libraries: libnspcomm_planner (the planner alone: sections 1-3, pure C, no
 * UCX, hwloc, CUDA or NCCL) and libnspcomm (everything; links the planner).
 */
#ifndef NSPCOMM_H_
#define NSPCOMM_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* 1. Version, status, errors, logging                                      */
/* ======================================================================== */

#define NSP_VERSION_MAJOR 0
#define NSP_VERSION_MINOR 1
#define NSP_VERSION_PATCH 0
/** One integer that orders versions: major*10000 + minor*100 + patch. */
#define NSP_VERSION_CODE \
    (NSP_VERSION_MAJOR * 10000 + NSP_VERSION_MINOR * 100 + NSP_VERSION_PATCH)

/*
 * The one status list: code, name, description. The enum and
 * nsp_status_string() are both generated from it, so they never drift.
 */
#define NSP_STATUS_MAP(X)                                                        \
    X(NSP_OK,                  0,  "success")                                    \
    X(NSP_INPROGRESS,          1,  "operation in progress")                      \
    X(NSP_ERR_INVALID_ARG,    -1,  "invalid argument")                           \
    X(NSP_ERR_NO_MEMORY,      -2,  "out of host memory")                         \
    X(NSP_ERR_IO,             -3,  "file or socket I/O error")                   \
    X(NSP_ERR_PARSE,          -4,  "malformed input file")                       \
    X(NSP_ERR_NOT_FOUND,      -5,  "unknown name or missing entry")              \
    X(NSP_ERR_INFEASIBLE,     -6,  "no feasible plan under the memory limit")    \
    X(NSP_ERR_UNSUPPORTED,    -7,  "not supported by this build or backend")     \
    X(NSP_ERR_TIMEOUT,        -8,  "timed out waiting for a peer")               \
    X(NSP_ERR_PEER_FAILED,    -9,  "a peer disconnected or failed")              \
    X(NSP_ERR_MISMATCH,      -10,  "ranks disagree on sizes or layouts")         \
    X(NSP_ERR_BACKEND,       -11,  "error in UCX, NCCL, CUDA, hwloc or a solver")\
    X(NSP_ERR_INTERNAL,      -12,  "internal error (a bug in nspcomm)")

typedef enum {
#define NSP_STATUS_ENUM_(name, code, desc) name = (code),
    NSP_STATUS_MAP(NSP_STATUS_ENUM_)
#undef NSP_STATUS_ENUM_
} nsp_status_t;

/**
 * Name and meaning of a status, e.g. "NSP_ERR_TIMEOUT: timed out waiting for
 * a peer". Returns a static string (never NULL; unknown codes give
 * "NSP_ERR_UNKNOWN").
 */
const char *nsp_status_string(nsp_status_t status);

/**
 * The message of the last error decided in this thread (what failed, with
 * which value, and what to do), or "" if none. The string is owned by the
 * library and valid until the next nspcomm call in this thread.
 */
const char *nsp_last_error(void);

/**
 * Logging is configured from the environment on first use:
 *   NSPCOMM_LOG_LEVEL = ERROR | WARN (default) | INFO | DEBUG | TRACE
 *   NSPCOMM_LOG_FILE  = stderr (default) | stdout | a path (%h = host, %p = pid)
 * Errors are logged once, where they are decided. INFO prints the decisions
 * (plan summary, chosen tree, per-level bytes).
 */
typedef enum {
    NSP_LOG_ERROR = 0,
    NSP_LOG_WARN  = 1,
    NSP_LOG_INFO  = 2,
    NSP_LOG_DEBUG = 3,
    NSP_LOG_TRACE = 4
} nsp_log_level_t;

/** Override the log level at run time (e.g. from a framework's own flag). */
nsp_status_t nsp_log_set_level(nsp_log_level_t level);

/* ======================================================================== */
/* 2. Models and clusters (DESIGN §5.1)                                     */
/* ======================================================================== */

/** A model as the cost model sees it. Plain data; copy freely. */
typedef struct nsp_model {
    char   name[64];
    int    layers;      /**< L */
    int    hidden;      /**< h */
    int    q_heads;     /**< n_q */
    int    kv_heads;    /**< n_kv */
    int    head_dim;    /**< d_h */
    double ffn;         /**< f: active FFN width per token (MoE: k x expert width) */
    int    experts;     /**< E (0 if dense) */
    int    topk;        /**< k (0 if dense) */
    double params;      /**< P: parameter count */
} nsp_model_t;

/** A cluster as the cost model sees it. Plain data; copy freely. */
typedef struct nsp_cluster {
    char   name[64];
    int    ranks;           /**< N */
    int    ranks_per_node;  /**< G */
    double mem_bytes;       /**< M: memory per rank, bytes */
    double workspace_bytes; /**< W: workspace per rank, bytes */
    double gemm_flops;      /**< R_gemm, FLOP/s */
    double attn_flops;      /**< R_attn, FLOP/s */
    double bw_intra;        /**< B_intra: all-to-all bytes/s per rank, degree <= G */
    double bw_inter;        /**< B_inter: all-to-all bytes/s per rank, degree > G */
    double lat_intra;       /**< a_intra: seconds per collective */
    double lat_inter;       /**< a_inter: seconds per collective */
    double overlap;         /**< eta: overlap efficiency of pipelined levels, [0,1] */
} nsp_cluster_t;

/**
 * Fill *model from a built-in preset ("qwen3-30b-a3b", "qwen3-235b-a22b",
 * "llama3-8b"). Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_NOT_FOUND
 * (unknown name; the message lists the known ones).
 */
nsp_status_t nsp_model_preset(const char *name, nsp_model_t *model);

/**
 * Fill *cluster from a built-in preset ("h100", "h800") sized to `ranks`.
 * Errors: NSP_ERR_INVALID_ARG (NULL, ranks < 1, ranks not a multiple of the
 * preset's ranks per node), NSP_ERR_NOT_FOUND (unknown name).
 */
nsp_status_t nsp_cluster_preset(const char *name, int ranks, nsp_cluster_t *cluster);

/**
 * Load a model or a cluster description from a JSON file whose keys are those
 * of the plan format (DESIGN §8 "model" / "cluster" objects). A key "base"
 * names a preset to start from, so a file may give only the measured numbers.
 * Errors: NSP_ERR_IO (cannot read), NSP_ERR_PARSE (malformed; the message
 * names file, line and key), NSP_ERR_INVALID_ARG (a value out of range).
 */
nsp_status_t nsp_model_load(const char *path, nsp_model_t *model);
nsp_status_t nsp_cluster_load(const char *path, nsp_cluster_t *cluster);

/* ======================================================================== */
/* 3. Workloads, plans and planners (DESIGN §5, §8)                         */
/* ======================================================================== */

/** Sequence lengths read from a file (one length per line). Opaque. */
typedef struct nsp_workload nsp_workload_t;

/**
 * Read a length file: one positive integer per line; blank lines and lines
 * starting with '#' are skipped. On success *workload is owned by the caller
 * (nsp_workload_free). Errors: NSP_ERR_IO, NSP_ERR_PARSE (the message names
 * file and line), NSP_ERR_INVALID_ARG (a zero or negative length: file and
 * line), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_workload_load(const char *path, nsp_workload_t **workload);
size_t       nsp_workload_count(const nsp_workload_t *workload);
void         nsp_workload_free(nsp_workload_t *workload);

/**
 * Draw one global batch (DESIGN §5.3): lengths are drawn uniformly with
 * replacement, seeded by (seed, batch_index), until `token_budget` tokens are
 * reached (the last one is cut to land exactly on the budget); a length above
 * `max_len` is cut into pieces of at most max_len. Reproducible across
 * platforms. On success *lens (int64_t[*nseqs], tokens) is owned by the caller
 * and freed with free(). Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_workload_sample(const nsp_workload_t *workload, uint64_t seed,
                                 int batch_index, int64_t token_budget,
                                 int64_t max_len, int64_t **lens, int *nseqs);

/** One node of the tree holding sequences in a round. */
typedef struct nsp_plan_group {
    int  rank0;      /**< first rank of the group */
    int  size;       /**< degree d: ranks [rank0, rank0 + size) */
    int  nseqs;      /**< number of entries in seqs */
    int *seqs;       /**< indices into nsp_plan_t.seq_lens, owned by the plan */
    int  recompute;  /**< 1: activations of this group's sequences are recomputed */
    int  pipelined;  /**< 1: this level's exchange overlaps other levels' compute */
    int  ring;       /**< ring (context-parallel) degree inside the group; 1 = Ulysses only */
} nsp_plan_group_t;

/** One micro-batch. */
typedef struct nsp_plan_round {
    int               ngroups;
    nsp_plan_group_t *groups;   /**< owned by the plan */
} nsp_plan_round_t;

/** What the cost model predicts for a plan (DESIGN §5.1). */
typedef struct nsp_plan_prediction {
    double  step_s;          /**< sum over rounds of L * max over ranks */
    double  lower_bound_s;   /**< DESIGN §5.2 lower bound of the batch */
    double  plan_ms;         /**< wall time the planner took, milliseconds */
    double *rank_s;          /**< [ranks]: L * sum over rounds of the rank's time */
    double *rank_mem_bytes;  /**< [ranks]: max over rounds of the rank's memory */
} nsp_plan_prediction_t;

/** Flags of a plan. */
enum {
    NSP_PLAN_FLAG_GREEDY_FALLBACK = 1u << 0, /**< disjoint planner ran without a MILP solver */
    NSP_PLAN_FLAG_SOLVER_TIMEOUT  = 1u << 1  /**< the MILP solver hit its time limit */
};

/**
 * A plan: every sequence of a batch assigned to one (round, group). Produced
 * by nsp_plan_create() or nsp_plan_read_json(); all memory is owned by the
 * plan and released by nsp_plan_free(). Read-only for users.
 */
typedef struct nsp_plan {
    char                  planner[32];  /**< "static", "disjoint", "nested" or a user's */
    nsp_model_t           model;
    nsp_cluster_t         cluster;
    int                   nseqs;
    int64_t              *seq_lens;     /**< [nseqs], tokens */
    int                   nrounds;
    nsp_plan_round_t     *rounds;       /**< [nrounds] */
    unsigned              flags;        /**< NSP_PLAN_FLAG_* */
    nsp_plan_prediction_t predicted;
} nsp_plan_t;

typedef enum {
    NSP_PLANNER_STATIC   = 0,
    NSP_PLANNER_DISJOINT = 1,
    NSP_PLANNER_NESTED   = 2
} nsp_planner_kind_t;

/** Which optional fields of nsp_planner_params_t are set (UCX-style mask). */
enum {
    NSP_PLANNER_FIELD_STATIC_DEGREE    = 1u << 0,
    NSP_PLANNER_FIELD_STATIC_RECOMPUTE = 1u << 1,
    NSP_PLANNER_FIELD_TIME_LIMIT       = 1u << 2,
    NSP_PLANNER_FIELD_LEVEL_DEGREES    = 1u << 3,
    NSP_PLANNER_FIELD_MAX_ROUNDS       = 1u << 4,
    NSP_PLANNER_FIELD_ENABLE_RING      = 1u << 5
};

typedef struct nsp_planner_params {
    uint64_t           field_mask;       /**< NSP_PLANNER_FIELD_* that are set */
    nsp_planner_kind_t kind;             /**< always read */
    int                static_degree;    /**< static: fixed degree (default: search all) */
    int                static_recompute; /**< static: 0 or 1 (default: search both) */
    double             time_limit_s;     /**< disjoint: MILP time limit per round (default 1 s) */
    int                nlevels;          /**< nested: tree levels ... */
    const int         *level_degrees;    /**< ... their degrees, ascending, borrowed
                                              (default: 1, 2, 4, ... up to the largest valid) */
    int                max_rounds;       /**< most rounds allowed (default 64) */
    int                enable_ring;      /**< allow ring degrees above the head count (default 0) */
} nsp_planner_params_t;

/**
 * Plan one batch. `lens` ([nseqs] tokens, borrowed) are the sequences; model
 * and cluster are copied into the plan. On success *plan is owned by the
 * caller (nsp_plan_free) and carries its prediction, lower bound and planning
 * time. Errors: NSP_ERR_INVALID_ARG (a length <= 0, names the index;
 * inconsistent cluster), NSP_ERR_INFEASIBLE (a sequence no group can hold:
 * the message names the sequence, its length and the memory it needs at the
 * largest degree with recomputation), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_plan_create(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs,
                             const nsp_planner_params_t *params, nsp_plan_t **plan);

/**
 * Check a plan's invariants: every sequence in exactly one group of one round;
 * groups inside [0, ranks); degrees valid for the model; nested groups nest
 * and align (rank0 % size == 0); static/disjoint rounds disjoint; no rank
 * over memory. Errors: NSP_ERR_INVALID_ARG (the message says which invariant
 * and where).
 */
nsp_status_t nsp_plan_validate(const nsp_plan_t *plan);

/**
 * Recompute plan->predicted from the plan alone with the cost model (plan_ms
 * is kept). Errors: NSP_ERR_INVALID_ARG (invalid plan), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_plan_evaluate(nsp_plan_t *plan);

/**
 * The lower bound of DESIGN §5.2 for a batch, in seconds per step.
 * Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs, double *bound_s);

/**
 * Write a plan as one "nspcomm-plan-v1" JSON object to `out` (borrowed).
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_IO.
 */
nsp_status_t nsp_plan_write_json(const nsp_plan_t *plan, FILE *out);

/**
 * Parse a "nspcomm-plan-v1" object from `text` (borrowed, NUL-terminated).
 * The prediction is read as stored; call nsp_plan_evaluate() to recompute it.
 * On success *plan is owned by the caller. Errors: NSP_ERR_PARSE (the message
 * names line and key), NSP_ERR_INVALID_ARG (an index out of range),
 * NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_plan_read_json(const char *text, nsp_plan_t **plan);

/** Free a plan and everything it owns. NULL is a no-op. */
void nsp_plan_free(nsp_plan_t *plan);

/* ======================================================================== */
/* 4. Communicators and bootstrap (DESIGN §4) — libnspcomm only             */
/*    DRAFT: owned by the communication layer; signatures may still change. */
/* ======================================================================== */

/** A world communicator over nranks processes (opaque). */
typedef struct nsp_comm nsp_comm_t;

#define NSP_UNIQUE_ID_BYTES 128
/** Opaque bootstrap id: created on one rank, passed to the others out of band. */
typedef struct nsp_unique_id {
    char internal[NSP_UNIQUE_ID_BYTES];
} nsp_unique_id_t;

#define NSP_CONFIG_MAGIC 0x4e535043u /* "NSPC" */

/**
 * Versioned communicator configuration (NCCL-style): initialise with
 * NSP_CONFIG_INITIALIZER, then set the fields you need. Fields added in later
 * versions keep their defaults for callers compiled against older headers.
 */
typedef struct nsp_config {
    size_t      size;        /**< sizeof(nsp_config_t), set by the initializer */
    unsigned    magic;       /**< NSP_CONFIG_MAGIC */
    unsigned    version;     /**< NSP_VERSION_CODE the caller was compiled with */
    const char *backend;     /**< "ucx" or "nccl"; NULL: $NSPCOMM_BACKEND or "ucx" */
    double      timeout_s;   /**< <= 0: $NSPCOMM_TIMEOUT (seconds) or 60 */
    int         cuda_device; /**< NCCL backend: device to use; -1: the current one */
} nsp_config_t;

#define NSP_CONFIG_INITIALIZER \
    { sizeof(nsp_config_t), NSP_CONFIG_MAGIC, NSP_VERSION_CODE, NULL, 0.0, -1 }

/* ======================================================================== */
/* 5. Topology (hwloc) — libnspcomm only                                    */
/*    DRAFT: owned by the topology layer.                                   */
/* ======================================================================== */

/* ======================================================================== */
/* 6. Nested communicator tree — libnspcomm only                            */
/*    DRAFT: owned by the communication layer.                              */
/* ======================================================================== */

/* ======================================================================== */
/* 7. Layouts and the nested variable-length all-to-all (DESIGN §6)         */
/*    DRAFT: owned by the SP primitives layer.                              */
/* ======================================================================== */

/* ======================================================================== */
/* 8. Ring exchange (DESIGN §6)                                             */
/*    DRAFT: owned by the communication layer.                              */
/* ======================================================================== */

/* ======================================================================== */
/* 9. Attention: host reference and nested SP attention                     */
/*    DRAFT: owned by the attention layer.                                  */
/* ======================================================================== */

#ifdef __cplusplus
}
#endif

#endif /* NSPCOMM_H_ */
