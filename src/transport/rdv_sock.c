/*
 * Socket reads and writes with deadlines for the rendezvous (rdv.h). Every
 * error is quiet: the caller knows which peer and step to name.
 */
#include "transport/rdv.h"

#include "common/log.h"
#include "transport/request.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

int rdv_poll_ms(double deadline)
{
    double left;

    if (deadline < 0) {
        return -1;
    }
    left = deadline - nsp_now_s();
    if (left <= 0) {
        return 0;
    }
    return left > 3600.0 ? 3600 * 1000 : (int)(left * 1000.0) + 1;
}

static nsp_status_t rdv_wait_fd(int fd, short events, double deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events, .revents = 0};

    for (;;) {
        int rc = poll(&pfd, 1, rdv_poll_ms(deadline));
        if (rc > 0) {
            return NSP_OK;
        }
        if (rc == 0) {
            return nsp_error_quiet(NSP_ERR_TIMEOUT, "socket wait timed out");
        }
        if (errno != EINTR) {
            return nsp_error_quiet(NSP_ERR_IO, "poll: %s", strerror(errno));
        }
    }
}

nsp_status_t rdv_send_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n;
        NSP_CHECK(rdv_wait_fd(fd, POLLOUT, deadline));
        n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                continue;
            }
            return nsp_error_quiet(errno == EPIPE || errno == ECONNRESET ? NSP_ERR_PEER_FAILED
                                                                           : NSP_ERR_IO,
                                   "send: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return NSP_OK;
}

nsp_status_t rdv_recv_all(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n;
        NSP_CHECK(rdv_wait_fd(fd, POLLIN, deadline));
        n = recv(fd, p, len, MSG_DONTWAIT);
        if (n == 0) {
            return nsp_error_quiet(NSP_ERR_PEER_FAILED, "connection closed by the other side");
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                continue;
            }
            return nsp_error_quiet(errno == ECONNRESET ? NSP_ERR_PEER_FAILED : NSP_ERR_IO,
                                   "recv: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return NSP_OK;
}

/* Header and payload in one segment when they fit (one wake-up of the
 * receiver, not two); the rest, if any, by rdv_send_all. */
nsp_status_t rdv_send_msg(int fd, uint32_t type, const void *payload, size_t len,
                          double deadline)
{
    uint8_t       hdr[RDV_HDR_BYTES];
    struct iovec  iov[2] = {{hdr, sizeof(hdr)}, {(void *)payload, len}};
    struct msghdr msg    = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
    ssize_t       n;

    rdv_hdr_encode(type, len, hdr);
    NSP_CHECK(rdv_wait_fd(fd, POLLOUT, deadline));
    n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return nsp_error_quiet(errno == EPIPE || errno == ECONNRESET ? NSP_ERR_PEER_FAILED
                                                                       : NSP_ERR_IO,
                               "send: %s", strerror(errno));
    }
    n = n < 0 ? 0 : n;
    if ((size_t)n < sizeof(hdr)) {
        NSP_CHECK(rdv_send_all(fd, hdr + n, sizeof(hdr) - (size_t)n, deadline));
        n = (ssize_t)sizeof(hdr);
    }
    if ((size_t)n - sizeof(hdr) == len) {
        return NSP_OK;
    }
    return rdv_send_all(fd, (const char *)payload + ((size_t)n - sizeof(hdr)),
                        len - ((size_t)n - sizeof(hdr)), deadline);
}

nsp_status_t rdv_recv_hdr(int fd, rdv_phase_t phase, uint64_t expect, rdv_hdr_t *hdr,
                          double deadline)
{
    uint8_t      raw[RDV_HDR_BYTES];
    char         why[256];
    nsp_status_t status;

    NSP_CHECK(rdv_recv_all(fd, raw, sizeof(raw), deadline));
    status = rdv_hdr_parse(raw, phase, expect, hdr, why, sizeof(why));
    if (status != NSP_OK) {
        return nsp_error_quiet(status, "%s", why);
    }
    return NSP_OK;
}

void rdv_set_nodelay(int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
