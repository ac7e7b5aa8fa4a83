/*
 * The NCCL backend.
 *
 * On any machine: the backend is registered under its name in a build with
 * NCCL (nsp_tp_find("nccl")), or refused with a message saying how to build
 * it; nsp_comm_from_nccl() rejects NULL cleanly (and says how to build it
 * without NCCL); ncclGetUniqueId works without a GPU; the pure helpers
 * (uniform counts for ncclAlltoAll, the element width); and a world on a
 * machine without a usable GPU fails at once with a CUDA message, not a
 * hang (NSP_ERR_UNSUPPORTED: the backend cannot run on this machine).
 *
 * With a GPU: a one-rank NCCL world and tree (world of 1; split; alltoallv
 * and sendrecv on one rank with the data through NCCL to itself; the host
 * allgather and barrier; nsp_comm_from_nccl wrapping an ncclComm_t from
 * ncclCommInitAll on one device), with and without the one-rank shortcuts.
 */
#include "config.h"

#include "nspcomm.h"
#include "common/log.h"
#include "transport/comm.h"
#include "transport/transport.h"

#include "../tap.h"

#include <stdlib.h>
#include <string.h>

#ifdef NSP_HAVE_NCCL
#include "nested_groups/tree.h"
#include "streams/cuda_util.h"
#include "transport/nccl.h"

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

static void test_registry(void)
{
    const nsp_tp_ops_t *ops = NULL;
    nsp_status_t        st  = nsp_tp_find("nccl", &ops);

#ifdef NSP_HAVE_NCCL
    tap_is_int(st, NSP_OK, "nsp_tp_find(\"nccl\") finds the backend in a --with-nccl build");
    tap_ok(ops == &nsp_tp_nccl_ops, "it is the NCCL ops table");
    if (ops != NULL) {
        tap_is_str(ops->name, "nccl", "named \"nccl\"");
        tap_is_int(ops->mem_type, NSP_MEM_CUDA, "its buffers live in CUDA memory");
        tap_ok(ops->world_create != NULL && ops->world_wrap != NULL && ops->split != NULL &&
                   ops->destroy != NULL && ops->alltoallv_post != NULL &&
                   ops->sendrecv_post != NULL && ops->progress != NULL &&
                   ops->allgather != NULL && ops->barrier != NULL,
               "no entry of the ops table is NULL");
    }
#else
    tap_is_int(st, NSP_ERR_UNSUPPORTED, "nsp_tp_find(\"nccl\") without NCCL: unsupported");
    tap_ok(strstr(nsp_last_error(), "--with-nccl") != NULL,
           "the message says how to build it: %s", nsp_last_error());
    tap_ok(ops == NULL, "no ops written");
#endif
    st = nsp_tp_find("ucx", &ops);
    tap_is_int(st, NSP_OK, "the ucx backend is still found beside it");
}

static void test_from_nccl_rejects(void)
{
    nsp_comm_t  *comm = (nsp_comm_t *)(uintptr_t)0x1;
    nsp_status_t st;

#ifdef NSP_HAVE_NCCL
    st = nsp_comm_from_nccl(NULL, NULL, NULL);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "nsp_comm_from_nccl(NULL, NULL, NULL) is rejected");
    st = nsp_comm_from_nccl(&comm, NULL, NULL);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "a NULL ncclComm_t is rejected");
    tap_ok(comm == (nsp_comm_t *)(uintptr_t)0x1, "and *comm is not written");
    tap_ok(strstr(nsp_last_error(), "NULL") != NULL, "the message names the NULL: %s",
           nsp_last_error());
    {
        nsp_config_t bad = NSP_CONFIG_INITIALIZER;
        bad.magic        = 0;
        st = nsp_comm_from_nccl(&comm, (void *)(uintptr_t)0x1, &bad);
        tap_is_int(st, NSP_ERR_INVALID_ARG, "an uninitialised config is rejected before NCCL "
                                            "is touched");
    }
#else
    st = nsp_comm_from_nccl(&comm, (void *)(uintptr_t)0x1, NULL);
    tap_is_int(st, NSP_ERR_UNSUPPORTED, "nsp_comm_from_nccl without NCCL: unsupported");
    tap_ok(strstr(nsp_last_error(), "--with-cuda --with-nccl") != NULL,
           "the message says how to build it: %s", nsp_last_error());
    st = nsp_comm_from_nccl(NULL, NULL, NULL);
    tap_is_int(st, NSP_ERR_UNSUPPORTED, "also for NULL arguments (the build is what to fix)");
    tap_ok(comm == (nsp_comm_t *)(uintptr_t)0x1, "*comm is not written");
#endif
}

#ifdef NSP_HAVE_NCCL

static void test_nccl_library(void)
{
    char id[sizeof(ncclUniqueId)];
    char zero[sizeof(ncclUniqueId)];
    int  compiled = 0, linked = 0;

    tap_is_int(nsp_nccl_versions(&compiled, &linked), NSP_OK, "ncclGetVersion answers");
    tap_is_int(compiled, NCCL_VERSION_CODE, "compiled against NCCL %d", NCCL_VERSION_CODE);
    tap_ok(linked >= NCCL_VERSION(2, 18, 0), "linked NCCL %d is >= 2.18 (ncclCommSplit)",
           linked);
    memset(id, 0, sizeof(id));
    memset(zero, 0, sizeof(zero));
    tap_is_int(nsp_nccl_unique_id(id, sizeof(id)), NSP_OK,
               "ncclGetUniqueId works without a GPU");
    tap_ok(memcmp(id, zero, sizeof(id)) != 0, "and the id is not all zero");
    tap_is_int(nsp_nccl_unique_id(id, 8), NSP_ERR_INVALID_ARG, "a short buffer is refused");
}

static void test_pure_helpers(void)
{
    size_t             sc[4] = {64, 64, 64, 64}, sd[4] = {0, 64, 128, 192};
    size_t             rc[4] = {64, 64, 64, 64}, rd[4] = {0, 64, 128, 192};
    nsp_tp_alltoallv_t a = {(void *)0x1000, sc, sd, (void *)0x2000, rc, rd};
    size_t             count = 0;

    int                uniform = nsp_nccl_uniform_count(&a, 4, &count);

    tap_ok(uniform && count == 64, "equal counts in rank order are uniform (count %zu)", count);
    rc[2] = 0;
    tap_ok(!nsp_nccl_uniform_count(&a, 4, &count), "one zero receive count: not uniform");
    rc[2] = 64;
    sd[1] = 128, sd[2] = 64;
    tap_ok(!nsp_nccl_uniform_count(&a, 4, &count), "blocks out of rank order: not uniform");
    sd[1] = 64, sd[2] = 128;
    sc[0] = sc[1] = sc[2] = sc[3] = 0;
    tap_ok(!nsp_nccl_uniform_count(&a, 4, &count), "all zero: nothing to move, not uniform");
    tap_is_int((int64_t)nsp_nccl_elem_width(4096, (void *)0x1000, (void *)0x2000), 8,
               "aligned bytes move as 8-byte elements");
    tap_is_int((int64_t)nsp_nccl_elem_width(6, (void *)0x1000, (void *)0x2000), 2,
               "6 bytes move as 2-byte elements");
    tap_is_int((int64_t)nsp_nccl_elem_width(4096, (void *)0x1001, (void *)0x2000), 1,
               "an odd address moves bytes");
}

/* A world of one rank over the nccl backend. */
static nsp_status_t world_of_one(nsp_comm_t **comm, double timeout_s)
{
    nsp_unique_id_t id;
    nsp_config_t    cfg = NSP_CONFIG_INITIALIZER;

    cfg.backend   = "nccl";
    cfg.timeout_s = timeout_s;
    NSP_CHECK(nsp_get_unique_id(&id));
    return nsp_comm_init_rank(comm, 1, id, 0, &cfg);
}

static void test_no_device(const char *why)
{
    nsp_comm_t  *comm = NULL;
    double       t0   = nsp_now_s();
    nsp_status_t st   = world_of_one(&comm, 5.0);
    double       dt   = nsp_now_s() - t0;

    tap_diag("no CUDA device here (%s)", why);
    tap_is_int(st, NSP_ERR_UNSUPPORTED, "a nccl world without a usable GPU is unsupported "
                                        "here");
    tap_ok(comm == NULL, "and gives no communicator");
    tap_ok(strstr(nsp_last_error(), "cudaGetDeviceCount") != NULL &&
               strstr(nsp_last_error(), "ucx backend") != NULL,
           "its message gives CUDA's reason and the way out: %s", nsp_last_error());
    tap_ok(dt < 5.0, "it fails at once (%.2f s), not after the timeout", dt);
    tap_skip(1, "one-rank NCCL world and tree: %s", why);
}

/* ---- with a GPU ------------------------------------------------------------ */

#define N_BYTES 4096

/* Fill a device buffer with a pattern and read another back. */
static int device_equal(const void *dev, const unsigned char *want, size_t bytes)
{
    unsigned char *host = malloc(bytes);
    int            ok;

    if (host == NULL || cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(host);
        return 0;
    }
    ok = memcmp(host, want, bytes) == 0;
    free(host);
    return ok;
}

/* alltoallv and sendrecv on a one-rank transport communicator. */
static void one_rank_ops(nsp_tp_comm_t *tp, const char *what, void *stream)
{
    unsigned char      pattern[N_BYTES];
    void              *src = NULL, *dst = NULL;
    size_t             sc[1] = {N_BYTES}, sd[1] = {0}, rc[1] = {N_BYTES}, rd[1] = {0};
    nsp_tp_alltoallv_t a;
    nsp_request_t     *req = NULL;
    nsp_status_t       st;

    for (int k = 0; k < N_BYTES; ++k) {
        pattern[k] = (unsigned char)(k * 131 + 7);
    }
    if (cudaMalloc(&src, N_BYTES) != cudaSuccess || cudaMalloc(&dst, N_BYTES) != cudaSuccess ||
        cudaMemcpy(src, pattern, N_BYTES, cudaMemcpyHostToDevice) != cudaSuccess) {
        tap_ok(0, "%s: cudaMalloc/cudaMemcpy", what);
        goto out;
    }
    /* cudaMemset runs on the legacy stream, which the backend's
     * non-blocking streams do not wait for: finish it first. */
    cudaMemset(dst, 0, N_BYTES);
    cudaDeviceSynchronize();
    a = (nsp_tp_alltoallv_t){src, sc, sd, dst, rc, rd};
    st = tp->ops->alltoallv_post(tp, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, 1), stream, &req);
    tap_is_int(st, NSP_OK, "%s: alltoallv posted", what);
    if (st == NSP_OK) {
        tap_is_int(nsp_request_wait(req), NSP_OK, "%s: alltoallv completes", what);
        tap_ok(device_equal(dst, pattern, N_BYTES), "%s: alltoallv moved the %d bytes", what,
               N_BYTES);
        nsp_request_free(req);
    }
    cudaMemset(dst, 0, N_BYTES);
    cudaDeviceSynchronize();
    st = tp->ops->sendrecv_post(tp, src, N_BYTES, 0, dst, N_BYTES, 0,
                                NSP_TP_TAG(NSP_TP_TAG_CLASS_RING, 1), stream, &req);
    tap_is_int(st, NSP_OK, "%s: sendrecv posted", what);
    if (st == NSP_OK) {
        tap_is_int(nsp_request_wait(req), NSP_OK, "%s: sendrecv completes", what);
        tap_ok(device_equal(dst, pattern, N_BYTES), "%s: sendrecv moved the bytes", what);
        nsp_request_free(req);
    }
    rc[0] = N_BYTES / 2;
    st    = tp->ops->alltoallv_post(tp, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, 2), stream, &req);
    tap_is_int(st, NSP_ERR_MISMATCH, "%s: sending itself other bytes than it expects is a "
                                     "mismatch",
               what);
out:
    cudaFree(src);
    cudaFree(dst);
}

/* The nested all-to-all's CUDA path on a world of one rank: level 0 only
 * (a second level needs a second GPU), through nsp_a2a_post with a stream,
 * sequence-to-head then head-to-sequence, bit-exact. */
static void one_rank_a2a(nsp_comm_t *comm, nsp_tree_t *tree, const char *what)
{
    int64_t           lens[3] = {5, 7, 3};
    int               seqs[3] = {0, 1, 2};
    nsp_plan_group_t  group   = {0, 1, 3, seqs, 0, 1, 1};
    nsp_plan_round_t  round   = {1, &group};
    nsp_plan_t        plan;
    nsp_layout_t     *layout = NULL;
    nsp_request_t    *req[1] = {NULL};
    nsp_a2a_params_t  p;
    const int         H = 4, D = 32, T = 15;
    size_t            bytes = (size_t)T * H * D * 2;
    unsigned char    *want = malloc(bytes);
    void             *a = NULL, *b = NULL, *c = NULL;
    cudaStream_t      stream = NULL;
    nsp_status_t      st;

    (void)comm;
    memset(&plan, 0, sizeof(plan));
    plan.cluster.ranks = 1;
    plan.nseqs         = 3;
    plan.seq_lens      = lens;
    plan.nrounds       = 1;
    plan.rounds        = &round;
    if (want == NULL || nsp_layout_create(&plan, 0, 0, &layout) != NSP_OK ||
        cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        tap_ok(0, "%s: nested all-to-all setup: %s", what, nsp_last_error());
        goto out;
    }
    for (size_t k = 0; k < bytes; ++k) {
        want[k] = (unsigned char)(k * 29 + 3);
    }
    cudaMemcpy(a, want, bytes, cudaMemcpyHostToDevice);
    memset(&p, 0, sizeof(p));
    p.field_mask = NSP_A2A_FIELD_STREAM;
    p.direction  = NSP_A2A_SEQ_TO_HEAD;
    p.heads      = H;
    p.head_dim   = D;
    p.elem_size  = 2;
    p.src        = a;
    p.dst        = b;
    p.stream     = stream;
    st           = nsp_a2a_post(tree, layout, &p, req);
    tap_is_int(st, NSP_OK, "%s: nsp_a2a_post s2h on device buffers with a stream: %s", what,
               st == NSP_OK ? "posted" : nsp_last_error());
    if (st == NSP_OK) {
        tap_is_int(nsp_request_wait(req[0]), NSP_OK, "%s: level 0 completes", what);
        nsp_request_free(req[0]);
        tap_ok(device_equal(b, want, bytes), "%s: level 0 head-sharded = input", what);
    }
    p.direction = NSP_A2A_HEAD_TO_SEQ;
    p.src       = b;
    p.dst       = c;
    p.field_mask |= NSP_A2A_FIELD_SERIAL;
    p.serial = 1;
    st       = nsp_a2a_post(tree, layout, &p, req);
    tap_is_int(st, NSP_OK, "%s: nsp_a2a_post h2s (serial)", what);
    if (st == NSP_OK) {
        tap_is_int(nsp_request_wait(req[0]), NSP_OK, "%s: h2s completes", what);
        nsp_request_free(req[0]);
        tap_ok(device_equal(c, want, bytes), "%s: s2h then h2s returns the input", what);
    }
    tap_is_int(nsp_a2a_release_cache(), NSP_OK, "%s: release the all-to-all's caches", what);
out:
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    nsp_layout_free(layout);
    free(want);
}

/* The world's host collectives, a tree of one level, the ops on both. */
static void one_rank_world(nsp_comm_t *comm, const char *what)
{
    const char    *backend = NULL;
    uint64_t       mine = 0x1234abcd5678ef90ull, all = 0;
    int            degrees[1] = {1};
    nsp_tree_t    *tree = NULL;
    nsp_tp_comm_t *level = NULL;
    cudaStream_t   stream = NULL;

    nsp_comm_backend(comm, &backend);
    tap_is_str(backend, "nccl", "%s: backend is nccl", what);
    tap_is_int(nsp_comm_allgather(comm, &mine, &all, sizeof(mine)), NSP_OK,
               "%s: host allgather through the device", what);
    tap_ok(all == mine, "%s: allgather returns this rank's bytes", what);
    tap_is_int(nsp_comm_barrier(comm), NSP_OK, "%s: barrier", what);
    one_rank_ops(nsp_comm_tp(comm), what, NULL);
    tap_is_int(nsp_tree_create(comm, degrees, 1, &tree), NSP_OK, "%s: tree of one level", what);
    if (tree != NULL) {
        nsp_tree_level_tp(tree, 0, &level);
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        if (level != NULL) {
            one_rank_ops(level, what, stream);
        }
        one_rank_a2a(comm, tree, what);
        cudaStreamDestroy(stream);
        tap_is_int(nsp_tree_destroy(tree), NSP_OK, "%s: tree destroyed", what);
    }
}

static void test_one_rank_world(const char *mode)
{
    nsp_comm_t  *comm = NULL;
    nsp_status_t st   = world_of_one(&comm, 30.0);

    tap_is_int(st, NSP_OK, "%s: nccl world of one rank: %s", mode,
               st == NSP_OK ? "up" : nsp_last_error());
    if (st != NSP_OK) {
        return;
    }
    one_rank_world(comm, mode);
    tap_is_int(nsp_comm_destroy(comm), NSP_OK, "%s: world destroyed (ncclCommFinalize, "
                                               "ncclCommDestroy)",
               mode);
}

static void test_from_nccl_wrap(const char *mode)
{
    ncclComm_t   nc     = NULL;
    int          dev[1] = {0};
    nsp_comm_t  *comm   = NULL;
    ncclResult_t r      = ncclCommInitAll(&nc, 1, dev);
    nsp_status_t st;
    int          size = 0;

    tap_is_int(r, ncclSuccess, "%s: ncclCommInitAll on device 0: %s", mode,
               ncclGetErrorString(r));
    if (r != ncclSuccess) {
        return;
    }
    st = nsp_comm_from_nccl(&comm, nc, NULL);
    tap_is_int(st, NSP_OK, "%s: nsp_comm_from_nccl wraps it: %s", mode,
               st == NSP_OK ? "ok" : nsp_last_error());
    if (st == NSP_OK) {
        nsp_comm_size(comm, &size);
        tap_is_int(size, 1, "%s: the wrapped world has its one rank", mode);
        one_rank_world(comm, mode);
        tap_is_int(nsp_comm_destroy(comm), NSP_OK, "%s: wrapped world destroyed", mode);
    }
    r = ncclCommDestroy(nc);
    tap_is_int(r, ncclSuccess, "%s: the caller's ncclComm_t is still valid and destroyable",
               mode);
}

static void test_with_device(void)
{
    /* Defaults: one-rank groups are copies, self blocks are copies. */
    test_one_rank_world("defaults");
    /* NCCL for everything a single GPU can do: ncclCommSplit of one rank,
     * the self block through ncclSend/ncclRecv, the byte-count check. */
    setenv("NSPCOMM_NCCL_SELF", "0", 1);
    setenv("NSPCOMM_NCCL_SELF_P2P", "1", 1);
    test_one_rank_world("through NCCL");
    /* Uniform counts through ncclAlltoAll (NCCL >= 2.28.3). */
    setenv("NSPCOMM_NCCL_ALLTOALL", "1", 1);
    test_one_rank_world("ncclAlltoAll");
    unsetenv("NSPCOMM_NCCL_ALLTOALL");
    /* The caller's communicator split with ncclCommSplit, data through NCCL. */
    test_from_nccl_wrap("wrapped, split by NCCL");
    unsetenv("NSPCOMM_NCCL_SELF");
    unsetenv("NSPCOMM_NCCL_SELF_P2P");
    test_from_nccl_wrap("wrapped, defaults");
}

#endif /* NSP_HAVE_NCCL */

int main(void)
{
    test_registry();
    test_from_nccl_rejects();
#ifdef NSP_HAVE_NCCL
    test_nccl_library();
    test_pure_helpers();
    {
        int ndev = 0;
        if (nsp_cuda_device_probe(&ndev) != NSP_OK) {
            test_no_device(nsp_last_error());
        } else {
            tap_diag("%d CUDA device(s): running the one-rank NCCL world and tree", ndev);
            test_with_device();
        }
    }
#else
    tap_skip(1, "NCCL library, one-rank world: this build has no NCCL");
#endif
    return tap_done();
}
