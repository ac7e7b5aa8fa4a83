/*
 * The main demo (tools/nsp_demo, docs/guide/demo.md): shared types of its parts.
 *
 *   nsp_demo.c      flags, the run from calibration to report
 *   demo_launch.c   forking the ranks, shared memory
 *   demo_calib.c    kernel rate (parent) and exchange cost (ranks) on this machine
 *   demo_data.c     deterministic inputs, the distributed single-process reference,
 *                   the comparison of a rank's outputs with it
 *   demo_rank.c     what one rank does: every plan, both modes, repeated
 *   demo_report.c   summaries, the table, the JSON
 *   demo_svg.c      the picture: predicted and measured per-rank time by level
 *
 * Units: seconds, bytes, tokens. Element buffers are float32 (the reference
 * kernel's type); the cost model counts bf16 bytes, see demo_calib.c.
 */
#ifndef NSP_EXAMPLES_DEMO_H_
#define NSP_EXAMPLES_DEMO_H_

#include "nspcomm.h"
#include "streams/emu_config.h"

#include <stddef.h>
#include <stdint.h>

#define DEMO_MAX_RANKS    64
#define DEMO_MAX_ROUNDS   16
#define DEMO_MAX_CALLS    (2 * DEMO_MAX_ROUNDS)   /* forward + backward per round */
#define DEMO_MAX_DEGREES  16                      /* distinct group sizes of all plans */
#define DEMO_MAX_BATCHES  32
#define DEMO_MAX_REPS     16
#define DEMO_NPLANNERS    4                       /* static, disjoint, nested, megatron */
#define DEMO_NMODES       2                       /* pipelined, serial */
#define DEMO_NTENSORS     5                       /* o, lse, dq, dk, dv */
#define DEMO_MAX_SESSIONS 2                       /* default transport, tcp */

enum { DEMO_PIPELINED = 0, DEMO_SERIAL = 1 };
enum { DEMO_O = 0, DEMO_LSE = 1, DEMO_DQ = 2, DEMO_DK = 3, DEMO_DV = 4 };

extern const char *const demo_planner_names[DEMO_NPLANNERS]; /* indexed by nsp_planner_kind_t */
extern const char *const demo_mode_names[DEMO_NMODES];       /* pipelined, serial */
extern const char *const demo_tensor_names[DEMO_NTENSORS];

/** Everything the flags set (defaults in nsp_demo.c, printed in the header). */
typedef struct demo_config {
    const char *workload;        /**< length file */
    const char *lengths;         /**< "L1,L2,...": one batch of exactly these lengths
                                      instead of sampling the workload (NULL: sample) */
    int         scale;           /**< lengths divided by this (rounded up) */
    int         ranks;           /**< N local ranks */
    int64_t     tokens_per_rank; /**< token budget per rank of one batch */
    int64_t     max_len;         /**< longest sequence (after scaling) */
    double      mem_ratio;       /**< tokens a rank can hold / tokens_per_rank */
    int         mem_from_ratio;  /**< 1: with cluster_file too, a rank's memory from
                                      mem_ratio (the file's mem_bytes otherwise) */
    const char *nested_plan;     /**< a plan file run in the nested planner's place (NULL:
                                      the nested planner's) */
    int         batches;
    uint64_t    seed;
    int         reps;            /**< timed runs per (batch, planner, mode) */
    int         q_heads, kv_heads, head_dim;
    double      overlap;         /**< eta of the cluster description */
    double      time_limit_s;    /**< disjoint planner's MILP limit per round */
    double      tol;             /**< relative tolerance of the check */
    int         tcp;             /**< 1: also run every plan over UCX tcp (loopback) */
    const char *json_path;       /**< NULL: none */
    const char *svg_path;        /**< NULL: none */
    int         svg_batch;
    const char *cluster_file;    /**< NULL: calibrate; else its rates are used as they are */
    const char *cluster_out;     /**< where the calibrated cluster description goes */
    int         quiet;           /**< no progress on stderr */
    int         inject_error;    /**< 1: corrupt one output value of rank 0 before its check
                                      (shows that the check catches a wrong result) */
    const char *device;          /**< --device emu:FILE (NULL: real compute) */
} demo_config_t;

/** What computes the kernels (--device): real, or the emulated device. */
typedef struct demo_compute {
    int              emulated;  /**< 1: --device emu:FILE */
    nsp_emu_config_t cfg;       /**< FILE, when emulated */
    nsp_emu_timing_t timing;    /**< the demo model's timing on it (scale, target rates) */
} demo_compute_t;

/** Calibration of this machine (demo_calib.c). */
typedef struct demo_calib {
    int     done;               /**< 0: rates came from --cluster-file */
    /* reference kernel, one thread, fwd + bwd of packed causal sequences */
#define DEMO_CALIB_LENGTHS 4
    int64_t kern_len[DEMO_CALIB_LENGTHS];  /**< sequence lengths timed */
    int64_t kern_tokens;                   /**< tokens of each timed batch */
    double  kern_s[DEMO_CALIB_LENGTHS];    /**< best thread CPU seconds of each batch */
    double  attn_flops;         /**< R_attn = 7 n_q D / (quadratic coefficient) */
    double  per_token_s;        /**< linear coefficient: seconds per token */
    double  gemm_flops;         /**< R_gemm so that lin_flops(s)/R_gemm = per_token_s * s */
    /* nested all-to-all of a static plan over all ranks, forward + backward */
    double  xchg_small_cpu_s;   /**< busy CPU per rank of the small exchange (latency) */
    double  xchg_large_cpu_s;   /**< busy CPU per rank of the large exchange */
    double  xchg_large_bytes;   /**< bytes a rank sent in the large exchange (fp32) */
    double  xchg_large_wall_s;  /**< wall time of the large exchange */
    double  bw_fp32;            /**< bytes/s of exchange work per rank (fp32 bytes) */
    double  lat_s;              /**< seconds per collective (model counts 4 per level) */
    double  kernel_seconds;     /**< wall time of the kernel calibration */
    double  xchg_seconds;       /**< wall time of the exchange calibration */
} demo_calib_t;

/** What one rank did in one timed run (one step: every round fwd + bwd). */
typedef struct demo_rank_run {
    double   start, end;                     /**< CLOCK_MONOTONIC, shared by all processes */
    double   busy_s;                         /**< process CPU time of the run */
    double   kernel_s;                       /**< thread CPU in the kernel (stats compute_s) */
    double   wait_s;                         /**< wall blocked on exchanges (stats wait_s) */
    double   call_busy_s[DEMO_MAX_CALLS];    /**< process CPU per call: round r forward at
                                                  2r, backward at 2r + 1 */
    double   deg_kernel_s[DEMO_MAX_DEGREES]; /**< kernel CPU per degree slot */
    double   deg_bytes[DEMO_MAX_DEGREES];    /**< bytes sent per degree slot (a2a + ring) */
    uint32_t deg_tokens[DEMO_MAX_DEGREES];   /**< tokens attended per degree slot */
} demo_rank_run_t;

/** A rank's check of one (batch, planner, mode) against the reference. */
typedef struct demo_rank_check {
    int    done;
    double max_diff[DEMO_NTENSORS];
    double max_ref[DEMO_NTENSORS];
} demo_rank_check_t;

/** Shared memory written by the ranks of one session, read by the parent. */
typedef struct demo_shared {
    demo_rank_run_t   *runs;    /**< [batch][planner][mode][rep][rank] */
    demo_rank_check_t *checks;  /**< [batch][planner][mode][rank] */
    char              (*note)[256]; /**< [rank]: why a rank failed */
    volatile int       *ready;      /**< [rank]: communicator up */
} demo_shared_t;

/**
 * The whole run (parent), read by the ranks after fork. A session is one
 * UCX transport (0: as the environment says, shared memory by default;
 * 1: tcp on loopback): it has its own exchange calibration, cluster
 * description and plans (each planner plans for the transport it runs on),
 * and its own forked ranks. Batches, inputs and the reference are shared.
 */
typedef struct demo {
    demo_config_t     cfg;
    nsp_model_t       model;
    nsp_attn_params_t attn;
    int               nbatches;
    int               nseqs[DEMO_MAX_BATCHES];
    int64_t          *lens[DEMO_MAX_BATCHES];
    int64_t          *offsets[DEMO_MAX_BATCHES];   /**< [nseqs+1] token of each sequence */
    /* the single-process reference of every batch, shared with the ranks:
     * o, dq [T, n_q, D]; lse [T, n_q]; dk, dv [T, n_kv, D] (T = the batch's
     * tokens in plan order); computed by the ranks of the first session */
    float            *ref[DEMO_MAX_BATCHES][DEMO_NTENSORS];
    size_t            ref_bytes[DEMO_MAX_BATCHES];
    int               ndegrees;
    int               degrees[DEMO_MAX_DEGREES];   /**< every group size of every plan, ascending */
    /* per session */
    int               nsessions;
    const char       *session_tls[DEMO_MAX_SESSIONS]; /**< UCX_TLS for the ranks, NULL = as set */
    char              session_name[DEMO_MAX_SESSIONS][32];
    demo_calib_t      calib[DEMO_MAX_SESSIONS];
    nsp_cluster_t     cluster[DEMO_MAX_SESSIONS];
    double            lower_bound[DEMO_MAX_SESSIONS][DEMO_MAX_BATCHES];
    nsp_plan_t       *plans[DEMO_MAX_SESSIONS][DEMO_MAX_BATCHES][DEMO_NPLANNERS];
    double            plan_s[DEMO_MAX_SESSIONS];      /**< wall time of planning */
    demo_shared_t     shared[DEMO_MAX_SESSIONS];
    double            session_s[DEMO_MAX_SESSIONS];   /**< wall time of the runs */
    int               session;                        /**< the one being run (set before fork) */
    nsp_unique_id_t   id;                             /**< bootstrap id of that run */
    char             *workload_path;                  /**< the resolved workload file (owned) */
    demo_compute_t    compute;
} demo_t;

/** Are the outputs checked? Not with emulated compute in timing mode (its
 *  kernels do no math). */
int demo_checked(const demo_t *demo);
/** "real compute" or "EMULATED COMPUTE (h100 x 1e+05, timing only)" into out[len]. */
void demo_compute_label(const demo_t *demo, char *out, size_t len);

/* --- demo_launch.c --- */
typedef int (*demo_rank_fn_t)(int rank, int nranks, void *arg);
/** How a session of ranks is watched. */
typedef struct demo_watch {
    double        timeout_s;  /**< kill everything after this */
    double        startup_s;  /**< every rank must set ready[rank] within this */
    volatile int *ready;      /**< shared [ranks]: a rank sets 1 once its communicator is up */
    char        (*notes)[256];/**< shared [ranks]: why a rank failed (may be NULL) */
} demo_watch_t;
/**
 * Fork `nranks` processes running fn(rank, nranks, arg), then create a fresh
 * bootstrap id (nsp_get_unique_id: an id serves one communicator) and hand
 * it to them: each rank copies it into its own *id (a field of *arg, e.g.
 * &demo->id) before fn starts; the parent's *id gets it too. Forking first
 * keeps the id's rendezvous thread out of the fork (see demo_launch.c).
 * Watch the ranks; ranks' stdout goes to stderr. Once a rank failed, the
 * others get a few seconds to finish and are killed. Once more when that
 * failed (a rank stuck in its UCX start was seen once under load); not when
 * the id could not be made (the ranks are killed, its error is returned).
 * `what` names the session in the message. Errors: NSP_ERR_PEER_FAILED (a
 * rank failed: the message names it, its exit code or signal and its
 * note), NSP_ERR_TIMEOUT (not all ranks started within startup_s, or the
 * run took longer than timeout_s), NSP_ERR_IO (fork, or the id's socket),
 * NSP_ERR_NO_MEMORY.
 */
nsp_status_t demo_launch_retry(int nranks, demo_rank_fn_t fn, void *arg, nsp_unique_id_t *id,
                               const demo_watch_t *watch, const char *what);
/** Shared zeroed memory inherited by children (MAP_SHARED). NULL on failure. */
void  *demo_shared_alloc(size_t bytes);
void   demo_shared_free(void *p, size_t bytes);
double demo_now(void);         /**< CLOCK_MONOTONIC seconds */
double demo_proc_cpu(void);    /**< CLOCK_PROCESS_CPUTIME_ID seconds */
double demo_thread_cpu(void);  /**< CLOCK_THREAD_CPUTIME_ID seconds */
long   demo_ncores(void);      /**< online CPUs of this host */
/** A rank's communicator timeout (nsp_config_t.timeout_s): 0, so that the
 *  library reads NSPCOMM_TIMEOUT, when that is set; else fallback_s. */
double demo_comm_timeout(double fallback_s);

/* --- demo_calib.c --- */
/** Time the reference kernel in this thread and fill the kernel part of *calib. */
nsp_status_t demo_calib_kernel(const nsp_attn_params_t *attn, demo_calib_t *calib);
/** Fork the ranks of session s, time a small and a large nested exchange,
 *  fill the exchange part of demo->calib[s]. */
nsp_status_t demo_calib_exchange(demo_t *demo, int s);
/** Where the cluster description of session s goes: cfg.cluster_out for
 *  session 0, with "-<name>" before ".json" for the others. */
void demo_cluster_path(const demo_t *demo, int s, char *out, size_t len);
/** The model the demo runs: one attention layer with the given heads. */
void demo_model(const demo_config_t *cfg, nsp_model_t *model);
/** Fill the cluster from the calibration and the memory rule (docs/guide/demo.md). */
void demo_cluster_from_calib(const demo_config_t *cfg, const nsp_model_t *model,
                             const demo_calib_t *calib, nsp_cluster_t *cluster);
/** Memory per rank for a capacity of `tokens` tokens: 16P/N + W + tokens * a_tok. */
double demo_mem_bytes(const nsp_model_t *model, int ranks, double workspace, double tokens);
/** Write a cluster description loadable by nsp_cluster_load(). */
nsp_status_t demo_cluster_write(const char *path, const nsp_cluster_t *cluster,
                                const demo_calib_t *calib);

/* --- demo_data.c --- */
/** Fill `out` [len, heads, D] with tensor `tensor` (0 q, 1 k, 2 v, 3 dout) of
 *  sequence `seq`, tokens [tok0, tok0 + len): a pure function of
 *  (seed, tensor, seq, token, head, dim). */
void demo_fill(uint64_t seed, int tensor, int seq, int64_t tok0, int64_t len, int heads,
               int D, float *out);
/** Allocate the shared reference buffers of every batch (parent, before fork). */
nsp_status_t demo_reference_alloc(demo_t *demo);
void         demo_reference_free(demo_t *demo);
/** Reference of batch b for the sequences this rank is given (longest
 *  processing time first by s^2), into demo->ref[b]. */
nsp_status_t demo_reference(const demo_t *demo, int b, int rank, int nranks);
/** Compare a rank's sequence-sharded outputs of batch b with the reference;
 *  accumulates into *chk. */
void demo_check(const demo_t *demo, int b, const nsp_layout_t *layout, const float *o,
                const float *lse, const float *dq, const float *dk, const float *dv,
                demo_rank_check_t *chk);

/* --- demo_rank.c --- */
int demo_rank_main(int rank, int nranks, void *arg);
/** Index of run slots. */
size_t demo_run_index(const demo_t *demo, int b, int p, int m, int rep, int rank);
size_t demo_check_index(const demo_t *demo, int b, int p, int m, int rank);
/** Slot of a degree in demo->degrees, or -1. */
int demo_degree_slot(const demo_t *demo, int degree);

/* --- demo_report.c --- */
/** Summary of one (batch, planner, mode, session): medians over reps. */
typedef struct demo_stat {
    double wall_s;                      /**< median over reps of max end - min start */
    double cpu_s;                       /**< median over reps of the sum over ranks of
                                             process CPU: the work of the step */
    double crit_s;                      /**< median over reps of sum over calls of max busy */
    double comp_max_s, comp_mean_s;     /**< kernel CPU per rank (median rep) */
    double busy_max_s, busy_mean_s;     /**< process CPU per rank */
    double bytes_deg[DEMO_MAX_DEGREES]; /**< all ranks' bytes per degree slot */
    double rank_kernel[DEMO_MAX_RANKS];
    double rank_busy[DEMO_MAX_RANKS];
    double rank_deg_kernel[DEMO_MAX_RANKS][DEMO_MAX_DEGREES];
} demo_stat_t;

/** Prediction of one plan: step, per-rank compute (model). */
typedef struct demo_pred {
    double step_s;
    double comp_max_s, comp_mean_s;
    double rank_comp[DEMO_MAX_RANKS];
    double rank_comm[DEMO_MAX_RANKS];
    double rank_xcpu[DEMO_MAX_RANKS];   /* the exchange CPU part of rank_comp */
    double rank_s[DEMO_MAX_RANKS];
    double rank_deg_comp[DEMO_MAX_RANKS][DEMO_MAX_DEGREES];
    double rank_deg_comm[DEMO_MAX_RANKS][DEMO_MAX_DEGREES];
    /* Seconds per step and rank, from the per-level terms of each round
     * (c_l compute, x_l exchange of level l): levels serial, sum_l (c_l +
     * x_l); and the least a level-pipelined step can take, max(sum_l c_l,
     * sum_l x_l, max_l (c_l + x_l)): one compute, one wire, and a level's
     * kernel between its own exchanges (rounds add). */
    double rank_serial_s[DEMO_MAX_RANKS];
    double rank_pipe_lb_s[DEMO_MAX_RANKS];
} demo_pred_t;

void demo_stat(const demo_t *demo, int session, int b, int p, int m, demo_stat_t *st);
nsp_status_t demo_predict(const demo_t *demo, int session, int b, int p, demo_pred_t *pred);
/** Worst relative error of every tensor over all ranks of (batch, planner,
 *  mode) and whether each is within tolerance. Returns 1 if all passed. */
int demo_check_result(const demo_t *demo, int session, int b, int p, int m,
                      double err[DEMO_NTENSORS]);
void demo_print_header(const demo_t *demo);
/** The table; returns the number of failed checks (0: all passed). */
int demo_print_table(const demo_t *demo);
nsp_status_t demo_write_json(const demo_t *demo, const char *path, double total_s);

/* --- demo_svg.c --- */
/** One row per (session, planner) of batch `batch`: predicted | measured. */
nsp_status_t demo_write_svg(const demo_t *demo, const char *path, int batch);

#endif /* NSP_EXAMPLES_DEMO_H_ */
