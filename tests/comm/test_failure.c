/*
 * Failures never hang: a rank killed (SIGKILL) in the middle of a stream of
 * all-to-alls, on the world and on a tree level, and a rank that stops
 * answering without dying, must give every other rank NSP_ERR_PEER_FAILED or
 * NSP_ERR_TIMEOUT within the timeout (3 s here), and destroy must then
 * return promptly. Real processes over UCX on loopback.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "nested_groups/tree.h"
#include "transport/comm.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_S     3.0
#define SLACK_S       2.5   /* allowed beyond the timeout on a loaded 2-core machine */
#define VICTIM_ITERS  15    /* the victim dies (or hangs) after this many exchanges */
#define RUN_TIMEOUT_S 40.0

/* Exit codes of the survivors (0: the expected error in time). */
enum { NO_ERROR = 2, WRONG_ERROR = 3, TOO_SLOW = 4 };

typedef enum { VICTIM_DIES, VICTIM_HANGS } victim_kind_t;

typedef struct fail_case {
    nsp_unique_id_t id;
    victim_kind_t   kind;
    int             victim;
    size_t          per_peer;
    int             on_tree_level; /* 0: world; else the level of this degree */
} fail_case_t;

/* Value slots: 0 = seconds from the last success to the error, 1 = status,
 * 2 = seconds nsp_comm_destroy took. */
static int survivor_verdict(nsp_status_t st, double waited)
{
    mp_set_value(0, waited);
    mp_set_value(1, (double)st);
    if (st == NSP_OK) {
        mp_note("no error after the victim stopped");
        return NO_ERROR;
    }
    mp_note("%.2f s: %s", waited, nsp_last_error());
    if (st != NSP_ERR_PEER_FAILED && st != NSP_ERR_TIMEOUT) {
        return WRONG_ERROR;
    }
    return waited <= TIMEOUT_S + SLACK_S ? 0 : TOO_SLOW;
}

static void victim_stops(victim_kind_t kind)
{
    if (kind == VICTIM_DIES) {
        raise(SIGKILL);
    }
    /* Hang without dying, long enough for everyone else to give up. */
    sleep((unsigned)(TIMEOUT_S + SLACK_S + 4));
    _exit(0);
}

static int rank_fail(int rank, int nranks, void *arg)
{
    const fail_case_t *c    = arg;
    nsp_config_t       cfg  = cu_config(TIMEOUT_S);
    nsp_comm_t        *comm = NULL;
    nsp_tree_t        *tree = NULL;
    nsp_tp_comm_t     *tp   = NULL;
    size_t            *arrays;
    unsigned char     *send, *recv;
    nsp_status_t       st;
    double             last_ok;
    int                n, rc;

    st = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    if (c->on_tree_level > 0) {
        int degrees[] = {1, c->on_tree_level};
        st = nsp_tree_create(comm, degrees, 2, &tree);
        if (st == NSP_OK) {
            st = nsp_tree_level_tp(tree, 1, &tp);
        }
        if (st != NSP_OK) {
            return cu_fail("tree", st);
        }
    } else {
        tp = nsp_comm_tp(comm);
    }
    n      = tp->size;
    arrays = calloc(4 * (size_t)n, sizeof(size_t));
    send   = calloc((size_t)n, c->per_peer);
    recv   = calloc((size_t)n, c->per_peer);
    for (int j = 0; j < n; ++j) {
        arrays[j] = arrays[2 * n + j] = c->per_peer;
        arrays[n + j] = arrays[3 * n + j] = (size_t)j * c->per_peer;
    }
    nsp_tp_alltoallv_t args = {send, arrays, arrays + n, recv, arrays + 2 * n, arrays + 3 * n};
    last_ok = mp_now();
    st      = NSP_OK;
    /* Exchange until an error; the victim stops after VICTIM_ITERS. A
     * survivor in a group without the victim finishes its 200 exchanges. */
    for (int it = 0; it < 200 && st == NSP_OK; ++it) {
        if (rank == c->victim && it == VICTIM_ITERS) {
            victim_stops(c->kind);
        }
        st = nsp_tp_alltoallv(tp, &args, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, it));
        if (st == NSP_OK) {
            last_ok = mp_now();
        }
    }
    {
        int in_victims_group = c->on_tree_level == 0 ||
                               rank / c->on_tree_level == c->victim / c->on_tree_level;
        if (in_victims_group) {
            rc = survivor_verdict(st, mp_now() - last_ok);
        } else {
            rc = st == NSP_OK ? 0 : cu_fail("a group without the victim failed", st);
        }
    }
    {
        double t0 = mp_now();
        nsp_tree_destroy(tree);
        nsp_comm_destroy(comm);
        mp_set_value(2, mp_now() - t0);
        if (rc == 0 && mp_now() - t0 > TIMEOUT_S + SLACK_S) {
            mp_note("destroy after the failure took %.2f s", mp_now() - t0);
            rc = TOO_SLOW;
        }
    }
    free(arrays);
    free(send);
    free(recv);
    return rc;
}

static void test_fail(int nranks, victim_kind_t kind, size_t per_peer, int level_degree)
{
    fail_case_t c = {.kind = kind, .victim = 2, .per_peer = per_peer,
                     .on_tree_level = level_degree};
    mp_result_t res;
    int         ok = 1;
    double      worst = 0, worst_destroy = 0;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_fail, &c, &c.id, &res);
    for (int r = 0; r < nranks; ++r) {
        if (r == c.victim) {
            ok &= kind == VICTIM_DIES ? res.rank[r].signal == SIGKILL
                                      : (res.rank[r].exited && res.rank[r].exit_code == 0);
            continue;
        }
        ok &= res.rank[r].exited && res.rank[r].exit_code == 0;
        worst         = res.rank[r].value[0] > worst ? res.rank[r].value[0] : worst;
        worst_destroy = res.rank[r].value[2] > worst_destroy ? res.rank[r].value[2]
                                                             : worst_destroy;
    }
    if (!tap_ok(ok, "%d ranks, rank 2 %s mid-exchange (%zu B per peer%s%d): every other rank "
                    "errs within %.0f s + %.1f s, destroy returns",
                nranks, kind == VICTIM_DIES ? "SIGKILLed" : "hangs", per_peer,
                level_degree > 0 ? ", on the tree level of degree " : ", world of ",
                level_degree > 0 ? level_degree : nranks, TIMEOUT_S, SLACK_S)) {
        mp_diag(&res);
    }
    tap_diag("slowest survivor erred %.2f s after its last success; destroy took at most "
             "%.2f s; rank 0: %s",
             worst, worst_destroy, res.rank[0].note);
}

int main(void)
{
    setenv("UCX_LOG_FILE", "stderr", 0);
    test_fail(4, VICTIM_DIES, 4096, 0);      /* eager messages */
    test_fail(4, VICTIM_DIES, 1 << 20, 0);   /* rendezvous messages */
    test_fail(8, VICTIM_DIES, 65536, 4);     /* on the level of degree 4: ranks 4-7 unaffected */
    test_fail(4, VICTIM_HANGS, 4096, 0);     /* alive but silent: TIMEOUT */
    /* The cross-host path: tcp with UCX's own peer error handling (what
     * NSPCOMM_UCX_ERR_MODE=auto gives ranks on other hosts). */
    const char *user_tls = getenv("UCX_TLS");
    char        saved_tls[256] = "";
    if (user_tls != NULL) {
        snprintf(saved_tls, sizeof(saved_tls), "%s", user_tls);
    }
    setenv("UCX_TLS", "tcp,self", 1);
    setenv("NSPCOMM_UCX_ERR_MODE", "peer", 1);
    tap_diag("UCX_TLS=tcp,self NSPCOMM_UCX_ERR_MODE=peer:");
    test_fail(4, VICTIM_DIES, 65536, 0);
    if (saved_tls[0] != '\0') {
        setenv("UCX_TLS", saved_tls, 1);
    } else {
        unsetenv("UCX_TLS");
    }
    unsetenv("NSPCOMM_UCX_ERR_MODE");
    return tap_done();
}
