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
 * UCX, hwloc, CUDA or NCCL) and libnspcomm (everything, the planner
 * included: link one of the two). Each exports exactly the functions of
 * this header it implements.
 */
#ifndef NSPCOMM_H_
#define NSPCOMM_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * NSP_EXPORT marks the functions of this header: the library is built with
 * -fvisibility=hidden, so these (and nothing else) are its exported symbols.
 */
#if defined(__GNUC__) && __GNUC__ >= 4
#define NSP_EXPORT __attribute__((visibility("default")))
#else
#define NSP_EXPORT
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
NSP_EXPORT
const char *nsp_status_string(nsp_status_t status);

/**
 * The message of the last error decided in this thread (what failed, with
 * which value, and what to do), or "" if none. The string is owned by the
 * library and valid until the next nspcomm call in this thread.
 */
NSP_EXPORT
const char *nsp_last_error(void);

/*
 * Version and ABI of the library that is loaded (which may not be the one a
 * caller was compiled against). A binding that mirrors the structs of this
 * header (ctypes, cffi) checks them at load and refuses to run on a
 * mismatch instead of corrupting memory.
 */

/**
 * The loaded library's version; any output may be NULL. code is
 * NSP_VERSION_CODE of the library's build. Never fails (NSP_OK).
 */
NSP_EXPORT
nsp_status_t nsp_version(int *major, int *minor, int *patch, unsigned *code);

/**
 * sizeof the public struct named by its typedef in this header (e.g.
 * "nsp_plan_t", "nsp_layout_level_t", "nsp_nested_attn_stats_t"), as the
 * library was compiled. `name` is borrowed.
 * Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_NOT_FOUND (not a public
 * struct: the message gives the library's version).
 */
NSP_EXPORT
nsp_status_t nsp_struct_size(const char *name, size_t *size);

/**
 * Check that the caller's header matches the library: same major and minor
 * version, same sizeof(nsp_plan_t) and sizeof(nsp_nested_attn_params_t).
 * Call it as NSP_ABI_CHECK(). Errors: NSP_ERR_MISMATCH (the message gives
 * both versions or both sizes).
 */
NSP_EXPORT
nsp_status_t nsp_abi_check(unsigned version_code, size_t plan_size, size_t params_size);
#define NSP_ABI_CHECK() \
    nsp_abi_check(NSP_VERSION_CODE, sizeof(nsp_plan_t), sizeof(nsp_nested_attn_params_t))

/**
 * Logging is configured from the environment on first use:
 *   NSPCOMM_LOG_LEVEL = NONE | ERROR | WARN (default) | INFO | DEBUG | TRACE
 *   NSPCOMM_LOG_FILE  = stderr (default) | stdout | a path (%h = host, %p = pid)
 * Errors are logged once, where they are decided (nsp_last_error() keeps the
 * message at every level, NONE included). INFO prints the decisions (the
 * chosen tree, the plan summary, the communicator); DEBUG adds one line per
 * call (each level of each all-to-all and attention call); NONE prints
 * nothing at all.
 */
typedef enum {
    NSP_LOG_NONE  = -1,
    NSP_LOG_ERROR = 0,
    NSP_LOG_WARN  = 1,
    NSP_LOG_INFO  = 2,
    NSP_LOG_DEBUG = 3,
    NSP_LOG_TRACE = 4
} nsp_log_level_t;

/** Override the log level at run time (e.g. from a framework's own flag).
 *  Errors: NSP_ERR_INVALID_ARG (not one of nsp_log_level_t). */
NSP_EXPORT
nsp_status_t nsp_log_set_level(nsp_log_level_t level);

/* ======================================================================== */
/* 2. Models and clusters (docs/design.md §5.1)                                     */
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
    double round_fixed_s;   /**< seconds every round (micro-batch) adds to a step, whatever
                                 it holds; < 0 (presets: NSP_ROUND_FIXED_DERIVED) = derived
                                 from model and cluster: (1 - eta) x the per-micro-batch
                                 weight traffic of ZeRO-3/FSDP + kernel launches
                                 (docs/reference/cost-model.md section 8) */
    /* The CPU an exchange costs the sending and receiving rank where the CPU
     * moves the bytes (shared-memory copies, a tcp stack): added to the rank's
     * compute, not hidden by eta (docs/reference/cost-model.md section 9). 0 (the
     * presets' and the default of a cluster file) where NICs, DMA or NVLink
     * move them; then every cost is what it was without these fields. */
    double cpu_byte_intra;  /**< seconds of rank CPU per byte sent + received, degree <= G */
    double cpu_byte_inter;  /**< the same for a degree > G */
    double cpu_call_intra;  /**< seconds of rank CPU per collective call, degree <= G */
    double cpu_call_inter;  /**< the same for a degree > G */
} nsp_cluster_t;

/** The most ranks a cluster may have (nsp_cluster_preset, nsp_cluster_load,
 *  nsp_plan_create), and the most sequences one batch may hold
 *  (nsp_workload_sample, nsp_plan_create): larger requests are
 *  NSP_ERR_INVALID_ARG with a message, before anything is allocated. */
#define NSP_MAX_RANKS      (1 << 20)
#define NSP_MAX_BATCH_SEQS (1 << 24)
/** nsp_cluster_t.round_fixed_s: derive the per-round cost (the default). */
#define NSP_ROUND_FIXED_DERIVED (-1.0)

/**
 * Fill *model from a built-in preset ("qwen3-30b-a3b", "qwen3-235b-a22b",
 * "llama3-8b"). Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_NOT_FOUND
 * (unknown name; the message lists the known ones).
 */
NSP_EXPORT
nsp_status_t nsp_model_preset(const char *name, nsp_model_t *model);

/**
 * Fill *cluster from a built-in preset ("h100", "h800") sized to `ranks`.
 * Errors: NSP_ERR_INVALID_ARG (NULL, ranks < 1 or above NSP_MAX_RANKS, ranks
 * not a multiple of the preset's ranks per node), NSP_ERR_NOT_FOUND (unknown
 * name).
 */
NSP_EXPORT
nsp_status_t nsp_cluster_preset(const char *name, int ranks, nsp_cluster_t *cluster);

/**
 * Load a model or a cluster description from a JSON file whose keys are those
 * of the plan format (docs/design.md §8 "model" / "cluster" objects). A key "base"
 * names a preset to start from, so a file may give only the measured numbers.
 * Errors: NSP_ERR_IO (cannot read), NSP_ERR_PARSE (malformed; the message
 * names file, line and key), NSP_ERR_INVALID_ARG (a value out of range).
 */
NSP_EXPORT
nsp_status_t nsp_model_load(const char *path, nsp_model_t *model);
NSP_EXPORT
nsp_status_t nsp_cluster_load(const char *path, nsp_cluster_t *cluster);

/* ======================================================================== */
/* 3. Workloads, plans and planners (docs/design.md §5, §8)                         */
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
NSP_EXPORT
nsp_status_t nsp_workload_load(const char *path, nsp_workload_t **workload);
NSP_EXPORT
size_t       nsp_workload_count(const nsp_workload_t *workload);
NSP_EXPORT
void         nsp_workload_free(nsp_workload_t *workload);

/**
 * Draw one global batch (docs/design.md §5.3): lengths are drawn uniformly with
 * replacement, seeded by (seed, batch_index), until `token_budget` tokens are
 * reached (the last one is cut to land exactly on the budget); a length above
 * `max_len` is cut into pieces of at most max_len. Reproducible across
 * platforms. On success *lens (int64_t[*nseqs], tokens) is owned by the caller
 * and freed with free(). Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
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

/** What the cost model predicts for a plan (docs/design.md §5.1). */
typedef struct nsp_plan_prediction {
    double  step_s;          /**< sum over rounds of (L * max over ranks + round_s) */
    double  lower_bound_s;   /**< docs/design.md §5.2 lower bound of the batch */
    double  plan_ms;         /**< wall time the planner took, milliseconds */
    double *rank_s;          /**< [ranks]: L * sum over rounds of the rank's time */
    double *rank_mem_bytes;  /**< [ranks]: max over rounds of the rank's memory */
    double  round_s;         /**< the fixed cost of one round, seconds (cluster
                                  round_fixed_s, resolved); step_s includes nrounds x it */
} nsp_plan_prediction_t;

/** Flags of a plan. */
enum {
    NSP_PLAN_FLAG_GREEDY_FALLBACK = 1u << 0, /**< disjoint planner ran without a MILP solver */
    NSP_PLAN_FLAG_SOLVER_TIMEOUT  = 1u << 1, /**< the MILP solver hit its time limit */
    NSP_PLAN_FLAG_RING            = 1u << 2  /**< planned with enable_ring: groups may be
                                                  Ulysses x ring, and lower_bound_s lets a
                                                  sequence use every rank
                                                  (docs/reference/cost-model.md) */
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
    NSP_PLANNER_NESTED   = 2,
    NSP_PLANNER_MEGATRON = 3   /**< Megatron-Core's dynamic (hybrid) context parallelism
                                    policy as a baseline (docs/reference/planners.md) */
} nsp_planner_kind_t;

/**
 * The kind whose plans are named `name` (borrowed): "static", "disjoint",
 * "nested", "megatron", or any kind this build adds (nsp_planner_at() lists
 * them all). Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_NOT_FOUND (unknown
 * name: the message lists the known ones).
 */
NSP_EXPORT
nsp_status_t nsp_planner_kind_from_name(const char *name, nsp_planner_kind_t *kind);

/**
 * How many planners this build has (to list them with nsp_planner_at(), e.g.
 * to offer every one in a tool or a binding). Errors: NSP_ERR_INVALID_ARG
 * (NULL count).
 */
NSP_EXPORT
nsp_status_t nsp_planner_count(int *count);

/**
 * The planner at `index` (0 <= index < nsp_planner_count(), always in the
 * same order: static, disjoint, nested, megatron, then any this build adds):
 * its kind (params.kind selecting it; a build's extra planner may have a
 * kind outside nsp_planner_kind_t's names) and its name (a static string:
 * nsp_plan_t.planner of its plans, what nsp_planner_kind_from_name() takes).
 * Either output may be NULL. Errors: NSP_ERR_INVALID_ARG (index out of
 * range: the message gives the count).
 */
NSP_EXPORT
nsp_status_t nsp_planner_at(int index, nsp_planner_kind_t *kind, const char **name);

/** Which optional fields of nsp_planner_params_t are set (UCX-style mask). */
enum {
    NSP_PLANNER_FIELD_STATIC_DEGREE    = 1u << 0,
    NSP_PLANNER_FIELD_STATIC_RECOMPUTE = 1u << 1,
    NSP_PLANNER_FIELD_TIME_LIMIT       = 1u << 2,
    NSP_PLANNER_FIELD_LEVEL_DEGREES    = 1u << 3,
    NSP_PLANNER_FIELD_MAX_ROUNDS       = 1u << 4,
    NSP_PLANNER_FIELD_ENABLE_RING      = 1u << 5,
    NSP_PLANNER_FIELD_MAX_SEQLEN       = 1u << 6
};

typedef struct nsp_planner_params {
    uint64_t           field_mask;       /**< NSP_PLANNER_FIELD_* that are set */
    nsp_planner_kind_t kind;             /**< always read */
    int                static_degree;    /**< static: fixed degree (default: search all) */
    int                static_recompute; /**< static, megatron: 0 or 1 (default: search both) */
    double             time_limit_s;     /**< disjoint: MILP time limit per round (default 1 s) */
    int                nlevels;          /**< nested: tree levels ... */
    const int         *level_degrees;    /**< ... their degrees, ascending, borrowed
                                              (default: 1, 2, 4, ... up to the largest valid) */
    int                max_rounds;       /**< most rounds allowed (default 64) */
    int                enable_ring;      /**< 1: groups may be Ulysses x ring (ring degree
                                              r > 1), so degrees go above the head count up
                                              to the ranks (default 0: Ulysses only; see
                                              docs/reference/cost-model.md) */
    int64_t            max_seqlen_per_rank; /**< megatron: tokens per rank that size a
                                              sequence's group (2^ceil(log2(len / it))
                                              ranks); default: searched over the values
                                              the batch and memory allow. Recompute:
                                              static_recompute (default: both tried) */
} nsp_planner_params_t;

/**
 * Plan one batch. `lens` ([nseqs] tokens, borrowed) are the sequences; model
 * and cluster are copied into the plan. On success *plan is owned by the
 * caller (nsp_plan_free) and carries its prediction, lower bound and planning
 * time; with params.enable_ring it carries NSP_PLAN_FLAG_RING and the bound
 * with rings. Errors: NSP_ERR_INVALID_ARG (a length <= 0, names the index;
 * inconsistent cluster; more than NSP_MAX_RANKS ranks or NSP_MAX_BATCH_SEQS
 * sequences; a parameter out of range; a params.kind no planner of this
 * build has: the message lists the kinds), NSP_ERR_INFEASIBLE (a sequence no group can hold:
 * the message names the sequence, its length and the memory it needs at the
 * largest degree with recomputation), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_plan_create(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs,
                             const nsp_planner_params_t *params, nsp_plan_t **plan);

/**
 * Check a plan's invariants: every sequence in exactly one group of one round;
 * groups inside [0, ranks); degrees valid for the model (size / ring a
 * Ulysses degree: it divides n_q, and divides n_kv or is a multiple of it);
 * nested groups nest
 * and align (rank0 % size == 0); static/disjoint rounds disjoint; no rank
 * over memory. Errors: NSP_ERR_INVALID_ARG (the message says which invariant
 * and where).
 */
NSP_EXPORT
nsp_status_t nsp_plan_validate(const nsp_plan_t *plan);

/**
 * Recompute plan->predicted from the plan alone with the cost model (plan_ms
 * is kept). Errors: NSP_ERR_INVALID_ARG (invalid plan), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_plan_evaluate(nsp_plan_t *plan);

/**
 * The lower bound of docs/design.md §5.2 for a batch, in seconds per step (Ulysses
 * degrees only). Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs, double *bound_s);

/**
 * The lower bound nsp_plan_create() reports for this batch with these
 * `params` (borrowed): nsp_lower_bound() unless params enable rings, in which
 * case the longest sequence may spread over every rank (docs/reference/cost-model.md).
 * Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_planner_lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                                     const int64_t *lens, int nseqs,
                                     const nsp_planner_params_t *params, double *bound_s);

/**
 * Write a plan as one "nspcomm-plan-v1" JSON object to `out` (borrowed).
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_IO.
 */
NSP_EXPORT
nsp_status_t nsp_plan_write_json(const nsp_plan_t *plan, FILE *out);

/**
 * Parse a "nspcomm-plan-v1" object from `text` (borrowed, NUL-terminated).
 * The prediction is read as stored; call nsp_plan_evaluate() to recompute it.
 * On success *plan is owned by the caller. Errors: NSP_ERR_PARSE (the message
 * names line and key), NSP_ERR_INVALID_ARG (an index out of range),
 * NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_plan_read_json(const char *text, nsp_plan_t **plan);

/** Free a plan and everything it owns. NULL is a no-op. */
NSP_EXPORT
void nsp_plan_free(nsp_plan_t *plan);

/* ======================================================================== */
/* 4. Communicators, bootstrap and requests (docs/design.md §4) — libnspcomm only   */
/* ======================================================================== */

/*
 * A world communicator spans nranks processes. Three ways to create one:
 *  - standalone (NCCL-style): one process calls nsp_get_unique_id(), passes
 *    the id to every rank out of band (a file, the environment through
 *    nsp_unique_id_to_string(), the launcher), and every rank calls
 *    nsp_comm_init_rank();
 *  - inside a framework (UCC-style): nsp_comm_init_oob() with the
 *    framework's own out-of-band allgather callbacks;
 *  - under mpirun/srun: nsp_comm_init_env() reads rank and size from the
 *    launcher's environment and meets at NSPCOMM_ROOT=host:port.
 *
 * Environment read by every init (the config fields win when set):
 *   NSPCOMM_BACKEND      "ucx" (default) or "nccl"
 *   NSPCOMM_TIMEOUT      seconds a peer may stay silent before an operation
 *                        fails with NSP_ERR_TIMEOUT (default 60)
 *   NSPCOMM_SOCKET_IFNAME interface whose IPv4 address nsp_get_unique_id
 *                        advertises (default: the first non-loopback one
 *                        that is up, else 127.0.0.1)
 *   NSPCOMM_UCX_ERR_MODE auto (default): UCX peer error handling for ranks on
 *                        other hosts, pid watching for ranks on this host
 *                        (UCX 1.13's shared-memory transports cannot report
 *                        peer failures); peer: UCX error handling for all
 *                        (on one host this forces tcp); none
 *   NSPCOMM_TOKEN        nsp_comm_init_env: the job's shared secret (at least
 *                        16 characters, the same on every rank), from which
 *                        the NSPCOMM_ROOT rendezvous's key is derived;
 *                        NSPCOMM_TOKEN_FILE names a file holding it instead.
 *                        Without either the rendezvous listens on loopback
 *                        only (one host). See docs/design/security.md.
 *   NSPCOMM_PROGRESS_THREAD auto (default): a UCX world with ranks on other
 *                        hosts owns a thread that progresses the worker
 *                        while the rank computes (tcp moves bytes only then);
 *                        on; off. The rank's own calls stay single-threaded.
 * UCX's own variables (UCX_TLS, UCX_NET_DEVICES, ...) are honoured.
 *
 * A communicator is driven by one thread at a time. Operations on it never
 * hang on a dead or silent peer: they fail with NSP_ERR_PEER_FAILED (a rank
 * known to have exited: within about a second on one host) or
 * NSP_ERR_TIMEOUT (nothing arrived for the timeout), and the communicator
 * (with every tree built on it) is then broken: free requests and destroy,
 * nothing else. See docs/guide/c-api.md.
 */

/** A world communicator over nranks processes (opaque). */
typedef struct nsp_comm nsp_comm_t;

#define NSP_UNIQUE_ID_BYTES 128
/**
 * Opaque bootstrap id: created on one process, passed to every rank. Copy
 * freely, but treat it as a credential: it holds the rendezvous's address
 * and its 32-byte secret, and whoever holds it can join the world.
 */
typedef struct nsp_unique_id {
    char internal[NSP_UNIQUE_ID_BYTES];
} nsp_unique_id_t;

/** Room for nsp_unique_id_to_string() output, NUL included (an IPv6
 *  address, port and 64 hex digits of secret; was 96 before the secret). */
#define NSP_UNIQUE_ID_STRLEN 128

#define NSP_CONFIG_MAGIC 0x4e535043u /* "NSPC" */

/**
 * Versioned communicator configuration (NCCL-style): initialise with
 * NSP_CONFIG_INITIALIZER, then set the fields you need. The library reads
 * only the first `size` bytes, so a caller compiled against an older header
 * keeps the defaults of fields added later. A config whose magic is not
 * NSP_CONFIG_MAGIC (not initialised) is rejected with NSP_ERR_INVALID_ARG.
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

/**
 * Create a bootstrap id and start serving its TCP rendezvous: a thread of
 * THIS process listens on a free port of the advertised interface (see
 * NSPCOMM_SOCKET_IFNAME) and relays the ranks' bootstrap data. The id holds
 * a fresh random 32-byte secret: a rank proves it holds it by HMAC-SHA256
 * over a random challenge (the secret never crosses the network), the
 * server proves it back, and connections that do not are closed without
 * disturbing the others (docs/design/security.md). The calling process must stay alive until every
 * rank's nsp_comm_init_rank() with this id has returned (if it is itself a
 * rank, its own init waits for the others to finish bootstrap). The thread
 * ends when all ranks have finished bootstrap, or when ranks that joined
 * wait more than their timeout for missing ones (they get NSP_ERR_TIMEOUT
 * naming the missing ranks). An id serves one communicator; an id never
 * used keeps its thread and socket until the process exits. A launcher that
 * forks its ranks should fork first and create the id after: a child forked
 * beside a live thread can inherit a lock that thread held (tests/mp.h).
 * Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_IO (socket/bind),
 * NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_get_unique_id(nsp_unique_id_t *id);

/**
 * Printable form of an id, "ADDRESS:PORT:SECRET" (SECRET: 64 hex digits,
 * e.g. "10.1.2.3:40123:9f86d0...0a08"), for passing through the environment
 * or a file readable by the job's user only (it is a credential).
 * `buf` (borrowed) needs NSP_UNIQUE_ID_STRLEN bytes.
 * Errors: NSP_ERR_INVALID_ARG (NULL, buffer too small, not an id).
 */
NSP_EXPORT
nsp_status_t nsp_unique_id_to_string(const nsp_unique_id_t *id, char *buf, size_t len);

/**
 * Parse the printable form back. "HOST:PORT" without a secret is accepted
 * too (the NSPCOMM_ROOT form: nsp_comm_init_env adds the secret from
 * NSPCOMM_TOKEN); HOST may be a name or an IPv4 address. Errors: NSP_ERR_INVALID_ARG (NULL), NSP_ERR_PARSE (the
 * message quotes the text), NSP_ERR_NOT_FOUND (host name does not resolve).
 */
NSP_EXPORT
nsp_status_t nsp_unique_id_from_string(const char *str, nsp_unique_id_t *id);

/**
 * Join the world of `nranks` ranks as `rank` (0 <= rank < nranks) through
 * the rendezvous of `id`; collective over all ranks. `config` (borrowed) may
 * be NULL for the defaults. On success *comm is owned by the caller
 * (nsp_comm_destroy).
 * Errors: NSP_ERR_INVALID_ARG (NULL, rank/nranks out of range, bad config:
 * magic, size; unknown backend; refused by the rendezvous: the id's secret
 * or NSPCOMM_TOKEN differs, or this rank already joined from another
 * process), NSP_ERR_UNSUPPORTED (backend not built),
 * NSP_ERR_TIMEOUT (rendezvous unreachable or ranks missing within the
 * timeout; the message names them), NSP_ERR_MISMATCH (ranks disagree on
 * nranks), NSP_ERR_PEER_FAILED, NSP_ERR_IO, NSP_ERR_BACKEND,
 * NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_comm_init_rank(nsp_comm_t **comm, int nranks, nsp_unique_id_t id, int rank,
                                const nsp_config_t *config);

/**
 * Out-of-band allgather callbacks of a framework (UCC's ucc_oob_coll_t):
 * nsp_comm_init_oob() uses them only during the call, a few times, one at a
 * time, never from another thread.
 */
typedef struct nsp_oob_coll {
    /**
     * Start an allgather: every endpoint contributes `msglen` bytes of
     * `sbuf`; `rbuf` receives [n_oob_eps][msglen] in endpoint order. Store a
     * handle in *request. Returns NSP_OK or an error.
     */
    nsp_status_t (*allgather)(void *sbuf, void *rbuf, size_t msglen, void *coll_info,
                              void **request);
    /** NSP_OK when the allgather completed, NSP_INPROGRESS, or an error. */
    nsp_status_t (*req_test)(void *request);
    /** Release the handle (also called on a timed-out, incomplete one). */
    nsp_status_t (*req_free)(void *request);
    void    *coll_info;  /**< passed back to allgather, borrowed */
    uint32_t n_oob_eps;  /**< number of endpoints = ranks of the world */
    uint32_t oob_ep;     /**< this process's endpoint = its rank */
} nsp_oob_coll_t;

/**
 * Create the world through `oob` (borrowed during the call): rank = oob_ep,
 * size = n_oob_eps. Collective over all endpoints.
 * Errors: as nsp_comm_init_rank; an error returned by a callback is passed
 * through (with a message saying which callback), a callback that never
 * completes gives NSP_ERR_TIMEOUT.
 */
NSP_EXPORT
nsp_status_t nsp_comm_init_oob(nsp_comm_t **comm, const nsp_oob_coll_t *oob,
                               const nsp_config_t *config);

/**
 * Create the world from a launcher's environment: rank and size from the
 * first pair that is set of NSPCOMM_RANK/NSPCOMM_NRANKS (explicit),
 * RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
 * PMI_RANK/PMI_SIZE (MPICH, Intel MPI) and SLURM_PROCID/SLURM_NTASKS
 * (srun); the rendezvous address from NSPCOMM_ROOT=host:port, where rank 0
 * listens (on that address, for this one communicator) and the others
 * connect, retrying until the timeout while rank 0 is not up yet. Use a
 * port free on rank 0's host. Without NSPCOMM_ROOT, torchrun's MASTER_ADDR
 * is the host and the port is NSPCOMM_PORT, else MASTER_PORT + 1 (torchrun's
 * own store holds MASTER_PORT); LOCAL_RANK < LOCAL_WORLD_SIZE is checked
 * when both are set (placement comes from the host identities). Ranks
 * authenticate with the secret of NSPCOMM_TOKEN (or NSPCOMM_TOKEN_FILE);
 * without one the rendezvous listens on 127.0.0.1 only, and a rank whose
 * rendezvous host is another one fails with NSP_ERR_INVALID_ARG telling
 * it to set NSPCOMM_TOKEN.
 * Errors: NSP_ERR_NOT_FOUND (no rank/size or no NSPCOMM_ROOT in the
 * environment: the message lists the variables tried), NSP_ERR_PARSE (a
 * malformed value), NSP_ERR_IO (rank 0 cannot listen on the port), and
 * those of nsp_comm_init_rank.
 */
NSP_EXPORT
nsp_status_t nsp_comm_init_env(nsp_comm_t **comm, const nsp_config_t *config);

/**
 * Which launcher started this process, by the variables nsp_comm_init_env()
 * reads: *name "nspcomm", "torchrun", "mpirun", "pmi" or "srun" (a static
 * string) with this process's *rank and the world *size; or *name NULL and
 * *rank = *size = 0 when none is set (not an error). Tools that fork their
 * own ranks use it to refuse running under a launcher.
 * Errors: NSP_ERR_INVALID_ARG (NULL output), NSP_ERR_PARSE (a malformed
 * value, or rank >= size: the message names the variables).
 */
NSP_EXPORT
nsp_status_t nsp_launcher_detect(const char **name, int *rank, int *size);

/**
 * Wrap a communicator the framework already has (docs/design.md §4): `nccl_comm` is
 * an ncclComm_t, passed as void * so this header needs no nccl.h. It must be
 * initialised and healthy; it stays owned by the caller, who destroys it
 * only after nsp_comm_destroy() (nspcomm never finalizes, destroys or aborts
 * it). The world is that communicator's ranks, with its rank and CUDA
 * device; the backend is "nccl" whatever config->backend says. Every tree
 * built on the world (nsp_tree_create) splits one NCCL communicator per
 * level with ncclCommSplit; those belong to the tree. Placement (node,
 * local rank) is allgathered through NCCL, so the call is collective over
 * the NCCL communicator's ranks. `config` (borrowed) may be NULL; its
 * timeout bounds every wait. On success *comm is owned by the caller
 * (nsp_comm_destroy).
 * Errors: NSP_ERR_INVALID_ARG (NULL comm or nccl_comm, bad config),
 * NSP_ERR_UNSUPPORTED (libnspcomm built without NCCL: the message says how
 * to build it), NSP_ERR_BACKEND (the NCCL communicator is in an error state;
 * CUDA failed), NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED, NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_comm_from_nccl(nsp_comm_t **comm, void *nccl_comm, const nsp_config_t *config);

/**
 * Destroy a communicator: local, never waits on peers longer than the
 * timeout, safe after a peer failed. Trees built on it must be destroyed and
 * its requests freed first. NULL is a no-op.
 */
NSP_EXPORT
nsp_status_t nsp_comm_destroy(nsp_comm_t *comm);

/** This rank (0-based) and the number of ranks. Errors: NSP_ERR_INVALID_ARG (NULL). */
NSP_EXPORT
nsp_status_t nsp_comm_rank(const nsp_comm_t *comm, int *rank);
NSP_EXPORT
nsp_status_t nsp_comm_size(const nsp_comm_t *comm, int *size);

/**
 * Where rank `rank` sits: its node (0-based, nodes numbered in order of
 * their first rank), its index among the ranks of its node, and the number
 * of ranks on that node. Nodes are told apart by host identity (hostname
 * and boot id; NSPCOMM_HOST_ID overrides it, e.g. to fake nodes in tests).
 * Any output pointer may be NULL. Errors: NSP_ERR_INVALID_ARG (NULL comm,
 * rank out of range).
 */
NSP_EXPORT
nsp_status_t nsp_comm_place(const nsp_comm_t *comm, int rank, int *node, int *local_rank,
                            int *local_size);

/** Number of nodes the world spans. Errors: NSP_ERR_INVALID_ARG. */
NSP_EXPORT
nsp_status_t nsp_comm_nnodes(const nsp_comm_t *comm, int *nnodes);

/** Name of the backend in use ("ucx", "nccl"); a static string. */
NSP_EXPORT
nsp_status_t nsp_comm_backend(const nsp_comm_t *comm, const char **name);

/**
 * Blocking barrier and small host-memory allgather over the world (layout
 * checks, tools): every rank gives `bytes` bytes of sendbuf; recvbuf
 * ([size][bytes], borrowed) gets them in rank order.
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
 * NSP_ERR_BACKEND.
 */
NSP_EXPORT
nsp_status_t nsp_comm_barrier(nsp_comm_t *comm);
NSP_EXPORT
nsp_status_t nsp_comm_allgather(nsp_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t bytes);

/**
 * Mapped host memory, as ncclMemAlloc + buffer registration on the host:
 * every rank of the world allocates `bytes` (at least 1; may differ between
 * ranks) and every rank on the same host maps the others' regions, so the
 * nested all-to-all reads a peer's source directly instead of sending it
 * (docs/reference/alltoall.md, "Mapped sources"): one copy per byte. A buffer is used
 * that way only by a post with nsp_a2a_params_t.mapped = 1, and only at a
 * level where the src lies inside such a region on every rank of the
 * level's group and every rank of it maps the others; any other level
 * takes the usual path.
 *
 * Collective over the world, in the same order on every rank (like the
 * other collectives). Every rank learns whether any rank failed, so all
 * return the same status and either all or none allocated. On success
 * *ptr is this rank's region (page aligned, contents undefined), owned by
 * the library until nsp_mem_free() or nsp_comm_destroy() (which frees what
 * is left); *ptr is untouched on error.
 * Backends: ucx (UCP_MEM_MAP_ALLOCATE: shared memory where UCX can; a
 * peer on another host, or one the transports cannot map, is simply not
 * mapped). nccl: NSP_ERR_UNSUPPORTED.
 * Errors: NSP_ERR_INVALID_ARG (NULL comm or ptr; bytes 0 on some rank: the
 * message names it), NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND (UCX could not
 * allocate on some rank), NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
 * NSP_ERR_UNSUPPORTED.
 */
NSP_EXPORT
nsp_status_t nsp_mem_alloc(nsp_comm_t *comm, size_t bytes, void **ptr);

/**
 * Free a region of nsp_mem_alloc(). Collective: every rank passes its own
 * pointer from the same nsp_mem_alloc() call, after every operation that
 * reads or writes it has completed on every rank. NULL, a pointer that
 * nsp_mem_alloc() did not return (or already freed), or ranks naming
 * different calls: NSP_ERR_INVALID_ARG on every rank, and nothing is freed.
 * Errors: also NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED (when the ranks had
 * already agreed on the region it is freed here anyway; when they could not
 * agree, nothing is freed here and nsp_comm_destroy() frees it),
 * NSP_ERR_UNSUPPORTED (nccl).
 */
NSP_EXPORT
nsp_status_t nsp_mem_free(nsp_comm_t *comm, void *ptr);

/*
 * Requests: every non-blocking operation of nspcomm (a ring step, one level
 * of the nested all-to-all, ...) returns one nsp_request_t per completion.
 * An operation that completes level by level (the nested all-to-all) returns
 * one request per level, so a caller computes on the levels that are done
 * while the others are in flight. Lifecycle (UCC's post/test/finalize):
 * post -> nsp_request_test until it is not NSP_INPROGRESS (or
 * nsp_request_wait) -> nsp_request_free. The buffers of an operation are
 * borrowed until its request completed or was freed. A request that fails
 * becomes final only once no peer copies into or out of its buffers any
 * more (same-host peers copy them directly, process_vm_readv/writev): it
 * first tells the peers it copies for that it will not, and waits, within
 * the timeout, for those that copy for it to answer.
 *
 * Timeout: a request fails with NSP_ERR_TIMEOUT when it has been tested or
 * waited on for the communicator's timeout without any part of it
 * completing; time spent elsewhere between two tests more than one second
 * apart does not count.
 */
typedef struct nsp_request nsp_request_t;

/**
 * Advance communication and test one request: NSP_OK (complete),
 * NSP_INPROGRESS, or its error (NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
 * NSP_ERR_MISMATCH when ranks disagree on sizes, NSP_ERR_BACKEND). Once
 * final, the same status is returned again. Never blocks.
 */
NSP_EXPORT
nsp_status_t nsp_request_test(nsp_request_t *req);

/** Block until the request is final and return that status (as test). */
NSP_EXPORT
nsp_status_t nsp_request_wait(nsp_request_t *req);

/**
 * Wait for reqs[0..n) (borrowed array, NULL entries skipped) in order.
 * Returns NSP_OK, or the first error at once: the requests after it are
 * left as they are (free them; the communicator is broken).
 */
NSP_EXPORT
nsp_status_t nsp_request_wait_all(nsp_request_t **reqs, int n);

/**
 * Release a request. Freeing one that has not completed abandons it: what
 * can be cancelled is, peers waiting for this rank's copies are told it
 * will not copy, and the communicator must then be treated as broken
 * (destroy it). Keep an abandoned request's buffers until its world is
 * destroyed: same-host peers copy into or out of them directly, and
 * nsp_comm_destroy of the world waits (within the timeout; past it, a
 * warning) until every such peer answered or failed. NULL is a no-op.
 */
NSP_EXPORT
nsp_status_t nsp_request_free(nsp_request_t *req);

/* ======================================================================== */
/* 5. Topology (hwloc) — libnspcomm only                                    */
/* ======================================================================== */

/*
 * What one host looks like (cores, NUMA nodes, NVIDIA GPUs, NICs), read with
 * hwloc from this host or from an hwloc XML file, and the level degrees of
 * the nested tree that suit a cluster of such hosts.
 *
 * GPUs are NVIDIA PCI devices (vendor 0x10de, class 0x0302 3D controller or
 * 0x0300 VGA); hwloc without its CUDA/NVML plugins sees nothing else, and
 * nothing of NVLink. See docs/reference/topology.md.
 */

/** A host topology (opaque): nsp_topology_load(), nsp_topology_free(). */
typedef struct nsp_topology nsp_topology_t;

#define NSP_TOPO_BUS_ID_BYTES 16   /**< "dddd:bb:dd.f" plus NUL */
#define NSP_TOPO_NAME_BYTES   64
#define NSP_TOPO_MAX_LEVELS   32   /**< enough for any int rank count */

/** How close a GPU is to its NIC (NCCL's PIX/PHB/NODE/SYS, roughly). */
typedef enum {
    NSP_TOPO_LOCALITY_NONE        = 0, /**< no NIC */
    NSP_TOPO_LOCALITY_PCI_SWITCH  = 1, /**< behind one PCIe switch */
    NSP_TOPO_LOCALITY_HOST_BRIDGE = 2, /**< same PCIe host bridge (root complex) */
    NSP_TOPO_LOCALITY_NUMA        = 3, /**< same NUMA node, different host bridges */
    NSP_TOPO_LOCALITY_PACKAGE     = 4, /**< same package (socket), different NUMA nodes */
    NSP_TOPO_LOCALITY_SYSTEM      = 5  /**< across packages, or locality unknown */
} nsp_topo_locality_t;

/** One network device: a PCI function with network and/or RDMA OS devices. */
typedef struct nsp_topo_nic {
    char name[NSP_TOPO_NAME_BYTES];      /**< RDMA (verbs) name "mlx5_0" if any, else netdev */
    char netdev[NSP_TOPO_NAME_BYTES];    /**< network interface "ib0", "eth0"; "" if none */
    int  rdma;                           /**< 1: has an OpenFabrics device (InfiniBand, RoCE) */
    char bus_id[NSP_TOPO_BUS_ID_BYTES];  /**< its PCI device "0000:1c:00.0"; "" if not PCI */
    int  numa_node;                      /**< OS index of its NUMA node; -1: none or several */
    int  package;                        /**< OS index of its package; -1: none or several */
} nsp_topo_nic_t;

/** One NVIDIA GPU as a PCI device. */
typedef struct nsp_topo_gpu {
    char     bus_id[NSP_TOPO_BUS_ID_BYTES]; /**< "0000:1a:00.0", lowercase hex */
    unsigned vendor_id;                     /**< 0x10de */
    unsigned device_id;                     /**< e.g. 0x2330 (H100 SXM5 80GB) */
    unsigned class_id;                      /**< 0x0302 or 0x0300 */
    char     name[NSP_TOPO_NAME_BYTES];     /**< PCI device name if hwloc knows it, else "" */
    int      cuda_device;                   /**< CUDA ordinal with this bus id; -1: no CUDA in
                                                 this build, no visible device, or loaded from XML */
    int      numa_node;                     /**< OS index of its NUMA node; -1: none or several */
    int      package;                       /**< OS index of its package; -1: none or several */
    char     local_cpus[128];               /**< PUs near it, list form "0-55,112-167" */
    int      nic;                           /**< index of its nearest NIC in nics, -1: none */
    nsp_topo_locality_t nic_locality;       /**< how near that NIC is */
} nsp_topo_gpu_t;

/**
 * What nsp_topology_summary() shows. All memory (gpus, nics) belongs to the
 * topology and stays valid until nsp_topology_free().
 *
 * gpus are sorted by PCI bus id (the order of CUDA_DEVICE_ORDER=PCI_BUS_ID);
 * nics by bus id, non-PCI ones last. A GPU's nearest NIC is the one with the
 * closest locality (then fewest PCI hops), preferring RDMA NICs over plain
 * network ones; ties go to the NIC with the fewest GPUs so far, so GPUs
 * spread over equally near NICs.
 */
typedef struct nsp_topo_summary {
    char                  hostname[NSP_TOPO_NAME_BYTES]; /**< hwloc's HostName; "" if unknown */
    char                  source[256];     /**< "this host" or the XML path */
    int                   from_xml;        /**< 1: loaded from an XML file */
    int                   pus;             /**< hardware threads */
    int                   cores;
    int                   packages;        /**< sockets */
    int                   numa_nodes;
    int                   ngpus;
    const nsp_topo_gpu_t *gpus;            /**< [ngpus], owned by the topology */
    int                   nnics;
    const nsp_topo_nic_t *nics;            /**< [nnics], owned by the topology */
    int                   gpus_per_domain; /**< GPUs taken as one NVLink domain: all NVIDIA
                                                GPUs of the host (hwloc cannot see NVLink;
                                                true for 8-GPU SXM boards) */
} nsp_topo_summary_t;

/**
 * Discover a host. `xml_path` (borrowed) names an hwloc XML file (as written
 * by `lstopo --of xml`); NULL reads $HWLOC_XMLFILE if set, else this host.
 * An XML is checked before hwloc parses it (hwloc 2.9 crashes on objects
 * without complete_cpuset/complete_nodeset). On a host load built with CUDA,
 * GPUs are matched to CUDA ordinals by bus id. Logs a one-line summary at
 * INFO. On success *topo is owned by the caller (nsp_topology_free).
 * Errors: NSP_ERR_INVALID_ARG (topo NULL), NSP_ERR_IO (XML unreadable: path
 * and reason), NSP_ERR_PARSE (not a loadable hwloc XML: path and what is
 * wrong), NSP_ERR_BACKEND (hwloc failed on this host: its errno message),
 * NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_topology_load(const char *xml_path, nsp_topology_t **topo);

/** Free a topology and its summary. NULL is a no-op. */
NSP_EXPORT
void nsp_topology_free(nsp_topology_t *topo);

/**
 * Borrow the summary of `topo`: *summary points into the topology and is
 * valid until nsp_topology_free(topo). Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_topology_summary(const nsp_topology_t *topo,
                                  const nsp_topo_summary_t **summary);

/**
 * Print a human summary (counts, each GPU with bus id, CUDA ordinal, NUMA
 * node, local CPUs and nearest NIC, each NIC) to `out` (borrowed), or, with
 * out == NULL, log it line by line at INFO (NSPCOMM_LOG_LEVEL=INFO shows it).
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_IO (write failed).
 */
NSP_EXPORT
nsp_status_t nsp_topology_print(const nsp_topology_t *topo, FILE *out);

/** Printable name of a locality ("pci-switch", "host-bridge", ...); never NULL. */
NSP_EXPORT
const char *nsp_topo_locality_name(nsp_topo_locality_t locality);

/**
 * Suggest the level degrees of the nested tree (docs/design.md §1): ascending from 1,
 * each dividing the next, the largest <= min(nranks, max_degree).
 *  - ranks_per_node: ranks numbered node by node, this many per node. It is
 *    reduced to gcd(ranks_per_node, nranks) so every group is complete; with
 *    non-uniform nodes pass the node block (largest size such that aligned
 *    groups never straddle two nodes: gcd of nranks and the node boundaries,
 *    e.g. nodes of 8,8,4 -> 4; equal to the node size when uniform).
 *  - gpus_per_domain: GPUs of one NVLink domain (summary->gpus_per_domain;
 *    0 if unknown). Used as a level when it nests in the node block.
 *  - max_degree: the largest degree allowed (e.g. the model's head count);
 *    0 means no limit.
 * The NVLink domain and the node block appear as levels; between them, and
 * above the node, degrees grow by the smallest prime factors first (doubling
 * where possible). Example: 32 ranks, 8 per node, domain 8 -> 1,2,4,8,16,32.
 * degrees[capacity] is caller-owned (NSP_TOPO_MAX_LEVELS always suffices);
 * *nlevels gets the count. Logs the result at INFO. Pure: reads no hardware.
 * Errors: NSP_ERR_INVALID_ARG (a count < 1, negative domain or max degree,
 * NULL output, capacity too small: the message gives the levels).
 */
NSP_EXPORT
nsp_status_t nsp_topology_suggest_levels(int nranks, int ranks_per_node, int gpus_per_domain,
                                         int max_degree, int *degrees, int capacity,
                                         int *nlevels);

/* ======================================================================== */
/* 6. Nested communicator tree (docs/design.md §1, §4) — libnspcomm only           */
/* ======================================================================== */

/*
 * The tree: levels of ascending degree d_0 = 1 < d_1 < ... , each dividing
 * the next and the world size. At level l the ranks are cut into groups of
 * d_l consecutive ranks [k*d_l, (k+1)*d_l); this rank belongs to exactly one
 * group per level and holds one sub-communicator per level. When the top
 * degree is below the world size the tree is a forest.
 *
 * Collectives on different levels share ranks: every rank drives its levels
 * in one agreed order (ascending level, docs/design.md §4), the tree's own calls
 * included.
 */

/** A rank's view of the nested tree (opaque). */
typedef struct nsp_tree nsp_tree_t;

/** Most levels of a tree (degrees double at least, so 32 covers any int). */
#define NSP_TREE_MAX_LEVELS 32

/**
 * The degrees nsp_tree_create(world, NULL, 0, ...) uses, from the
 * communicator's placement (nsp_topology_suggest_levels with the node block
 * of the world, no NVLink or head limit): 1, then doubling (smallest prime
 * factors first) up to the ranks of one node, the node itself, then up to
 * the world size. E.g. 16 ranks on 2 nodes of 8: 1, 2, 4, 8, 16; 6 ranks on
 * one node: 1, 2, 6. degrees[capacity] is caller-owned
 * (NSP_TREE_MAX_LEVELS suffices). Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_tree_default_degrees(const nsp_comm_t *world, int *degrees, int capacity,
                                      int *nlevels);

/**
 * Build this rank's tree over `world` (borrowed: it must outlive the tree).
 * `degrees` ([nlevels], borrowed) must start at 1, ascend strictly, each
 * divide the next and the world size; NULL (with nlevels 0) takes
 * nsp_tree_default_degrees(). Collective over the world: every rank passes
 * the same degrees. Logs the tree at INFO. On success *tree is owned by the
 * caller (nsp_tree_destroy).
 * Errors: NSP_ERR_INVALID_ARG (bad degrees: the message says which rule and
 * which value), NSP_ERR_MISMATCH (ranks passed different degrees),
 * NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED, NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_tree_create(nsp_comm_t *world, const int *degrees, int nlevels,
                             nsp_tree_t **tree);

/** Destroy the tree's sub-communicators (local). NULL is a no-op. */
NSP_EXPORT
nsp_status_t nsp_tree_destroy(nsp_tree_t *tree);

/** Number of levels (level 0 is degree 1). Errors: NSP_ERR_INVALID_ARG. */
NSP_EXPORT
nsp_status_t nsp_tree_nlevels(const nsp_tree_t *tree, int *nlevels);

/** Degree of `level`. Errors: NSP_ERR_INVALID_ARG (NULL, level out of range). */
NSP_EXPORT
nsp_status_t nsp_tree_degree(const nsp_tree_t *tree, int level, int *degree);

/**
 * The level whose degree is `degree`. Errors: NSP_ERR_INVALID_ARG (NULL),
 * NSP_ERR_NOT_FOUND (no level has that degree; the message lists them).
 */
NSP_EXPORT
nsp_status_t nsp_tree_level_of_degree(const nsp_tree_t *tree, int degree, int *level);

/**
 * This rank's group at `level`: its first world rank and this rank's index
 * in it (world rank = rank0 + index). Either output may be NULL.
 * Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_tree_group(const nsp_tree_t *tree, int level, int *rank0, int *index);

/**
 * The world ranks of this rank's group at `level` into ranks[degree]
 * (caller-owned), in group order. Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_tree_group_ranks(const nsp_tree_t *tree, int level, int *ranks);

/** The world the tree was built on (borrowed). Errors: NSP_ERR_INVALID_ARG. */
NSP_EXPORT
nsp_status_t nsp_tree_world(const nsp_tree_t *tree, nsp_comm_t **world);

/* ======================================================================== */
/* 7. Layouts and the nested variable-length all-to-all (docs/design.md §6)         */
/* ======================================================================== */

/*
 * A layout says, for one rank and one round of a plan, where every chunk of
 * every sequence the rank holds sits (docs/design.md §6). It is pure index math from
 * the plan: every rank computes its own, and all ranks of a group agree
 * because they read the same plan (nsp_a2a_post() checks that they do).
 *
 * Levels. Level 0 is degree 1: the sequences this rank holds alone. It
 * always exists (it may be empty) and needs no communication. Levels
 * 1 .. nlevels-1 are the other distinct degrees of the groups this rank
 * belongs to in the round, ascending. Different ranks may have different
 * level lists (a rank in no group of degree 4 has no degree-4 level); every
 * rank drives its levels in ascending degree, which is the one agreed order
 * of docs/design.md §4. In a nested round the groups of one degree are aligned, so a
 * rank belongs to at most one group per degree; two groups of one degree
 * with the same ranks are merged (their sequences in plan order).
 *
 * Chunks. A sequence of s tokens in a group of d ranks [rank0, rank0+d) is
 * cut in token order: index i = rank - rank0 holds s/d tokens, plus one for
 * the first s % d indices, starting at token i*(s/d) + min(i, s % d).
 * Chunks differ by at most one token; a chunk may be empty when s < d.
 *
 * Sequence-sharded buffer [T_local, H, D] (the input of sequence-to-head):
 * this rank's chunks, level by level ascending, and inside a level sequence
 * by sequence in plan order (the round's groups in order, each group's seqs
 * in order). Level l starts at token `local_offset`; its j-th chunk at token
 * `chunk_offset[j]` (absolute, in T_local).
 *
 * Head-sharded buffer (the output of sequence-to-head), counted in rows of
 * D elements: level by level ascending, level l one block [T_l, h_l, D]
 * starting at row `row_offset` (nsp_layout_heads()), where T_l =
 * `full_tokens` holds the whole sequences of the rank's group at that level
 * in the same order (sequence j at token `seq_offset[j]` of the block,
 * its tokens in order) and h_l is the rank's share of the H heads:
 *  - d == 1 (level 0): all H heads; the block is level 0's part of the
 *    sequence-sharded buffer, copied as is;
 *  - H % d == 0: heads [i*H/d, (i+1)*H/d), h_l = H/d;
 *  - d % H == 0 (KV heads when d > n_kv): the one head i*H/d, h_l = 1, each
 *    head replicated on d/H consecutive ranks of the group;
 *  - otherwise the level cannot shard H heads: NSP_ERR_INVALID_ARG.
 * So a caller finds every level's data in one buffer of
 * nsp_layout_head_rows() rows: [sum_l T_l*h_l, D].
 *
 * Ring groups (plan group ring r > 1, Ulysses degree u = d / r; ring
 * attention, docs/design/attention.md). The group's ranks form r Ulysses
 * subgroups of u consecutive ranks: index i of the group is ring index
 * j = i / u and Ulysses index i % u, in the subgroup starting at rank
 * rank0 + j*u. Ring index j holds zigzag chunks j and 2r-1-j of every
 * sequence of the group (nsp_zigzag_chunks()). The layout lists those two
 * chunks as two consecutive entries ("spans") per sequence, and every rule
 * above applies to the spans as if they were the sequences of a Ulysses
 * group of degree u made of the rank's subgroup: the rank's chunk is the
 * span cut over the u ranks (chunk_start = span_start + the piece's start),
 * the head-sharded block holds the rank's two spans of each sequence whole,
 * in that order (seq_offset, full_tokens), for the rank's share of the
 * heads over u (nsp_layout_heads(): h_l = H/u, or one head replicated on
 * u/H ranks when u > H). The all-to-all of a ring level runs inside the
 * Ulysses subgroup (for u = 1 it is a local copy); the ring (KV blocks
 * passed between the r ranks of equal Ulysses index) is the caller's. For
 * ring == 1 an entry is a whole sequence (span_start 0, span_len = seq_len)
 * and the Ulysses subgroup is the group.
 */

/** A rank's layout for one round (opaque). */
typedef struct nsp_layout nsp_layout_t;

/** Summary of a layout. */
typedef struct nsp_layout_info {
    int      rank;          /**< the rank it describes */
    int      round;         /**< the round of the plan */
    int      ranks;         /**< ranks of the plan's cluster */
    int      nlevels;       /**< levels, >= 1 (level 0 is degree 1) */
    int64_t  local_tokens;  /**< T_local: tokens of the sequence-sharded buffer */
    int64_t  full_tokens;   /**< sum over levels of T_l (whole sequences held) */
    uint64_t plan_hash;     /**< hash of the round's part of the plan: the same
                                 on every rank that read the same plan */
} nsp_layout_info_t;

/** One level of a layout. The arrays are borrowed from the layout and valid
 *  until nsp_layout_free(). */
typedef struct nsp_layout_level {
    int            degree;        /**< d: ranks of the group (1 for level 0) */
    int            rank0;         /**< first rank of this rank's group */
    int            index;         /**< this rank's index in the group: rank - rank0 */
    int            ring;          /**< ring degree r of the group (1: Ulysses only) */
    int            nseqs;         /**< entries: the group's sequences, two per sequence
                                       (its zigzag spans) when ring > 1 */
    const int     *seqs;          /**< [nseqs] indices into plan->seq_lens */
    const int64_t *seq_len;       /**< [nseqs] tokens of each entry's whole sequence */
    const int64_t *chunk_start;   /**< [nseqs] first token of this rank's chunk in its sequence */
    const int64_t *chunk_len;     /**< [nseqs] tokens of this rank's chunk */
    const int64_t *chunk_offset;  /**< [nseqs] token of the chunk in the sequence-sharded buffer */
    const int64_t *seq_offset;    /**< [nseqs + 1] token of each sequence in this level's
                                       head-sharded block (cu_seqlens; [nseqs] = full_tokens) */
    int64_t        local_offset;  /**< token where this level starts in T_local */
    int64_t        local_tokens;  /**< tokens of this rank's chunks at this level */
    int64_t        full_tokens;   /**< T_l: tokens of the whole entries (sequences, or spans
                                       when ring > 1) at this level */
    int            ulysses;       /**< u = degree / ring: ranks of this rank's Ulysses
                                       subgroup, where the level's all-to-all runs */
    int            ulysses_rank0; /**< first rank of that subgroup: rank0 + ring_index * u */
    int            ulysses_index; /**< this rank's index in it: index % u */
    int            ring_index;    /**< j = index / u: this rank's place on its ring (0 when
                                       ring == 1) */
    const int64_t *span_start;    /**< [nseqs] first token of each entry's span in its
                                       sequence (0 when ring == 1) */
    const int64_t *span_len;      /**< [nseqs] tokens of the span (seq_len when ring == 1) */
} nsp_layout_level_t;

/** Where a level sits in the head-sharded buffer for a tensor of H heads. */
typedef struct nsp_layout_heads {
    int     first_head;   /**< first head held at this level */
    int     nheads;       /**< h_l: heads held (H, H/d, or 1 when replicated) */
    int     replicas;     /**< ranks of the group holding each of these heads (d/H or 1) */
    int64_t row_offset;   /**< first row (of D elements) of the level's block */
    int64_t rows;         /**< rows of the block: T_l * h_l */
} nsp_layout_heads_t;

/**
 * Compute the layout of `rank` in round `round` of `plan` (borrowed; only
 * read during the call). On success *layout is owned by the caller
 * (nsp_layout_free). Errors: NSP_ERR_INVALID_ARG (NULL, round or rank out
 * of range, a group outside [0, ranks), a sequence index out of range, a
 * negative length, two different groups of one degree holding this rank;
 * the message names the round and group), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_layout_create(const nsp_plan_t *plan, int round, int rank,
                               nsp_layout_t **layout);

/** Fill *info. Errors: NSP_ERR_INVALID_ARG (NULL). */
NSP_EXPORT
nsp_status_t nsp_layout_query(const nsp_layout_t *layout, nsp_layout_info_t *info);

/** Fill *out with level `level` (0 .. nlevels-1); its arrays are borrowed from
 *  the layout. Errors: NSP_ERR_INVALID_ARG (NULL, level out of range). */
NSP_EXPORT
nsp_status_t nsp_layout_level(const nsp_layout_t *layout, int level,
                              nsp_layout_level_t *out);

/**
 * Where level `level` sits in the head-sharded buffer of a tensor with
 * `heads` heads (rules above). Errors: NSP_ERR_INVALID_ARG (NULL, level out
 * of range, heads < 1, heads and the level's degree not dividing one
 * another: the message names both).
 */
NSP_EXPORT
nsp_status_t nsp_layout_heads(const nsp_layout_t *layout, int level, int heads,
                              nsp_layout_heads_t *out);

/**
 * Rows (of D elements) of the whole head-sharded buffer for a tensor with
 * `heads` heads: sum over levels of T_l * h_l. Bytes = rows * D * elem_size.
 * Errors: as nsp_layout_heads().
 */
NSP_EXPORT
nsp_status_t nsp_layout_head_rows(const nsp_layout_t *layout, int heads, int64_t *rows);

/** Free a layout. NULL is a no-op. */
NSP_EXPORT
void nsp_layout_free(nsp_layout_t *layout);

/** Direction of a nested all-to-all. */
typedef enum nsp_a2a_dir {
    NSP_A2A_SEQ_TO_HEAD = 0, /**< sequence-sharded [T_local, H, D] -> head-sharded */
    NSP_A2A_HEAD_TO_SEQ = 1  /**< head-sharded -> sequence-sharded: the exact inverse */
} nsp_a2a_dir_t;

/**
 * What head-to-sequence does with a head replicated on several ranks of a
 * group (degree above the head count).
 */
typedef enum nsp_a2a_replicas {
    /** Take the copy of the first rank holding the head (index h*d/H); the
     *  other replicas send nothing. The inverse of sequence-to-head. */
    NSP_A2A_REPLICAS_FIRST   = 0,
    /** Sum the copies of all replicas as float32 (elem_size 4): the gradient
     *  of the replication, e.g. dK and dV in a backward pass. */
    NSP_A2A_REPLICAS_SUM_F32 = 1,
    /** Sum them as bfloat16 (elem_size 2), half the bytes of SUM_F32 on the
     *  wire: the first replica's copy, then each other replica added in
     *  ascending index, every addition done in float32 and rounded to
     *  bfloat16 (nearest even), so r replicas round r - 1 times (2 replicas:
     *  bit-identical to widening, summing in float32 and rounding once). */
    NSP_A2A_REPLICAS_SUM_BF16 = 2,
    /** As SUM_BF16 on IEEE binary16 elements (elem_size 2). */
    NSP_A2A_REPLICAS_SUM_FP16 = 3
} nsp_a2a_replicas_t;

/*
 * The nested variable-length all-to-all (docs/design.md §6). One call starts the
 * exchange of every level of a layout, in ascending degree (the agreed
 * order), and returns one request per level, so a caller computes on level 0
 * at once (no traffic), on level 1 as soon as it has landed, and so on:
 *
 *   nsp_request_t *req[nlevels];
 *   nsp_a2a_post(tree, layout, &params, req);
 *   for (l = 0; l < nlevels; ++l) {
 *       nsp_request_wait(req[l]);      // or nsp_request_test() while computing
 *       compute(level l);              // its block of the head-sharded buffer
 *       nsp_request_free(req[l]);
 *   }
 *
 * Sequence-to-head reads `src` = the sequence-sharded buffer [T_local, H, D]
 * and writes `dst` = the head-sharded buffer ([sum_l T_l*h_l, D] rows, layout
 * above); head-to-sequence is the exact inverse (src head-sharded, dst
 * sequence-sharded). Level 0 is a local copy. Each level of degree d > 1 is
 * one variable-length all-to-all among its group: on the tree's
 * sub-communicator when the group is the tree's group of that degree,
 * otherwise (a degree the tree lacks, an unaligned group of a disjoint
 * plan) as pairwise exchanges over the world. Host pack/unpack moves whole
 * head rows. A level's large sequences (average chunk per peer >= 64 KiB,
 * $NSPCOMM_A2A_DIRECT_MIN bytes, or the level's only sequence) each move in
 * an exchange of their own that lands in place in the head-sharded buffer
 * (s2h) or leaves from it (h2s), saving a copy; the small ones are batched;
 * the block a rank keeps for itself is copied once.
 *
 * Progress: on the host, data moves while the caller tests or waits on any
 * of the requests (testing one advances every level), so a caller that
 * computes for long between tests should test now and then.
 *
 * Every rank of the world calls nsp_a2a_post() for the same tensors in the
 * same order (like any collective), also a rank whose layout has level 0
 * only. With the agreement check on (the default), the call first
 * allgathers over the world a hash of the round's plan and of (direction,
 * heads, head_dim, elem_size, replicas, the in-place threshold, mapped), and fails
 * with NSP_ERR_MISMATCH on every rank when any two ranks differ, so ranks
 * that read different plans are told so instead of exchanging garbage.
 */

/** Which optional fields of nsp_a2a_params_t are set (UCX-style mask). */
enum {
    NSP_A2A_FIELD_STREAM   = 1u << 0,
    NSP_A2A_FIELD_REPLICAS = 1u << 1,
    NSP_A2A_FIELD_SERIAL   = 1u << 2,
    NSP_A2A_FIELD_CHECK    = 1u << 3,
    NSP_A2A_FIELD_MAPPED   = 1u << 4,
    NSP_A2A_FIELD_BYTES    = 1u << 5
};

typedef struct nsp_a2a_params {
    uint64_t           field_mask; /**< NSP_A2A_FIELD_* that are set */
    nsp_a2a_dir_t      direction;  /**< always read */
    int                heads;      /**< always read: H of this tensor (n_q, or n_kv for K/V) */
    int                head_dim;   /**< always read: D, elements per head row */
    size_t             elem_size;  /**< always read: bytes per element (1, 2, 4 or 8) */
    const void        *src;        /**< always read; borrowed until the last request completes */
    void              *dst;        /**< always read; borrowed likewise; must not overlap src */
    void              *stream;     /**< cudaStream_t for the CUDA path; host: NULL (default) */
    nsp_a2a_replicas_t replicas;   /**< head-to-sequence of replicated heads (default FIRST) */
    int                serial;     /**< 1: start level l+1 only when level l completed (to
                                        measure what pipelining buys); default 0 */
    int                check;      /**< 0: skip the agreement check (the caller ran
                                        nsp_layout_check() for this round); default 1 */
    int                mapped;     /**< 1: src was allocated with nsp_mem_alloc() on every
                                        rank; levels whose group shares a host read the
                                        peers' sources in place (one copy per byte, no
                                        send; docs/reference/alltoall.md, "Mapped
                                        sources"). A level where
                                        some rank's src is not inside one region, or some
                                        peer is not mapped, exchanges as usual on every
                                        rank of its group. src stays borrowed (peers read
                                        it) until the level's request completes on this
                                        rank. Host path only (the CUDA path:
                                        NSP_ERR_UNSUPPORTED). Default 0: no announce,
                                        exactly the ordinary exchange. Must be the same on
                                        every rank (part of the agreement check) */
    size_t             src_bytes;  /**< with NSP_A2A_FIELD_BYTES: bytes of src and dst, */
    size_t             dst_bytes;  /**< checked against the layout before anything moves:
                                        the sequence-sharded buffer needs T_local * H * D *
                                        elem_size bytes, the head-sharded one
                                        nsp_layout_head_rows() * D * elem_size; a smaller
                                        one is NSP_ERR_INVALID_ARG naming the buffer, both
                                        sizes and the shape (C cannot see a pointer's size:
                                        give them whenever they are known) */
} nsp_a2a_params_t;

/**
 * Start the nested all-to-all of `layout` (borrowed until every request is
 * freed) over `tree`: nsp_a2a_create() and nsp_a2a_start() in one call, the
 * exchange freed with its last request (below: the persistent form). reqs[nlevels] (caller-owned array; nlevels from
 * nsp_layout_query) receives one request per level, each owned by the
 * caller (nsp_request_test/wait/free); level 0's is complete at return.
 * Collective over the world (see above).
 * Errors: NSP_ERR_INVALID_ARG (NULL, heads not shardable at a level's
 * degree, a bad elem_size, SUM_F32 without 4-byte elements or SUM_BF16/
 * SUM_FP16 without 2-byte ones, the layout's
 * rank or ranks not the world's, with NSP_A2A_FIELD_BYTES a src or dst
 * smaller than the layout needs), NSP_ERR_UNSUPPORTED (a stream on the host
 * path; a group with ring > 1 on the CUDA path), NSP_ERR_MISMATCH (ranks disagree: the
 * message names the first rank that differs from rank 0), NSP_ERR_TIMEOUT,
 * NSP_ERR_PEER_FAILED, NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY. The requests
 * themselves fail like any request (NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
 * NSP_ERR_MISMATCH when counts disagree).
 */
NSP_EXPORT
nsp_status_t nsp_a2a_post(nsp_tree_t *tree, const nsp_layout_t *layout,
                          const nsp_a2a_params_t *params, nsp_request_t **reqs);

/**
 * Check that every rank of the tree's world holds a layout of the same plan
 * round: allgather of the round's plan hash (nsp_layout_info_t.plan_hash).
 * Collective over the world. Errors: NSP_ERR_INVALID_ARG (NULL, the layout
 * is for another rank or world size), NSP_ERR_MISMATCH (the message names
 * the ranks that differ from rank 0), NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED.
 */
NSP_EXPORT
nsp_status_t nsp_layout_check(nsp_tree_t *tree, const nsp_layout_t *layout);

/*
 * Persistent nested all-to-alls, in the manner of UCC's persistent
 * collectives: nsp_a2a_create() does once what every post would (levels,
 * parts, scratch, device tables, the agreement check), nsp_a2a_start() runs
 * the exchange on a pair of buffers, as often as the caller likes, and
 * nsp_a2a_destroy() frees it. nsp_a2a_post() is create + start, with the
 * handle freed with its last request. Each start takes the next operation
 * number of the tree's world (its tags; the agreement check of a create
 * includes it), so every rank creates, starts and posts the same exchanges
 * in the same order on a world, as for any collective. A world (and its
 * handles) is used by one thread at a time; two worlds are independent,
 * in one thread or in two.
 */
typedef struct nsp_a2a nsp_a2a_t;

/**
 * Build the exchange of `layout` over `tree` with `params` (src, dst and
 * stream are not read: they come with each start). tree and layout are
 * borrowed until nsp_a2a_destroy(). On success *a2a is owned by the caller.
 * Collective over the world when params->check (the agreement check).
 * Errors: as nsp_a2a_post(), except that buffers are checked at start.
 */
NSP_EXPORT
nsp_status_t nsp_a2a_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                            const nsp_a2a_params_t *params, nsp_a2a_t **a2a);

/**
 * Start one exchange of `a2a` from src to dst (as params.src and params.dst
 * of nsp_a2a_post(), borrowed until every request completed) on `stream`
 * (the CUDA path's cudaStream_t; NULL on the host). reqs[nlevels] receives
 * one request per level, owned by the caller, who frees each (the handle
 * may start again once all are freed). Collective over the world (every
 * rank starts its handle of the same exchange).
 * Errors: NSP_ERR_INVALID_ARG (NULL handle or reqs, NULL src or dst where
 * this rank holds data, requests of the last start still held),
 * NSP_ERR_UNSUPPORTED (a stream on the host path), and the errors of the
 * transport as nsp_a2a_post().
 */
NSP_EXPORT
nsp_status_t nsp_a2a_start(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                           nsp_request_t **reqs);

/**
 * Free a handle from nsp_a2a_create() (NULL: no-op). Errors:
 * NSP_ERR_INVALID_ARG while requests of its last start are still held
 * (free them first; the handle is kept).
 */
NSP_EXPORT
nsp_status_t nsp_a2a_destroy(nsp_a2a_t *a2a);

/**
 * Does nothing and returns NSP_OK; kept so that callers of earlier versions
 * build. Scratch space and device tables now belong to the exchange handles
 * and to the world, and go with nsp_a2a_destroy() and nsp_comm_destroy().
 * After an exchange failed (its requests freed unfinished), the transport
 * may still write into its buffers until the communicator is destroyed:
 * destroy the tree and the communicator first, then free src and dst.
 */
NSP_EXPORT
nsp_status_t nsp_a2a_release_cache(void);

/**
 * Levels of host exchanges posted with mapped = 1 on `world` since it was
 * created, as this rank counted them: those that read their peers' sources
 * in place (*mapped) and those that fell back to the ordinary exchange
 * because some rank of the level's group could not (*fell_back;
 * docs/reference/alltoall.md, "Mapped sources"). Levels of exchanges with
 * mapped = 0, and level 0, count in neither. Tells a caller (the tests, the
 * Python package's Comm.a2a_mapped_counts) which path its buffers took.
 * Local, not collective; either pointer may be NULL.
 * Errors: NSP_ERR_INVALID_ARG (NULL world), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_a2a_mapped_counts(nsp_comm_t *world, uint64_t *mapped, uint64_t *fell_back);

/* ======================================================================== */
/* 8. Ring exchange (docs/design.md §6) — libnspcomm only                          */
/* ======================================================================== */

/*
 * Rotate a buffer around this rank's group of one tree level: the rank at
 * index i sends to index (i + shift) mod d and receives from index
 * (i - shift) mod d (shift 1: to the next rank, from the previous one, as
 * ring attention passes KV blocks). Each step is one request; up to 4096
 * steps may be in flight on a level. Every rank of the group posts the same
 * steps in the same order, with the same byte count per step: the tags come
 * from the level group's own sequence number (shared with the library's own
 * ring attention on that group), and the low 4 bits of `step` go into the
 * tag as a check: ranks whose steps at one point differ in those bits time
 * out (NSP_ERR_TIMEOUT) instead of exchanging the wrong blocks.
 */

/**
 * The world ranks this rank sends to and receives from at `level` for
 * `shift` (any integer; reduced modulo the degree). Either output may be
 * NULL. Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_ring_peers(const nsp_tree_t *tree, int level, int shift, int *send_to,
                            int *recv_from);

/**
 * Post one ring step: send `bytes` of sendbuf to the next rank and receive
 * `bytes` from the previous one into recvbuf (both borrowed until the
 * request completes; they must not overlap). On a degree-1 level it is a
 * copy. `stream` is a cudaStream_t on the NCCL backend and must be NULL on
 * UCX. On success *req is owned by the caller (nsp_request_test/wait/free).
 * Errors: NSP_ERR_INVALID_ARG (NULL, level out of range),
 * NSP_ERR_UNSUPPORTED (a stream on a host backend), NSP_ERR_PEER_FAILED,
 * NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY; a peer that passed another byte count
 * makes the request fail with NSP_ERR_MISMATCH.
 */
NSP_EXPORT
nsp_status_t nsp_ring_post(nsp_tree_t *tree, int level, const void *sendbuf, void *recvbuf,
                           size_t bytes, int shift, uint32_t step, void *stream,
                           nsp_request_t **req);

/** Post a step and wait for it (nsp_ring_post + nsp_request_wait + free). */
NSP_EXPORT
nsp_status_t nsp_ring_step(nsp_tree_t *tree, int level, const void *sendbuf, void *recvbuf,
                           size_t bytes, int shift, uint32_t step);

/* ======================================================================== */
/* 9. Attention: host reference and nested SP attention                     */
/* ======================================================================== */

/*
 * Attention on packed variable-length batches (docs/reference/attention.md).
 *
 * Buffers are float32, row-major, host memory (the kernel callback below
 * may receive device memory):
 *   q, o, dout, dq   [T, n_q, D]     T tokens of all sequences, packed
 *   k, v, dk, dv     [T, n_kv, D]
 *   lse, delta       [T, n_q]        one value per (token, query head)
 * Sequence j of a batch is tokens [offsets[j], offsets[j+1]) of every
 * buffer (cu_seqlens style, int64_t offsets[nseqs + 1], nondecreasing; a
 * sequence may be empty). Tokens of different sequences never attend to
 * each other. Grouped-query attention: query head h reads KV head
 * h / (n_q / n_kv).
 *
 * Scores are scale * (q . k); lse is the NATURAL log of the sum of
 * exp(score) over the keys a query sees, so o = sum_j exp(score_j - lse) v_j.
 * Causal: a query at position p sees keys at positions <= p of its own
 * sequence. A row that sees no key (only in block calls) has o = 0 and
 * lse = -INFINITY, which is the neutral element of nsp_attn_merge().
 *
 * The functions up to nsp_attn_kernel_reference() are in libnspcomm but use
 * no UCX, hwloc, CUDA or NCCL. They are single-threaded, reentrant, and
 * allocate their scratch per call. Tolerances measured against a
 * double-precision naive implementation are in docs/reference/attention.md.
 */

/** Which optional fields of nsp_attn_params_t are set. */
enum {
    NSP_ATTN_FIELD_BYTES = 1u << 0 /**< bytes: the buffers' sizes, checked */
};

/**
 * Sizes in bytes of an attention call's buffers (NSP_ATTN_FIELD_BYTES). C
 * cannot see how large a pointer's buffer is; given these, a call checks
 * every buffer it reads or writes against the shape before touching any, and
 * a smaller one is NSP_ERR_INVALID_ARG naming the buffer, both sizes and the
 * shape. Entries of buffers the call does not use are ignored.
 */
typedef struct nsp_attn_bytes {
    size_t q, k, v, o, lse;      /**< the forward's buffers */
    size_t dout, dq, dk, dv;     /**< the backward's */
    size_t delta;                /**< nsp_attn_block_bwd's delta */
} nsp_attn_bytes_t;

/** Shape and mask of an attention problem. Plain data; start from
 *  NSP_ATTN_PARAMS_INIT() (which sets no optional field). */
typedef struct nsp_attn_params {
    int   q_heads;   /**< n_q: query heads in the q/o buffers, >= 1 */
    int   kv_heads;  /**< n_kv: key/value heads, >= 1, divides q_heads */
    int   head_dim;  /**< D, >= 1 */
    float scale;     /**< score scale; 0 means 1/sqrt(head_dim) (must be finite) */
    int   causal;    /**< 1: causal mask by token position; 0: full attention */
    uint64_t         field_mask; /**< NSP_ATTN_FIELD_* that are set (default 0) */
    nsp_attn_bytes_t bytes;      /**< with NSP_ATTN_FIELD_BYTES. For nested attention
                                      (nsp_nested_attn_params_t.attn) they are the sizes
                                      of the sequence-sharded buffers of every
                                      fwd/bwd call ([T_local, ...]) */
} nsp_attn_params_t;

/** Causal attention with the default scale 1/sqrt(D). */
#define NSP_ATTN_PARAMS_INIT(q_heads, kv_heads, head_dim) \
    { (q_heads), (kv_heads), (head_dim), 0.0f, 1, 0, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 } }

/**
 * Reference forward over a packed batch: o [T, n_q, D] and lse [T, n_q]
 * for the tokens [offsets[0], offsets[nseqs]) (other rows untouched), from
 * q, k, v (borrowed, read only). Each sequence starts at position 0.
 * Errors: NSP_ERR_INVALID_ARG (NULL buffer, bad params: the message names
 * the field; offsets negative or decreasing: names the index; with
 * NSP_ATTN_FIELD_BYTES a buffer smaller than offsets[nseqs] tokens of its
 * shape), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_attn_fwd(const nsp_attn_params_t *params, int nseqs,
                          const int64_t *offsets, const float *q, const float *k,
                          const float *v, float *o, float *lse);

/**
 * Reference backward (gradients of o only; lse is not differentiated):
 * from q, k, v, the forward's o and lse, and dout [T, n_q, D], write
 * dq [T, n_q, D], dk and dv [T, n_kv, D] for the batch's tokens
 * (overwritten, not accumulated). Uses delta = rowsum(dout * o) as
 * FlashAttention does. Errors: as nsp_attn_fwd().
 */
NSP_EXPORT
nsp_status_t nsp_attn_bwd(const nsp_attn_params_t *params, int nseqs,
                          const int64_t *offsets, const float *q, const float *k,
                          const float *v, const float *o, const float *lse,
                          const float *dout, float *dq, float *dk, float *dv);

/**
 * Partial attention of one block, for ring attention: the query span holds
 * tokens at positions [q_pos0, q_pos0 + q_len) of one sequence, the
 * key/value span positions [kv_pos0, kv_pos0 + kv_len) of the same sequence
 * (the causal mask compares these absolute positions). Writes the partial
 * o [q_len, n_q, D] and lse [q_len, n_q] of the query span over this KV
 * span only (rows seeing no key: o = 0, lse = -INFINITY); merge partials
 * with nsp_attn_merge(). q [q_len, n_q, D], k and v [kv_len, n_kv, D] are
 * borrowed. Errors: NSP_ERR_INVALID_ARG (NULL, bad params, negative
 * position or length; with NSP_ATTN_FIELD_BYTES a buffer smaller than its
 * span), NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_attn_block_fwd(const nsp_attn_params_t *params,
                                int64_t q_pos0, int64_t q_len, const float *q,
                                int64_t kv_pos0, int64_t kv_len, const float *k,
                                const float *v, float *o, float *lse);

/**
 * Backward of one block given the FINAL lse [q_len, n_q] of the query rows
 * (over all their keys) and delta [q_len, n_q] = rowsum(dout * o_final)
 * (nsp_attn_delta()). ACCUMULATES this block's share of the gradients:
 * dq [q_len, n_q, D] += ..., dk and dv [kv_len, n_kv, D] += ... Summed
 * over all KV blocks of a query span (and all query blocks of a KV span)
 * this gives exactly nsp_attn_bwd(). Spans as in nsp_attn_block_fwd().
 * Errors: as nsp_attn_block_fwd().
 */
NSP_EXPORT
nsp_status_t nsp_attn_block_bwd(const nsp_attn_params_t *params,
                                int64_t q_pos0, int64_t q_len, const float *q,
                                const float *dout, const float *lse, const float *delta,
                                int64_t kv_pos0, int64_t kv_len, const float *k,
                                const float *v, float *dq, float *dk, float *dv);

/**
 * delta [rows] = sum_d dout[row][d] * o[row][d] for `rows` rows of
 * `head_dim` floats (rows = tokens * n_q). Errors: NSP_ERR_INVALID_ARG.
 */
NSP_EXPORT
nsp_status_t nsp_attn_delta(int64_t rows, int head_dim, const float *o,
                            const float *dout, float *delta);

/**
 * Merge partial attention (o2, lse2) into (o, lse), in place, for `rows`
 * rows of `head_dim` floats: lse' = logaddexp(lse, lse2) and
 * o' = exp(lse - lse') o + exp(lse2 - lse') o2, computed stably. A row with
 * lse2 = -INFINITY leaves (o, lse) unchanged; a row with lse = -INFINITY
 * takes (o2, lse2). Commutative exactly, associative to rounding.
 * Errors: NSP_ERR_INVALID_ARG (NULL, rows < 0, head_dim < 1).
 */
NSP_EXPORT
nsp_status_t nsp_attn_merge(int64_t rows, int head_dim, float *o, float *lse,
                            const float *o2, const float *lse2);

/**
 * Zigzag (load-balanced causal) chunks for ring attention: a sequence of
 * `seq_len` tokens is cut into 2r near-equal chunks (chunk c has
 * seq_len / 2r tokens, plus one for the first seq_len % 2r chunks, and
 * starts at c * (seq_len / 2r) + min(c, seq_len % 2r)); ring index
 * `index` of r holds chunks index and 2r-1-index, in that order:
 * start[0], len[0] and start[1], len[1] (token positions; a chunk may be
 * empty). The tokens of two indexes differ by at most one.
 * Errors: NSP_ERR_INVALID_ARG (NULL, seq_len < 0, r < 1, index out of range).
 */
NSP_EXPORT
nsp_status_t nsp_zigzag_chunks(int64_t seq_len, int r, int index, int64_t start[2],
                               int64_t len[2]);

/*
 * A framework's own attention kernel, called by the nested attention driver
 * once per tree level after sequence-to-head, on whole sequences
 * and the rank's share of the heads; and by ring attention once per block.
 */

/** Element type of q, k, v, o, dout, dq, dk, dv in a kernel call (lse and
 *  delta are always float32). */
typedef enum nsp_attn_dtype {
    NSP_ATTN_FP32 = 0,
    NSP_ATTN_BF16 = 1,
    NSP_ATTN_FP16 = 2
} nsp_attn_dtype_t;

/** What one kernel call computes. Borrowed for the duration of the call. */
typedef struct nsp_attn_batch {
    nsp_attn_params_t params;     /**< heads IN THESE BUFFERS (the rank's share),
                                       head_dim, resolved scale (never 0), causal */
    nsp_attn_dtype_t  dtype;
    int               q_head0;    /**< model index of the first query head held */
    int               kv_head0;   /**< model index of the first KV head held */
    int               nseqs;
    const int64_t    *q_offsets;  /**< [nseqs + 1] rows of q/o/lse per sequence (host) */
    const int64_t    *kv_offsets; /**< [nseqs + 1] rows of k/v per sequence (host); equal
                                       to q_offsets except for ring blocks */
    int64_t           max_q_len;  /**< longest query sequence */
    int64_t           max_kv_len; /**< longest key/value sequence */
    int               level;      /**< tree level of the call (0: the rank alone) */
    void             *stream;     /**< cudaStream_t on the NCCL backend; NULL on host */
} nsp_attn_batch_t;

/**
 * Forward: o [Tq, n_q, D] and lse [Tq, n_q] from q [Tq, n_q, D] and
 * k, v [Tkv, n_kv, D]. Causal masks align the FIRST query and key of each
 * sequence (query i sees keys j <= i): the driver only asks for causal
 * calls where both spans start at the same position.
 */
typedef nsp_status_t (*nsp_attn_fwd_fn)(void *ctx, const nsp_attn_batch_t *batch,
                                        const void *q, const void *k, const void *v,
                                        void *o, float *lse);

/**
 * Backward: given the forward's final o and lse (over ALL keys, which for a
 * ring block is more than this call's keys) and dout, WRITE dq [Tq, n_q, D]
 * and dk, dv [Tkv, n_kv, D] of this call (the driver sums replicas and
 * ring blocks).
 */
typedef nsp_status_t (*nsp_attn_bwd_fn)(void *ctx, const nsp_attn_batch_t *batch,
                                        const void *q, const void *k, const void *v,
                                        const void *o, const float *lse,
                                        const void *dout, void *dq, void *dk, void *dv);

/** A kernel: two callbacks and the caller's context (passed back as ctx). */
typedef struct nsp_attn_kernel {
    nsp_attn_fwd_fn fwd;
    nsp_attn_bwd_fn bwd;
    void           *ctx;
} nsp_attn_kernel_t;

/**
 * Fill *kernel with the host reference (nsp_attn_block_fwd/bwd per
 * sequence; NSP_ATTN_FP32 and host memory only: other dtypes or a stream
 * give NSP_ERR_UNSUPPORTED). Errors: NSP_ERR_INVALID_ARG (NULL).
 */
NSP_EXPORT
nsp_status_t nsp_attn_kernel_reference(nsp_attn_kernel_t *kernel);

/* ------------------------------------------------------------------------ */
/* Nested sequence-parallel attention (docs/reference/attention.md)            */
/* ------------------------------------------------------------------------ */

/*
 * One attention layer over a round of a plan, the way a framework runs it
 * on nspcomm: every rank passes its sequence-sharded q, k, v (the layout's
 * [T_local, heads, D] buffers) and gets its sequence-sharded o and lse
 * back; in between, each level of the layout runs
 *
 *   sequence-to-head (nested all-to-all) -> the kernel on whole sequences
 *   and the rank's share of the heads -> head-to-sequence,
 *
 * and a ring level (plan group ring r > 1, Ulysses degree u = d / r) runs
 * ring attention between the all-to-alls: after its Ulysses all-to-all
 * inside u consecutive ranks, the r ranks of equal Ulysses index pass KV
 * blocks around (double-buffered), merge partial results by log-sum-exp,
 * and hold zigzag chunks so causal work is balanced.
 *
 * Pipelining (default): the sequence-to-head of every level starts at once;
 * levels are computed in ascending order (level 0 first: no traffic), each
 * as soon as its data has landed, with the other levels' requests tested
 * between kernel calls so they progress; a level's head-to-sequence starts
 * as soon as it is computed. Serial mode runs level after level (exchange,
 * compute, exchange back) with no overlap between levels, to measure what
 * pipelining buys. Both give bit-identical results.
 *
 * Buffers (host memory with the UCX backend; device memory of the current
 * CUDA device with the NCCL backend, see nsp_nested_attn_set_stream();
 * element type `dtype`, lse float32; docs/reference/attention.md "Dtypes"):
 *   q, o, dout, dq   [T_local, n_q, D]    sequence-sharded (layout section 7)
 *   k, v, dk, dv     [T_local, n_kv, D]
 *   lse              [T_local, n_q]
 * All are borrowed for the call only. fwd/bwd are collective over the
 * world of the tree: every rank calls them in the same order (a rank with
 * level 0 only too), like nsp_a2a_post().
 */

/** A nested attention for one (tree, layout, model heads) (opaque). */
typedef struct nsp_nested_attn nsp_nested_attn_t;

/** The head-sharded activations a forward keeps for its backward (opaque). */
typedef struct nsp_nested_attn_saved nsp_nested_attn_saved_t;

/** Which optional fields of nsp_nested_attn_params_t are set. */
enum {
    NSP_NESTED_ATTN_FIELD_KERNEL = 1u << 0,
    NSP_NESTED_ATTN_FIELD_DTYPE  = 1u << 1,
    NSP_NESTED_ATTN_FIELD_SERIAL = 1u << 2,
    NSP_NESTED_ATTN_FIELD_CHECK  = 1u << 3,
    NSP_NESTED_ATTN_FIELD_SLICES = 1u << 4,
    NSP_NESTED_ATTN_FIELD_DKV_F32 = 1u << 5
};

typedef struct nsp_nested_attn_params {
    uint64_t          field_mask; /**< NSP_NESTED_ATTN_FIELD_* that are set */
    nsp_attn_params_t attn;       /**< always read: the MODEL's n_q, n_kv, D, scale, causal */
    nsp_attn_kernel_t kernel;     /**< the framework's kernel (default: the host reference) */
    nsp_attn_dtype_t  dtype;      /**< element type of q, k, v, o, dout, dq, dk, dv and of
                                       the kernel's buffers (default FP32; BF16 and FP16 on
                                       every level: ring partials are read in it, added in
                                       float32, rounded once; replicated dK/dV: dkv_f32) */
    int               serial;     /**< 1: levels one after another (default 0: pipelined) */
    int               check;      /**< 0: skip the agreement checks (default 1: at create,
                                       and one small allgather per call) */
    int               max_slices; /**< most kernel calls per Ulysses level: its sequences
                                       are cut into up to this many slices of similar
                                       work, and requests are tested between them
                                       (default 8; 1: one call per level) */
    int               dkv_f32;    /**< dK/dV of KV heads replicated on several ranks, with
                                       dtype BF16 or FP16: 0 (default) sums them on the wire
                                       in dtype (NSP_A2A_REPLICAS_SUM_BF16/FP16: each
                                       addition in float32, rounded; 2 replicas give
                                       exactly what 1 gives); 1 widens them to float32,
                                       sums there and rounds once, at twice those two
                                       tensors' bytes. Ignored with FP32. Every rank passes
                                       the same (the create's agreement check covers it) */
} nsp_nested_attn_params_t;

/** What one level of one call did on this rank. */
typedef struct nsp_nested_attn_level_stats {
    int      degree;      /**< d of the level's group (1 for level 0) */
    int      ring;        /**< r (1: Ulysses only) */
    int      ulysses;     /**< u = d / r */
    int      nseqs;       /**< sequences of the level */
    int64_t  tokens;      /**< T_l: tokens the rank attends at this level (whole sequences,
                               or its two zigzag chunks of each when ring > 1) */
    double   compute_s;   /**< thread CPU seconds in the kernel (and ring merges/sums) */
    double   wait_s;      /**< wall seconds blocked on this level's exchanges: its
                               sequence-to-head before computing, its ring receives, its
                               head-to-sequence at the end */
    uint64_t a2a_bytes;   /**< bytes this rank sent in the level's all-to-alls (all tensors,
                               both directions) */
    uint64_t ring_bytes;  /**< bytes this rank sent around the ring */
} nsp_nested_attn_level_stats_t;

/** What one call did on this rank. */
typedef struct nsp_nested_attn_stats {
    int                           nlevels;    /**< levels of the layout */
    double                        wall_s;     /**< the call, wall clock */
    double                        compute_s;  /**< sum over levels */
    double                        wait_s;     /**< sum over levels */
    uint64_t                      bytes_sent; /**< a2a + ring bytes, all levels */
    nsp_nested_attn_level_stats_t level[NSP_TREE_MAX_LEVELS]; /**< [nlevels] */
} nsp_nested_attn_stats_t;

/**
 * Prepare nested attention for `layout` (a round of a plan, this rank's)
 * over `tree`: checks every level can shard the heads (n_q a multiple of
 * each level's Ulysses degree u; n_kv a multiple of u or u a multiple of
 * n_kv, replicating KV heads), sets up the rings, builds every exchange
 * its calls start (persistent nested all-to-alls: a call only starts
 * them), and with check on allgathers a hash of (plan round, heads, D,
 * scale, causal, dtype, dkv_f32) over the world; with a dtype other than
 * FP32 and dkv_f32 set it also allgathers whether any rank replicates KV
 * heads (then dK/dV go back in float32, below). `tree` and `layout` are
 * borrowed until nsp_nested_attn_destroy();
 * `params` is copied. Collective over the world. On success *attn is owned
 * by the caller.
 * Errors: NSP_ERR_INVALID_ARG (NULL, bad params: the message names the
 * field; a level whose degree cannot shard the heads: names level, degree
 * and ring), NSP_ERR_UNSUPPORTED (on a backend that moves device memory:
 * the default host reference kernel, a build without CUDA;
 * more than NSP_TREE_MAX_LEVELS levels), NSP_ERR_MISMATCH (ranks disagree:
 * names them), NSP_ERR_TIMEOUT,
 * NSP_ERR_PEER_FAILED, NSP_ERR_NO_MEMORY.
 */
NSP_EXPORT
nsp_status_t nsp_nested_attn_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                    const nsp_nested_attn_params_t *params,
                                    nsp_nested_attn_t **attn);

/**
 * Forward: o [T_local, n_q, D] and lse [T_local, n_q] from q, k, v (see
 * above for the shapes). With `saved` non-NULL, *saved receives the
 * head-sharded q, k, v, o, lse of every level (owned by the caller:
 * nsp_nested_attn_saved_free), so the backward exchanges only dout and the
 * gradients; NULL keeps nothing. `stats` (may be NULL) receives what each
 * level did. Collective over the world.
 * Errors: NSP_ERR_INVALID_ARG (NULL buffer for a rank holding tokens),
 * NSP_ERR_MISMATCH (with check on: ranks made different calls), an error of
 * the kernel (passed through), NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
 * NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY. After an exchange failed, destroy the
 * tree and the communicator before nsp_nested_attn_destroy() (the transport
 * may still write into the driver's buffers until then).
 */
NSP_EXPORT
nsp_status_t nsp_nested_attn_fwd(nsp_nested_attn_t *attn, const void *q, const void *k,
                                 const void *v, void *o, float *lse,
                                 nsp_nested_attn_saved_t **saved,
                                 nsp_nested_attn_stats_t *stats);

/**
 * Backward: dq [T_local, n_q, D], dk and dv [T_local, n_kv, D] (written,
 * not accumulated) from dout [T_local, n_q, D] and either `saved` (from a
 * forward of this attn; borrowed, then q, k, v, o, lse may be NULL) or, with
 * saved NULL, the forward's sequence-sharded q, k, v, o and lse (exchanged
 * again). dK and dV of a KV head replicated on several ranks are summed
 * over the replicas: in float32 with FP32; with BF16 or FP16 on the wire
 * in that dtype (the default: the same bytes as without replication,
 * NSP_A2A_REPLICAS_SUM_BF16/FP16) or, with params.dkv_f32, each level's
 * dK/dV (the kernel's, in dtype) widened into float32 scratch of the attn,
 * exchanged and summed in float32 (twice the bytes of those two tensors,
 * in rounds where some rank replicates) and rounded once into dk and dv.
 * Collective over the world; all ranks pass saved or all pass
 * NULL. Errors: as nsp_nested_attn_fwd(), NSP_ERR_INVALID_ARG (saved
 * from another attn). On device memory the widening and the rounding run
 * on the attn's stream (nsp_nested_attn_set_stream), and the call waits
 * for that stream before it returns.
 */
NSP_EXPORT
nsp_status_t nsp_nested_attn_bwd(nsp_nested_attn_t *attn, const nsp_nested_attn_saved_t *saved,
                                 const void *q, const void *k, const void *v, const void *o,
                                 const float *lse, const void *dout, void *dq, void *dk,
                                 void *dv, nsp_nested_attn_stats_t *stats);

/** Free saved activations (host or device memory, as the attn that made
 *  them). NULL is a no-op. */
NSP_EXPORT
void nsp_nested_attn_saved_free(nsp_nested_attn_saved_t *saved);

/**
 * Device memory (NCCL backend): the CUDA stream (a cudaStream_t; NULL, the
 * default, is the legacy default stream) of the next calls. The kernel
 * callbacks get it as batch->stream and enqueue on it; each level's
 * sequence-to-head waits for it on the GPU (the inputs were written there)
 * and each head-to-sequence for the kernels enqueued on it before the level
 * was computed. A call returns once its results are in the caller's
 * buffers (the host waited for the exchanges' events). `stream` is
 * borrowed until the next set_stream or destroy. Local.
 * Errors: NSP_ERR_INVALID_ARG (NULL attn), NSP_ERR_UNSUPPORTED (a stream on
 * host memory).
 */
NSP_EXPORT
nsp_status_t nsp_nested_attn_set_stream(nsp_nested_attn_t *attn, void *stream);

/**
 * Free the nested attention and its buffers (local). NULL is a no-op.
 * After a failed call, destroy the tree and the communicator first.
 */
NSP_EXPORT
nsp_status_t nsp_nested_attn_destroy(nsp_nested_attn_t *attn);


#ifdef __cplusplus
}
#endif

#endif /* NSPCOMM_H_ */
