/*
 * A rank's side of the TCP rendezvous (rdv.h): connect, answer the
 * server's challenge with the id's secret, check that the server knows it
 * too, then run allgather rounds (DATA up, RESULT down) and CLOSE. Every
 * read has a deadline and every length read is the one this step expects.
 */
#include "transport/bootstrap.h"
#include "transport/rdv.h"

#include "common/log.h"
#include "transport/request.h"

#include <openssl/crypto.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A rank waits this much longer than the server, so the server's precise
 * error (which rank is missing) reaches it before its own deadline. */
#define RDV_CLIENT_GRACE_S 2.0

typedef struct rdv_bootstrap {
    nsp_bootstrap_t base;
    int             fd;
    rdv_id_t        id;
    char            where[64];
} rdv_bootstrap_t;

/* The server's ERROR (header already read) as our error. */
static nsp_status_t rdv_server_error(rdv_bootstrap_t *bs, uint64_t len, double deadline)
{
    uint8_t      msg[4 + RDV_ERROR_TEXT_MAX];
    char         text[RDV_ERROR_TEXT_MAX + 1] = "";
    nsp_status_t code;

    if (rdv_recv_all(bs->fd, msg, (size_t)len, deadline) < 0) {
        return nsp_error(NSP_ERR_IO, "rank %d: rendezvous at %s sent a truncated error",
                         bs->base.rank, bs->where);
    }
    rdv_error_decode(msg, (size_t)len, &code, text, sizeof(text));
    return nsp_error(code, "rank %d: rendezvous at %s failed: %s", bs->base.rank, bs->where,
                     text);
}

static nsp_status_t rdv_lost(rdv_bootstrap_t *bs, nsp_status_t status, const char *doing)
{
    char      cause[256];
    rdv_hdr_t hdr;

    /* The server may have rejected this rank and closed: its ERROR says why. */
    if (status != NSP_ERR_TIMEOUT &&
        rdv_recv_hdr(bs->fd, RDV_AT_RESULT, UINT64_MAX, &hdr, nsp_now_s() + 0.5) == NSP_OK &&
        hdr.type == RDV_MSG_ERROR) {
        return rdv_server_error(bs, hdr.len, nsp_now_s() + 0.5);
    }
    /* nsp_error() below overwrites the last error: copy the cause first. */
    snprintf(cause, sizeof(cause), "%s", nsp_last_error());
    if (status == NSP_ERR_TIMEOUT) {
        return nsp_error(NSP_ERR_TIMEOUT,
                         "rank %d: rendezvous at %s did not answer while %s within %.1f s "
                         "(NSPCOMM_TIMEOUT); is the process that created the id alive?",
                         bs->base.rank, bs->where, doing,
                         bs->base.timeout_s + RDV_CLIENT_GRACE_S);
    }
    return nsp_error(status == NSP_ERR_PEER_FAILED ? NSP_ERR_PEER_FAILED
                     : status == NSP_ERR_MISMATCH  ? NSP_ERR_MISMATCH
                                                   : NSP_ERR_IO,
                     "rank %d: lost the rendezvous at %s while %s (%s): the process that "
                     "created the id exited or the network failed",
                     bs->base.rank, bs->where, doing, cause);
}

static nsp_status_t rdv_allgather(nsp_bootstrap_t *base, const void *sendbuf, void *recvbuf,
                                  size_t bytes)
{
    rdv_bootstrap_t *bs       = (rdv_bootstrap_t *)base;
    double           deadline = nsp_now_s() + base->timeout_s + RDV_CLIENT_GRACE_S;
    uint64_t         total;
    rdv_hdr_t        hdr;
    nsp_status_t     status;

    if (bytes > RDV_PART_MAX ||
        !rdv_mul_bounded((uint64_t)base->nranks, bytes, RDV_RESULT_MAX, &total)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "rank %d: bootstrap allgather of %d x %zu bytes exceeds the "
                         "rendezvous's bounds (%u bytes a part, %llu in all)",
                         base->rank, base->nranks, bytes, RDV_PART_MAX,
                         (unsigned long long)RDV_RESULT_MAX);
    }
    status = rdv_send_msg(bs->fd, RDV_MSG_DATA, sendbuf, bytes, deadline);
    if (status < 0) {
        return rdv_lost(bs, status, "sending its part");
    }
    status = rdv_recv_hdr(bs->fd, RDV_AT_RESULT, total, &hdr, deadline);
    if (status == NSP_ERR_MISMATCH) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "rank %d: rendezvous at %s answered a result of another size for an "
                         "allgather of %d x %zu: ranks disagree on the bootstrap sequence (%s)",
                         base->rank, bs->where, base->nranks, bytes, nsp_last_error());
    }
    if (status < 0) {
        return rdv_lost(bs, status, "waiting for the other ranks");
    }
    if (hdr.type == RDV_MSG_ERROR) {
        return rdv_server_error(bs, hdr.len, deadline);
    }
    status = rdv_recv_all(bs->fd, recvbuf, (size_t)total, deadline);
    if (status < 0) {
        return rdv_lost(bs, status, "receiving the result");
    }
    return NSP_OK;
}

static nsp_status_t rdv_close(nsp_bootstrap_t *base, int done)
{
    rdv_bootstrap_t *bs = (rdv_bootstrap_t *)base;

    if (done) {
        (void)rdv_send_msg(bs->fd, RDV_MSG_CLOSE, NULL, 0, nsp_now_s() + 1.0);
    }
    close(bs->fd);
    OPENSSL_cleanse(&bs->id, sizeof(bs->id));
    free(bs);
    return NSP_OK;
}

static const nsp_bootstrap_ops_t rdv_bootstrap_ops = {
    .name      = "tcp",
    .allgather = rdv_allgather,
    .close     = rdv_close,
};

/* One TCP connection to the rendezvous; errno-style result in *err. */
static int rdv_connect_once(const rdv_id_t *rid, int *err)
{
    struct sockaddr_storage ss;
    socklen_t               len = rdv_id_sockaddr(rid, &ss);
    int                     fd;

    fd = socket(rid->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    rdv_set_nodelay(fd);
    return fd;
}

/* The server proves it holds the secret too: WELCOME is its MAC over our
 * AUTH and its own challenge. */
static nsp_status_t rdv_check_welcome(rdv_bootstrap_t *bs, const uint8_t *snonce,
                                      const uint8_t *auth, const uint8_t *mac)
{
    uint8_t want[RDV_MAC_BYTES];

    if (rdv_mac(bs->id.key, 1, snonce, auth, want) != NSP_OK) {
        return nsp_error(NSP_ERR_INTERNAL, "rendezvous: HMAC-SHA256 failed");
    }
    if (CRYPTO_memcmp(want, mac, RDV_MAC_BYTES) != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "rank %d: the rendezvous at %s does not hold this id's secret: it is "
                         "not the server of this job (another job on that port, or "
                         "NSPCOMM_TOKEN differs)",
                         bs->base.rank, bs->where);
    }
    return NSP_OK;
}

/* Challenge, AUTH, WELCOME on a fresh connection. NSP_ERR_PEER_FAILED:
 * the server closed before answering (it was busy: try again); other
 * errors are final and logged. */
static nsp_status_t rdv_handshake(rdv_bootstrap_t *bs, double deadline)
{
    uint8_t      snonce[RDV_NONCE_BYTES], msg[RDV_AUTH_BYTES], mac[RDV_MAC_BYTES];
    rdv_auth_t   auth = {0};
    rdv_hdr_t    hdr;
    double       ms   = bs->base.timeout_s * 1000.0;
    nsp_status_t status;

    status = rdv_recv_hdr(bs->fd, RDV_AT_CHALLENGE, 0, &hdr, deadline);
    if (status == NSP_OK && hdr.type == RDV_MSG_CHALLENGE) {
        status = rdv_recv_all(bs->fd, snonce, sizeof(snonce), deadline);
    } else if (status == NSP_OK) {
        return rdv_server_error(bs, hdr.len, deadline);
    }
    if (status < 0) {
        return status == NSP_ERR_IO ? rdv_lost(bs, status, "joining") : status;
    }
    NSP_CHECK(rdv_random(auth.cnonce, sizeof(auth.cnonce)));
    auth.nranks     = (uint32_t)bs->base.nranks;
    auth.rank       = (uint32_t)bs->base.rank;
    auth.timeout_ms = ms > 4e9 ? 4000000000u : (uint32_t)ms;
    rdv_auth_encode(&auth, msg);
    if (rdv_mac(bs->id.key, 0, snonce, msg, auth.mac) != NSP_OK) {
        return nsp_error(NSP_ERR_INTERNAL, "rendezvous: HMAC-SHA256 failed");
    }
    rdv_auth_encode(&auth, msg);
    status = rdv_send_msg(bs->fd, RDV_MSG_AUTH, msg, sizeof(msg), deadline);
    if (status == NSP_OK) {
        status = rdv_recv_hdr(bs->fd, RDV_AT_WELCOME, 0, &hdr, deadline);
    }
    if (status == NSP_OK && hdr.type == RDV_MSG_ERROR) {
        return rdv_server_error(bs, hdr.len, deadline);
    }
    if (status == NSP_OK) {
        status = rdv_recv_all(bs->fd, mac, sizeof(mac), deadline);
    }
    if (status < 0) {
        return status == NSP_ERR_IO ? rdv_lost(bs, status, "joining") : status;
    }
    return rdv_check_welcome(bs, snonce, msg, mac);
}

/* Connect and authenticate, retrying while the server is not listening
 * yet (rank 0 of an NSPCOMM_ROOT job may start after the others) or
 * closed the connection unanswered (it had too many strangers waiting). */
static nsp_status_t rdv_connect(rdv_bootstrap_t *bs, double deadline)
{
    int          last_err = 0;
    nsp_status_t status;

    do {
        int fd = rdv_connect_once(&bs->id, &last_err);
        if (fd >= 0) {
            double step = nsp_now_s() + 5.0;
            bs->fd      = fd;
            status      = rdv_handshake(bs, step < deadline ? step : deadline);
            if (status == NSP_OK) {
                return NSP_OK;
            }
            close(fd);
            bs->fd = -1;
            if (status != NSP_ERR_PEER_FAILED && status != NSP_ERR_TIMEOUT) {
                return status;
            }
            last_err = status == NSP_ERR_TIMEOUT ? ETIMEDOUT : ECONNRESET;
        }
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    } while (nsp_now_s() < deadline);
    return nsp_error(NSP_ERR_TIMEOUT,
                     "rank %d: cannot reach the rendezvous at %s (%s) within the timeout: is the "
                     "process that created the id (or rank 0 for NSPCOMM_ROOT) alive and "
                     "reachable?",
                     bs->base.rank, bs->where, strerror(last_err));
}

nsp_status_t nsp_bootstrap_tcp_join(const nsp_unique_id_t *id, int rank, int nranks,
                                    double timeout_s, nsp_bootstrap_t **out)
{
    rdv_bootstrap_t *bs;
    nsp_status_t     status;

    if (nranks < 1 || nranks > RDV_NRANKS_MAX || rank < 0 || rank >= nranks) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "rendezvous: rank %d of %d ranks: need 0 <= rank < nranks <= %d", rank,
                         nranks, RDV_NRANKS_MAX);
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory");
    }
    NSP_CHECK_GOTO(rdv_id_load(id, &bs->id), status, err_free_bs);
    bs->base.ops       = &rdv_bootstrap_ops;
    bs->base.rank      = rank;
    bs->base.nranks    = nranks;
    bs->base.timeout_s = timeout_s;
    bs->fd             = -1;
    rdv_id_where(&bs->id, bs->where, sizeof(bs->where));
    NSP_CHECK_GOTO(rdv_connect(bs, nsp_now_s() + timeout_s), status, err_free_bs);
    *out = &bs->base;
    return NSP_OK;
err_free_bs:
    OPENSSL_cleanse(&bs->id, sizeof(bs->id));
    free(bs);
    return status;
}
