/*
 * The rendezvous server (rdv.h): one detached thread, one poll loop over
 * the listening socket, the connections still authenticating ("pending")
 * and the ranks.
 *
 * A fresh connection gets a CHALLENGE at once and has RDV_AUTH_S to answer
 * with a valid AUTH; at most RDV_PENDING_MAX connections wait so, and a new
 * one beyond that evicts the oldest (once it is RDV_EVICT_AFTER_S old). Nothing a pending connection sends is
 * stored beyond its fixed 96-byte buffer, and a bad header, a wrong MAC or
 * a late answer closes only that connection. An authenticated rank then
 * runs rounds: every rank sends DATA (its part), the server waits for all
 * parts and sends every rank the RESULT ([nranks][bytes]). When every rank
 * sent CLOSE the thread ends. Until every rank has joined, a rank that
 * misbehaves or leaves is dropped and its slot freed for the real one
 * (the others' timeout message names it); once the world is complete, a
 * missing, dead or disagreeing rank fails the rendezvous: the server sends
 * ERROR (a status and a message naming the ranks) to everyone still
 * connected and ends.
 */
#define _GNU_SOURCE /* accept4 */
#include "transport/bootstrap.h"
#include "transport/rdv.h"

#include "common/log.h"
#include "transport/request.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDV_PENDING_MAX  64  /* connections authenticating at once */
#define RDV_AUTH_S       3.0 /* seconds a connection has to authenticate */
#define RDV_ACCEPT_BURST 64  /* accepts per wake-up */
#define RDV_EVICT_AFTER_S 0.02 /* a pending connection this young is not evicted */
#define RDV_WHY_MAX      512

typedef struct rdv_pending {
    int     fd;    /* -1: free slot */
    double  since; /* accept time: the oldest is evicted first */
    uint8_t snonce[RDV_NONCE_BYTES];
    uint8_t in[RDV_HDR_BYTES + RDV_AUTH_BYTES]; /* the AUTH message, as it arrives */
    size_t  got;
} rdv_pending_t;

typedef struct rdv_rank {
    int      fd;      /* -1: not joined */
    int      arrived; /* this round: 0, 1 DATA complete, 2 CLOSE */
    uint8_t  hdr[RDV_HDR_BYTES];
    size_t   hgot;    /* header bytes read */
    int      in_data; /* header read, payload [pgot, part) to come */
    uint64_t pgot;
} rdv_rank_t;

typedef struct rdv_server {
    int                listen_fd;
    rdv_id_t           id;
    pid_t              pid;       /* the process whose thread serves */
    int                nranks;    /* 0 until the first rank authenticated */
    int                joined;
    int                complete;  /* every rank joined: from now on a departure fails all */
    double             timeout_s; /* the largest of the ranks' timeouts */
    double             join_t0;   /* first join; the others have timeout_s from here */
    double             round_t0;  /* first message of this round; < 0: none yet */
    int                narrived;  /* ranks with arrived != 0 */
    int                nusing;    /* ranks whose DATA (whole or partial) is in parts */
    uint64_t           part;      /* bytes per rank this round; UINT64_MAX: none yet */
    uint8_t           *parts;     /* [nranks][part] */
    rdv_pending_t      pend[RDV_PENDING_MAX];
    rdv_rank_t        *ranks;     /* [nranks] */
    struct pollfd     *pfds;      /* [1 + RDV_PENDING_MAX + nranks] */
    int               *who;       /* [same]: -1 listen, i < P pending i, P + r rank r */
    unsigned long      n_conn, n_bad, n_evicted, n_late; /* strangers, for the log */
    char               dropped[200]; /* the last rank dropped before the world was complete */
    char               why[RDV_WHY_MAX];
    struct rdv_server *next;      /* registry list */
} rdv_server_t;

/* ------------------------------------------------------------------------ */
/* Registry: nsp_bootstrap_tcp_wait_server finds this process's servers     */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t rdv_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  rdv_registry_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t  rdv_atfork_once   = PTHREAD_ONCE_INIT;
static rdv_server_t   *rdv_registry;

/* A fork while the server thread holds the registry lock would leave the
 * child's copy locked forever: take it around fork. */
static void rdv_atfork_prepare(void)
{
    pthread_mutex_lock(&rdv_registry_lock);
}

static void rdv_atfork_release(void)
{
    pthread_mutex_unlock(&rdv_registry_lock);
}

static void rdv_atfork_install(void)
{
    pthread_atfork(rdv_atfork_prepare, rdv_atfork_release, rdv_atfork_release);
}

static void rdv_registry_add(rdv_server_t *srv)
{
    pthread_mutex_lock(&rdv_registry_lock);
    srv->next    = rdv_registry;
    rdv_registry = srv;
    pthread_mutex_unlock(&rdv_registry_lock);
}

static void rdv_registry_remove(rdv_server_t *srv)
{
    pthread_mutex_lock(&rdv_registry_lock);
    for (rdv_server_t **it = &rdv_registry; *it != NULL; it = &(*it)->next) {
        if (*it == srv) {
            *it = srv->next;
            break;
        }
    }
    pthread_cond_broadcast(&rdv_registry_cond);
    pthread_mutex_unlock(&rdv_registry_lock);
}

nsp_status_t nsp_bootstrap_tcp_wait_server(const nsp_unique_id_t *id, double deadline)
{
    rdv_id_t rid;

    memcpy(&rid, id->internal, sizeof(rid));
    pthread_mutex_lock(&rdv_registry_lock);
    for (;;) {
        rdv_server_t *found = NULL;
        for (rdv_server_t *it = rdv_registry; it != NULL; it = it->next) {
            if (it->pid == getpid() && it->id.port == rid.port &&
                memcmp(it->id.key, rid.key, RDV_KEY_BYTES) == 0) {
                found = it;
            }
        }
        if (found == NULL || nsp_now_s() >= deadline) {
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rdv_registry_cond, &rdv_registry_lock, &ts);
    }
    pthread_mutex_unlock(&rdv_registry_lock);
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Messages the loop sends without waiting                                  */
/* ------------------------------------------------------------------------ */

/* Header and a small payload in one non-blocking send: 0 if it all went
 * (a fresh socket's buffer always takes it), -1 if not. */
static int srv_send_now(int fd, uint32_t type, const void *payload, size_t len)
{
    uint8_t buf[RDV_HDR_BYTES + 4 + RDV_ERROR_TEXT_MAX];

    if (len > sizeof(buf) - RDV_HDR_BYTES) {
        return -1;
    }
    rdv_hdr_encode(type, len, buf);
    memcpy(buf + RDV_HDR_BYTES, payload, len);
    return send(fd, buf, RDV_HDR_BYTES + len, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                   (ssize_t)(RDV_HDR_BYTES + len)
               ? 0
               : -1;
}

/* Tell one connection why it is refused, and close it. */
static void srv_refuse(int fd, nsp_status_t status, const char *text)
{
    uint8_t msg[4 + RDV_ERROR_TEXT_MAX];
    size_t  n = rdv_error_encode(status, text, msg);

    (void)srv_send_now(fd, RDV_MSG_ERROR, msg, n);
    close(fd);
}

/* Tell every connected rank that the rendezvous failed, and why. */
static void srv_broadcast_error(rdv_server_t *srv, nsp_status_t status)
{
    uint8_t msg[4 + RDV_ERROR_TEXT_MAX];
    size_t  n = rdv_error_encode(status, srv->why, msg);

    NSP_DEBUG("rendezvous server port %u fails: %s", srv->id.port, srv->why);
    for (int r = 0; r < srv->nranks; ++r) {
        if (srv->ranks[r].fd >= 0) {
            (void)rdv_send_msg(srv->ranks[r].fd, RDV_MSG_ERROR, msg, n, nsp_now_s() + 1.0);
        }
    }
}

/* Append the ranks r with arrived-state `want` (or, want < 0, not joined)
 * to srv->why: "3, 5, 6". */
static void srv_list_ranks(rdv_server_t *srv, int want)
{
    size_t used  = strlen(srv->why);
    int    count = 0;

    for (int r = 0; r < srv->nranks && used + 16 < sizeof(srv->why); ++r) {
        int hit = want < 0 ? srv->ranks[r].fd < 0 : srv->ranks[r].arrived == want;
        if (hit) {
            int n = snprintf(srv->why + used, sizeof(srv->why) - used, "%s%d",
                             count > 0 ? ", " : "", r);
            used += n > 0 ? (size_t)n : 0;
            ++count;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Strangers: accept, challenge, authenticate                               */
/* ------------------------------------------------------------------------ */

static void srv_pending_close(rdv_pending_t *p)
{
    if (p->fd >= 0) {
        close(p->fd);
    }
    p->fd  = -1;
    p->got = 0;
}

/* A free pending slot, else the oldest one (check p->fd). */
static rdv_pending_t *srv_pending_free_or_oldest(rdv_server_t *srv)
{
    rdv_pending_t *oldest = &srv->pend[0];

    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        if (srv->pend[i].fd < 0) {
            return &srv->pend[i];
        }
        oldest = srv->pend[i].since < oldest->since ? &srv->pend[i] : oldest;
    }
    return oldest;
}

/* When a slot opens for the next connection: now (a free slot, or an
 * oldest one past RDV_EVICT_AFTER_S), or later. A connection younger than
 * that keeps its slot, so a burst of real ranks (they answer within a
 * round trip) is not evicted by the ranks behind it, which wait in the
 * kernel's backlog meanwhile. */
static double srv_slot_time(rdv_server_t *srv)
{
    rdv_pending_t *p = srv_pending_free_or_oldest(srv);

    return p->fd < 0 ? 0.0 : p->since + RDV_EVICT_AFTER_S;
}

/* A pending slot for a new connection (evicting the oldest), or NULL
 * while every one is younger than RDV_EVICT_AFTER_S. */
static rdv_pending_t *srv_pending_slot(rdv_server_t *srv)
{
    rdv_pending_t *p = srv_pending_free_or_oldest(srv);

    if (p->fd >= 0) {
        if (nsp_now_s() < p->since + RDV_EVICT_AFTER_S) {
            return NULL;
        }
        srv_pending_close(p);
        ++srv->n_evicted;
    }
    return p;
}

/* Accept what is waiting; each new connection gets its CHALLENGE now. */
static void srv_accept_burst(rdv_server_t *srv)
{
    for (int k = 0; k < RDV_ACCEPT_BURST; ++k) {
        rdv_pending_t *p = srv_pending_slot(srv);
        int            fd;
        if (p == NULL) {
            return; /* the rest waits in the backlog (srv_poll_set) */
        }
        fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                /* Out of descriptors: do not spin meanwhile. */
                struct timespec nap = {0, 10 * 1000 * 1000};
                nanosleep(&nap, NULL);
            }
            return;
        }
        ++srv->n_conn;
        if (rdv_random(p->snonce, sizeof(p->snonce)) != NSP_OK ||
            srv_send_now(fd, RDV_MSG_CHALLENGE, p->snonce, sizeof(p->snonce)) != 0) {
            close(fd);
            continue;
        }
        p->fd    = fd;
        p->since = nsp_now_s();
        p->got   = 0;
    }
}

/* The first rank fixes the world's size: the rank table and poll set. */
static nsp_status_t srv_setup_world(rdv_server_t *srv, int nranks)
{
    size_t         npfd  = 1 + RDV_PENDING_MAX + (size_t)nranks;
    rdv_rank_t    *ranks = calloc((size_t)nranks, sizeof(*ranks));
    struct pollfd *pfds  = calloc(npfd, sizeof(*pfds));
    int           *who   = calloc(npfd, sizeof(*who));

    if (ranks == NULL || pfds == NULL || who == NULL) {
        free(ranks);
        free(pfds);
        free(who);
        return nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory for %d ranks", nranks);
    }
    for (int r = 0; r < nranks; ++r) {
        ranks[r].fd = -1;
    }
    /* srv_dispatch may be walking the old poll set: carry it over. */
    memcpy(pfds, srv->pfds, (1 + RDV_PENDING_MAX) * sizeof(*pfds));
    memcpy(who, srv->who, (1 + RDV_PENDING_MAX) * sizeof(*who));
    free(srv->pfds);
    free(srv->who);
    srv->ranks  = ranks;
    srv->pfds   = pfds;
    srv->who    = who;
    srv->nranks = nranks;
    return NSP_OK;
}

/* An authenticated connection becomes rank a->rank, or is refused. Only a
 * world-size disagreement before the world is complete fails the
 * rendezvous (the ranks' configs differ); a rank out of range, one already
 * joined, or a stray one after completion is refused alone. */
static nsp_status_t srv_admit(rdv_server_t *srv, rdv_pending_t *p, const rdv_auth_t *a)
{
    uint8_t     mac[RDV_MAC_BYTES];
    char        text[RDV_WHY_MAX];
    int         fd = p->fd;
    rdv_rank_t *rk;

    if (srv->nranks == 0 && srv_setup_world(srv, (int)a->nranks) != NSP_OK) {
        srv_refuse(fd, NSP_ERR_NO_MEMORY, "rendezvous server out of memory");
        goto out_free_slot;
    }
    if ((int)a->nranks != srv->nranks) {
        snprintf(srv->why, sizeof(srv->why),
                 "rank %u says the world has %u ranks but an earlier rank said %d: every rank "
                 "must pass the same nranks",
                 a->rank, a->nranks, srv->nranks);
        srv_refuse(fd, NSP_ERR_MISMATCH, srv->why);
        p->fd = -1;
        /* A world already complete is right: only the stray one is told. */
        return srv->complete ? NSP_OK : NSP_ERR_MISMATCH;
    }
    if (a->rank >= a->nranks || srv->ranks[a->rank].fd >= 0) {
        snprintf(text, sizeof(text),
                 a->rank >= a->nranks
                     ? "rank %u is out of range for a world of %u ranks: every rank needs a "
                       "distinct rank in [0, nranks)"
                     : "rank %u joined twice (world of %u ranks): another process already is "
                       "that rank; was it started twice?",
                 a->rank, a->nranks);
        NSP_DEBUG("rendezvous port %u refuses a connection: %s", srv->id.port, text);
        srv_refuse(fd, NSP_ERR_INVALID_ARG, text);
        goto out_free_slot;
    }
    if (rdv_mac(srv->id.key, 1, p->snonce, p->in + RDV_HDR_BYTES, mac) != NSP_OK ||
        srv_send_now(fd, RDV_MSG_WELCOME, mac, sizeof(mac)) != 0) {
        close(fd);
        goto out_free_slot;
    }
    rk     = &srv->ranks[a->rank];
    *rk    = (rdv_rank_t){.fd = fd};
    double t = a->timeout_ms < 100 ? 0.1 : a->timeout_ms / 1000.0;
    srv->timeout_s = t > srv->timeout_s ? t : srv->timeout_s;
    srv->join_t0   = srv->joined == 0 && srv->join_t0 < 0 ? nsp_now_s() : srv->join_t0;
    srv->complete  = ++srv->joined == srv->nranks;
    rdv_set_nodelay(fd);
out_free_slot:
    p->fd  = -1;
    p->got = 0;
    return NSP_OK;
}

/* Bytes from a pending connection: check the header as soon as it is
 * whole, the MAC when the AUTH is. */
static nsp_status_t srv_pending_input(rdv_server_t *srv, rdv_pending_t *p)
{
    char       why[RDV_WHY_MAX];
    rdv_hdr_t  hdr;
    rdv_auth_t auth;
    size_t     had = p->got;
    ssize_t    n   = recv(p->fd, p->in + p->got, sizeof(p->in) - p->got, MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return NSP_OK;
    }
    if (n <= 0) {
        srv_pending_close(p);
        return NSP_OK;
    }
    p->got += (size_t)n;
    if (had < RDV_HDR_BYTES && p->got >= RDV_HDR_BYTES &&
        rdv_hdr_parse(p->in, RDV_AT_AUTH, 0, &hdr, why, sizeof(why)) != NSP_OK) {
        ++srv->n_bad;
        srv_refuse(p->fd, NSP_ERR_INVALID_ARG, why);
        p->fd  = -1;
        p->got = 0;
        return NSP_OK;
    }
    if (p->got < sizeof(p->in)) {
        return NSP_OK;
    }
    if (rdv_auth_verify(srv->id.key, p->snonce, p->in + RDV_HDR_BYTES, &auth, why,
                        sizeof(why)) != NSP_OK) {
        ++srv->n_bad;
        srv_refuse(p->fd, NSP_ERR_INVALID_ARG, why);
        p->fd  = -1;
        p->got = 0;
        return NSP_OK;
    }
    return srv_admit(srv, p, &auth);
}

/* ------------------------------------------------------------------------ */
/* Ranks: rounds of DATA, RESULT; CLOSE                                     */
/* ------------------------------------------------------------------------ */

/* Forget the round's parts once no rank's DATA is in them. */
static void srv_parts_release(rdv_server_t *srv)
{
    if (srv->nusing == 0) {
        free(srv->parts);
        srv->parts = NULL;
        srv->part  = UINT64_MAX;
    }
}

/* Rank r broke off (status, why). Before the world is complete it is
 * dropped and its slot freed; after, the rendezvous fails. */
static nsp_status_t srv_rank_lost(rdv_server_t *srv, int r, nsp_status_t status,
                                  const char *why)
{
    rdv_rank_t *rk = &srv->ranks[r];

    if (srv->complete) {
        snprintf(srv->why, sizeof(srv->why), "rank %d %s", r, why);
        return status;
    }
    snprintf(srv->dropped, sizeof(srv->dropped), "rank %d joined and then %s", r, why);
    NSP_DEBUG("rendezvous port %u drops %s", srv->id.port, srv->dropped);
    srv_refuse(rk->fd, status, srv->dropped);
    srv->narrived -= rk->arrived != 0;
    srv->nusing -= rk->arrived == 1 || rk->in_data;
    *rk = (rdv_rank_t){.fd = -1};
    --srv->joined;
    srv_parts_release(srv);
    return NSP_OK;
}

/* A DATA header of `len` bytes from rank r: the round's size if first. */
static nsp_status_t srv_data_start(rdv_server_t *srv, int r, uint64_t len)
{
    char     why[160];
    uint64_t total;

    if (srv->parts == NULL) {
        if (!rdv_mul_bounded((uint64_t)srv->nranks, len > 0 ? len : 1, RDV_RESULT_MAX,
                             &total)) {
            snprintf(why, sizeof(why), "sent a part of %llu bytes: %d ranks x %llu exceeds "
                                       "the %llu-byte bound of a bootstrap result",
                     (unsigned long long)len, srv->nranks, (unsigned long long)len,
                     (unsigned long long)RDV_RESULT_MAX);
            return srv_rank_lost(srv, r, NSP_ERR_INVALID_ARG, why);
        }
        srv->parts = malloc((size_t)total);
        if (srv->parts == NULL) {
            snprintf(srv->why, sizeof(srv->why),
                     "rendezvous server: no memory for %d parts of %llu bytes", srv->nranks,
                     (unsigned long long)len);
            return NSP_ERR_NO_MEMORY;
        }
        srv->part = len;
    }
    srv->ranks[r].in_data = 1;
    srv->ranks[r].pgot    = 0;
    ++srv->nusing;
    return NSP_OK;
}

/* A rank's message is whole. */
static void srv_rank_arrived(rdv_server_t *srv, rdv_rank_t *rk, int state)
{
    rk->arrived = state;
    rk->in_data = 0;
    rk->hgot    = 0;
    ++srv->narrived;
}

/* A rank's header is whole: check it for this round. */
static nsp_status_t srv_rank_header(rdv_server_t *srv, int r)
{
    rdv_rank_t  *rk = &srv->ranks[r];
    rdv_hdr_t    hdr;
    char         why[RDV_WHY_MAX - 16];
    nsp_status_t status = rdv_hdr_parse(rk->hdr, RDV_AT_PART, srv->part, &hdr, why, sizeof(why));

    if (srv->round_t0 < 0) {
        srv->round_t0 = nsp_now_s();
    }
    if (status == NSP_ERR_MISMATCH) {
        uint32_t hi, lo;
        memcpy(&hi, rk->hdr + 8, 4);
        memcpy(&lo, rk->hdr + 12, 4);
        snprintf(why, sizeof(why), "sent %llu bytes but others sent %llu in the same "
                                   "bootstrap allgather",
                 (unsigned long long)((uint64_t)ntohl(hi) << 32 | ntohl(lo)),
                 (unsigned long long)srv->part);
        return srv_rank_lost(srv, r, NSP_ERR_MISMATCH, why);
    }
    if (status != NSP_OK) {
        return srv_rank_lost(srv, r, status, why);
    }
    if (hdr.type == RDV_MSG_CLOSE) {
        srv_rank_arrived(srv, rk, 2);
        return NSP_OK;
    }
    NSP_CHECK(srv_data_start(srv, r, hdr.len));
    if (rk->fd >= 0 && rk->in_data && hdr.len == 0) {
        srv_rank_arrived(srv, rk, 1); /* an empty part: whole already */
    }
    return NSP_OK;
}

/* Bytes from rank r: its header, then its part straight into parts. */
static nsp_status_t srv_rank_input(rdv_server_t *srv, int r)
{
    rdv_rank_t *rk = &srv->ranks[r];
    uint8_t    *dst;
    size_t      want;
    ssize_t     n;

    if (rk->in_data) {
        dst  = srv->parts + (size_t)r * srv->part + rk->pgot;
        want = (size_t)(srv->part - rk->pgot);
    } else {
        dst  = rk->hdr + rk->hgot;
        want = RDV_HDR_BYTES - rk->hgot;
    }
    n = recv(rk->fd, dst, want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return NSP_OK;
    }
    if (n <= 0) {
        return srv_rank_lost(srv, r, NSP_ERR_PEER_FAILED,
                             rk->in_data || rk->hgot > 0
                                 ? "left the rendezvous mid-message"
                                 : "left the rendezvous (its process died or closed the "
                                   "connection early)");
    }
    if (rk->in_data) {
        rk->pgot += (uint64_t)n;
        if (rk->pgot == srv->part) {
            srv_rank_arrived(srv, rk, 1);
        }
        return NSP_OK;
    }
    rk->hgot += (size_t)n;
    return rk->hgot == RDV_HDR_BYTES ? srv_rank_header(srv, r) : NSP_OK;
}

/* Every rank arrived: the result to all, or the end. */
static nsp_status_t srv_finish_round(rdv_server_t *srv, int *closed)
{
    int ncloses = 0;

    for (int r = 0; r < srv->nranks; ++r) {
        ncloses += srv->ranks[r].arrived == 2;
    }
    if (ncloses == srv->nranks) {
        *closed = 1;
        return NSP_OK;
    }
    if (ncloses > 0) {
        snprintf(srv->why, sizeof(srv->why), "rank(s) ");
        srv_list_ranks(srv, 2);
        snprintf(srv->why + strlen(srv->why), sizeof(srv->why) - strlen(srv->why),
                 " finished bootstrap while others still exchange data: ranks ran different "
                 "init sequences (different backends or configs?)");
        return NSP_ERR_MISMATCH;
    }
    for (int r = 0; r < srv->nranks; ++r) {
        if (rdv_send_msg(srv->ranks[r].fd, RDV_MSG_RESULT, srv->parts,
                         (size_t)srv->nranks * srv->part, nsp_now_s() + srv->timeout_s) < 0) {
            snprintf(srv->why, sizeof(srv->why),
                     "rank %d left the rendezvous before the result reached it", r);
            return NSP_ERR_PEER_FAILED;
        }
        srv->ranks[r].arrived = 0;
    }
    srv->narrived = 0;
    srv->nusing   = 0;
    srv->round_t0 = -1.0;
    srv_parts_release(srv);
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* The loop                                                                 */
/* ------------------------------------------------------------------------ */

static double srv_next_deadline(rdv_server_t *srv)
{
    double slot = srv_slot_time(srv);
    double next = slot > nsp_now_s() ? slot : -1.0; /* the listener is off until then */

    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        double t = srv->pend[i].since + RDV_AUTH_S;
        if (srv->pend[i].fd >= 0 && (next < 0 || t < next)) {
            next = t;
        }
    }
    if (srv->nranks > 0 && !srv->complete && srv->join_t0 >= 0) {
        double t = srv->join_t0 + srv->timeout_s;
        next     = next < 0 || t < next ? t : next;
    }
    if (srv->round_t0 >= 0) {
        double t = srv->round_t0 + srv->timeout_s;
        next     = next < 0 || t < next ? t : next;
    }
    return next;
}

/* Late strangers go; missing ranks fail the rendezvous. */
static nsp_status_t srv_check_deadlines(rdv_server_t *srv, double now)
{
    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        if (srv->pend[i].fd >= 0 && now >= srv->pend[i].since + RDV_AUTH_S) {
            srv_pending_close(&srv->pend[i]);
            ++srv->n_late;
        }
    }
    if (srv->nranks > 0 && !srv->complete && srv->join_t0 >= 0 &&
        now >= srv->join_t0 + srv->timeout_s) {
        snprintf(srv->why, sizeof(srv->why), "rank(s) ");
        srv_list_ranks(srv, -1);
        snprintf(srv->why + strlen(srv->why), sizeof(srv->why) - strlen(srv->why),
                 " of %d never joined the rendezvous within %.1f s (NSPCOMM_TIMEOUT); were "
                 "they started with the same id?%s%s",
                 srv->nranks, srv->timeout_s, srv->dropped[0] ? " Last seen: " : "",
                 srv->dropped);
        return NSP_ERR_TIMEOUT;
    }
    if (srv->complete && srv->round_t0 >= 0 && now >= srv->round_t0 + srv->timeout_s) {
        snprintf(srv->why, sizeof(srv->why), "rank(s) ");
        srv_list_ranks(srv, 0);
        snprintf(srv->why + strlen(srv->why), sizeof(srv->why) - strlen(srv->why),
                 " did not take part in a bootstrap allgather within %.1f s (NSPCOMM_TIMEOUT) "
                 "while the others waited",
                 srv->timeout_s);
        return NSP_ERR_TIMEOUT;
    }
    return NSP_OK;
}

/* The poll set: the listener, pending connections, ranks yet to arrive. */
static int srv_poll_set(rdv_server_t *srv)
{
    int n = 0;

    /* The listener only when a new connection can have a slot now. */
    if (srv_slot_time(srv) <= nsp_now_s()) {
        srv->pfds[n]  = (struct pollfd){.fd = srv->listen_fd, .events = POLLIN};
        srv->who[n++] = -1;
    }
    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        if (srv->pend[i].fd >= 0) {
            srv->pfds[n]  = (struct pollfd){.fd = srv->pend[i].fd, .events = POLLIN};
            srv->who[n++] = i;
        }
    }
    for (int r = 0; r < srv->nranks; ++r) {
        if (srv->ranks[r].fd >= 0 && srv->ranks[r].arrived == 0) {
            srv->pfds[n]  = (struct pollfd){.fd = srv->ranks[r].fd, .events = POLLIN};
            srv->who[n++] = RDV_PENDING_MAX + r;
        }
    }
    return n;
}

/* Serve what poll reported: connections first (an AUTH that arrived is
 * read before an accept could evict its connection), the listener last.
 * An entry whose slot changed meanwhile is skipped. srv_admit may replace
 * the poll set by a larger copy, so it is read through srv at each step. */
static nsp_status_t srv_dispatch(rdv_server_t *srv, int n)
{
    int accept_now = 0;

    for (int k = 0; k < n; ++k) {
        int w  = srv->who[k];
        int fd = srv->pfds[k].fd;
        if (srv->pfds[k].revents == 0) {
            continue;
        }
        if (w < 0) {
            accept_now = 1;
        } else if (w < RDV_PENDING_MAX) {
            if (srv->pend[w].fd == fd) {
                NSP_CHECK(srv_pending_input(srv, &srv->pend[w]));
            }
        } else if (srv->ranks[w - RDV_PENDING_MAX].fd == fd) {
            NSP_CHECK(srv_rank_input(srv, w - RDV_PENDING_MAX));
        }
    }
    if (accept_now) {
        srv_accept_burst(srv);
    }
    return NSP_OK;
}

static nsp_status_t srv_loop(rdv_server_t *srv)
{
    for (;;) {
        int closed = 0;
        int n      = srv_poll_set(srv);
        int rc     = poll(srv->pfds, (nfds_t)n, rdv_poll_ms(srv_next_deadline(srv)));

        if (rc < 0 && errno != EINTR) {
            snprintf(srv->why, sizeof(srv->why), "rendezvous server: poll: %s",
                     strerror(errno));
            return NSP_ERR_IO;
        }
        NSP_CHECK(srv_check_deadlines(srv, nsp_now_s()));
        if (rc > 0) {
            NSP_CHECK(srv_dispatch(srv, n));
        }
        if (srv->complete && srv->narrived == srv->nranks) {
            NSP_CHECK(srv_finish_round(srv, &closed));
            if (closed) {
                return NSP_OK;
            }
        }
    }
}

static void srv_free(rdv_server_t *srv)
{
    for (int r = 0; srv->ranks != NULL && r < srv->nranks; ++r) {
        if (srv->ranks[r].fd >= 0) {
            close(srv->ranks[r].fd);
        }
    }
    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        srv_pending_close(&srv->pend[i]);
    }
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    free(srv->ranks);
    free(srv->pfds);
    free(srv->who);
    free(srv->parts);
    free(srv);
}

static void *srv_main(void *arg)
{
    rdv_server_t *srv    = arg;
    nsp_status_t  status = srv_loop(srv);

    if (status < 0 && srv->nranks > 0) {
        srv_broadcast_error(srv, status);
    }
    NSP_DEBUG("rendezvous port %u ends (%s): %lu connections, %lu refused, %lu evicted, %lu "
              "late",
              srv->id.port, status == NSP_OK ? "done" : nsp_status_string(status),
              srv->n_conn, srv->n_bad, srv->n_evicted, srv->n_late);
    rdv_registry_remove(srv);
    srv_free(srv);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Start                                                                    */
/* ------------------------------------------------------------------------ */

/* Listen on rid's address and port; the port bound back into rid. */
static nsp_status_t srv_listen(rdv_id_t *rid, int *fd_out)
{
    struct sockaddr_storage ss;
    socklen_t               len = rdv_id_sockaddr(rid, &ss);
    int                     one = 1;
    char                    where[64];
    int                     fd = socket(rid->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0) {
        return nsp_error(NSP_ERR_IO, "rendezvous: socket: %s", strerror(errno));
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        int err = errno;
        close(fd);
        rdv_id_where(rid, where, sizeof(where));
        return nsp_error(NSP_ERR_IO, "rendezvous: cannot listen on %s: %s%s", where,
                         strerror(err),
                         err == EADDRNOTAVAIL
                             ? " (not an address of this host: rank 0 must run on the host "
                               "NSPCOMM_ROOT names)"
                         : rid->port != 0 ? " (choose another port in NSPCOMM_ROOT)"
                                          : "");
    }
    rid->port = ntohs(rid->family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                             : ((struct sockaddr_in6 *)&ss)->sin6_port);
    *fd_out = fd;
    return NSP_OK;
}

/* Start serving *rid (its port bound written back). */
static nsp_status_t srv_start(rdv_id_t *rid)
{
    rdv_server_t  *srv;
    pthread_attr_t attr;
    pthread_t      thread;
    nsp_status_t   status;
    char           where[64];
    rdv_id_t       made;

    pthread_once(&rdv_atfork_once, rdv_atfork_install);
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory for the server");
    }
    srv->listen_fd = -1;
    srv->part      = UINT64_MAX;
    srv->join_t0   = -1.0;
    srv->round_t0  = -1.0;
    srv->pid       = getpid();
    for (int i = 0; i < RDV_PENDING_MAX; ++i) {
        srv->pend[i].fd = -1;
    }
    srv->pfds = calloc(1 + RDV_PENDING_MAX, sizeof(*srv->pfds));
    srv->who  = calloc(1 + RDV_PENDING_MAX, sizeof(*srv->who));
    if (srv->pfds == NULL || srv->who == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory for the server");
        goto err_free_srv;
    }
    srv->id = *rid;
    NSP_CHECK_GOTO(srv_listen(&srv->id, &srv->listen_fd), status, err_free_srv);
    /* before the thread starts: it frees srv once the rendezvous is over */
    made = srv->id;
    rdv_id_where(&srv->id, where, sizeof(where));
    rdv_registry_add(srv);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, srv_main, srv) != 0) {
        pthread_attr_destroy(&attr);
        rdv_registry_remove(srv);
        status = nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: cannot start the server thread");
        goto err_free_srv;
    }
    pthread_attr_destroy(&attr);
    *rid = made;
    NSP_DEBUG("rendezvous server listening at %s", where);
    return NSP_OK;
err_free_srv:
    srv_free(srv);
    return status;
}

nsp_status_t rdv_serve(nsp_unique_id_t *id)
{
    rdv_id_t rid;

    NSP_CHECK(rdv_id_load_port0(id, &rid));
    NSP_CHECK(srv_start(&rid));
    rdv_id_store(&rid, id);
    return NSP_OK;
}

nsp_status_t nsp_bootstrap_tcp_serve(nsp_unique_id_t *id)
{
    return rdv_serve(id);
}

nsp_status_t nsp_get_unique_id(nsp_unique_id_t *id)
{
    rdv_id_t       rid = {0};
    struct in_addr addr;

    if (id == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_get_unique_id: id is NULL");
    }
    NSP_CHECK(rdv_local_address(&addr));
    rid.magic   = RDV_ID_MAGIC;
    rid.version = RDV_ID_VERSION;
    rid.family  = AF_INET;
    rid.flags   = RDV_ID_SECRET;
    memcpy(rid.addr, &addr, 4);
    NSP_CHECK(rdv_random(rid.key, sizeof(rid.key)));
    NSP_CHECK(srv_start(&rid));
    rdv_id_store(&rid, id);
    return NSP_OK;
}
