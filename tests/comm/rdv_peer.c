/*
 * A hand-driven rendezvous peer for tests (rdv_peer.h).
 */
#include "rdv_peer.h"

#include "../mp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void rdv_peer_id(const nsp_unique_id_t *id, rdv_id_t *rid)
{
    memcpy(rid, id->internal, sizeof(*rid));
}

int rdv_peer_connect(const rdv_id_t *rid, rdv_peer_t *p)
{
    struct sockaddr_in sa = {0};

    memset(p, 0, sizeof(*p));
    p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        return -1;
    }
    sa.sin_family = AF_INET;
    sa.sin_port   = htons(rid->port);
    memcpy(&sa.sin_addr, rid->addr, 4);
    if (connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    return 0;
}

int rdv_peer_send(rdv_peer_t *p, const void *buf, size_t len)
{
    return send(p->fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* Read exactly len bytes within timeout_s: 1, 0 on EOF, -1 on timeout/error. */
static int peer_read(rdv_peer_t *p, void *buf, size_t len, double timeout_s)
{
    double end = mp_now() + timeout_s;
    size_t got = 0;

    while (got < len) {
        struct pollfd pfd  = {.fd = p->fd, .events = POLLIN};
        int           left = (int)((end - mp_now()) * 1000.0);
        ssize_t       n;
        if (left <= 0 || poll(&pfd, 1, left) <= 0) {
            return -1;
        }
        n = recv(p->fd, (char *)buf + got, len - got, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            return 0;
        }
        if (n < 0) {
            return -1;
        }
        got += (size_t)n;
    }
    return 1;
}

int rdv_peer_challenge(rdv_peer_t *p, double timeout_s)
{
    uint8_t   raw[RDV_HDR_BYTES];
    rdv_hdr_t hdr;
    char      why[256];

    if (peer_read(p, raw, sizeof(raw), timeout_s) != 1 ||
        rdv_hdr_parse(raw, RDV_AT_CHALLENGE, 0, &hdr, why, sizeof(why)) != NSP_OK ||
        hdr.type != RDV_MSG_CHALLENGE) {
        return -1;
    }
    return peer_read(p, p->snonce, sizeof(p->snonce), timeout_s) == 1 ? 0 : -1;
}

void rdv_peer_auth_msg(const rdv_peer_t *p, const uint8_t key[RDV_KEY_BYTES], uint32_t nranks,
                       uint32_t rank, uint8_t *out)
{
    rdv_auth_t a = {0};

    memset(a.cnonce, 0x5a, sizeof(a.cnonce));
    a.nranks     = nranks;
    a.rank       = rank;
    a.timeout_ms = 10000;
    rdv_auth_encode(&a, out + RDV_HDR_BYTES);
    rdv_mac(key, 0, p->snonce, out + RDV_HDR_BYTES, a.mac);
    rdv_auth_encode(&a, out + RDV_HDR_BYTES);
    rdv_hdr_encode(RDV_MSG_AUTH, RDV_AUTH_BYTES, out);
}

peer_outcome_t rdv_peer_outcome(rdv_peer_t *p, double timeout_s)
{
    uint8_t      raw[RDV_HDR_BYTES], msg[4 + RDV_ERROR_TEXT_MAX];
    rdv_hdr_t    hdr;
    char         why[256];
    nsp_status_t code;
    int          rc = peer_read(p, raw, sizeof(raw), timeout_s);

    if (rc != 1) {
        return rc == 0 ? PEER_CLOSED : PEER_OPEN;
    }
    /* A challenge nobody read yet comes first: skip it. */
    if (rdv_hdr_parse(raw, RDV_AT_CHALLENGE, 0, &hdr, why, sizeof(why)) == NSP_OK &&
        hdr.type == RDV_MSG_CHALLENGE) {
        if (peer_read(p, p->snonce, sizeof(p->snonce), timeout_s) != 1) {
            return PEER_CLOSED;
        }
        return rdv_peer_outcome(p, timeout_s);
    }
    if (rdv_hdr_parse(raw, RDV_AT_WELCOME, 0, &hdr, why, sizeof(why)) != NSP_OK) {
        return PEER_OTHER;
    }
    if (peer_read(p, msg, (size_t)hdr.len, timeout_s) != 1) {
        return PEER_OTHER;
    }
    if (hdr.type == RDV_MSG_WELCOME) {
        return PEER_WELCOME;
    }
    rdv_error_decode(msg, (size_t)hdr.len, &code, p->text, sizeof(p->text));
    return PEER_ERROR;
}

void rdv_peer_close(rdv_peer_t *p)
{
    if (p->fd >= 0) {
        close(p->fd);
    }
    p->fd = -1;
}

long rdv_rss_kib(void)
{
    char  line[256];
    long  kib = -1;
    FILE *f   = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}
