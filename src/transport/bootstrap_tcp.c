/*
 * The TCP rendezvous behind nsp_get_unique_id / nsp_comm_init_rank /
 * nsp_comm_init_env: a star through one server thread.
 *
 * The process that creates the id runs a detached thread that listens on a
 * port. Each rank connects, says HELLO (nonce, nranks, rank, timeout), and
 * then runs rounds: every rank sends DATA (its part), the server waits for
 * all parts and sends every rank the RESULT ([nranks][bytes]). When every
 * rank sent CLOSE the thread ends. If a rank is missing, dies, or parts
 * disagree, the server sends ERROR (a status and a message naming the ranks)
 * to everyone still connected and ends.
 *
 * Wire format: a 16-byte header {magic, type, payload length} in network
 * byte order, then the payload. Every socket read or write has a deadline.
 */
#include "transport/bootstrap.h"

#include "common/log.h"
#include "transport/request.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TCP_ID_MAGIC   0x4e535042u /* "NSPB" */
#define TCP_ID_VERSION 1
#define TCP_MSG_MAGIC  0x4e53504du /* "NSPM" */
/* A rank waits this much longer than the server, so the server's precise
 * error (which rank is missing) reaches it before its own deadline. */
#define TCP_CLIENT_GRACE_S 2.0
#define TCP_ERROR_TEXT_MAX 512

/* What an nsp_unique_id_t holds for the TCP rendezvous. */
typedef struct tcp_id {
    uint32_t magic;
    uint16_t version;
    uint16_t family;   /* AF_INET or AF_INET6 */
    uint8_t  addr[16]; /* in_addr or in6_addr, network order */
    uint16_t port;     /* host order */
    uint16_t pad;
    uint64_t nonce;    /* 0: no nonce (NSPCOMM_ROOT rendezvous) */
} tcp_id_t;

_Static_assert(sizeof(tcp_id_t) <= NSP_UNIQUE_ID_BYTES, "tcp id must fit in nsp_unique_id_t");

typedef enum {
    TCP_MSG_HELLO  = 1, /* payload: tcp_hello_t */
    TCP_MSG_DATA   = 2, /* payload: this rank's part */
    TCP_MSG_CLOSE  = 3, /* no payload */
    TCP_MSG_RESULT = 4, /* payload: [nranks][bytes] */
    TCP_MSG_ERROR  = 5  /* payload: int32 status, then message text */
} tcp_msg_type_t;

typedef struct tcp_hdr {
    uint32_t magic;
    uint32_t type;
    uint64_t len;
} tcp_hdr_t;

typedef struct tcp_hello {
    uint64_t nonce;
    uint32_t nranks;
    uint32_t rank;
    uint32_t timeout_ms;
    uint32_t pad;
} tcp_hello_t;

/* ------------------------------------------------------------------------ */
/* Sockets with deadlines                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t tcp_hton64(uint64_t v)
{
    return ((uint64_t)htonl((uint32_t)(v & 0xffffffffu)) << 32) | htonl((uint32_t)(v >> 32));
}

static uint64_t tcp_ntoh64(uint64_t v)
{
    return tcp_hton64(v);
}

/* Milliseconds left until `deadline` for poll(); -1 when deadline < 0 (none). */
static int tcp_poll_ms(double deadline)
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

/* Wait for `events` on fd; NSP_OK, NSP_ERR_TIMEOUT (quiet: callers word the
 * message), or NSP_ERR_IO. */
static nsp_status_t tcp_wait_fd(int fd, short events, double deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events, .revents = 0};

    for (;;) {
        int rc = poll(&pfd, 1, tcp_poll_ms(deadline));
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

/* Write all of buf. NSP_ERR_PEER_FAILED when the other side is gone. */
static nsp_status_t tcp_send_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n;
        NSP_CHECK(tcp_wait_fd(fd, POLLOUT, deadline));
        n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
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

/* Read exactly len bytes. NSP_ERR_PEER_FAILED on EOF. */
static nsp_status_t tcp_recv_all(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n;
        NSP_CHECK(tcp_wait_fd(fd, POLLIN, deadline));
        n = recv(fd, p, len, 0);
        if (n == 0) {
            return nsp_error_quiet(NSP_ERR_PEER_FAILED, "connection closed by the other side");
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
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

static nsp_status_t tcp_send_msg(int fd, uint32_t type, const void *payload, size_t len,
                                 double deadline)
{
    tcp_hdr_t hdr = {htonl(TCP_MSG_MAGIC), htonl(type), tcp_hton64(len)};

    NSP_CHECK(tcp_send_all(fd, &hdr, sizeof(hdr), deadline));
    if (len > 0) {
        NSP_CHECK(tcp_send_all(fd, payload, len, deadline));
    }
    return NSP_OK;
}

static nsp_status_t tcp_recv_hdr(int fd, uint32_t *type, uint64_t *len, double deadline)
{
    tcp_hdr_t hdr;

    NSP_CHECK(tcp_recv_all(fd, &hdr, sizeof(hdr), deadline));
    if (ntohl(hdr.magic) != TCP_MSG_MAGIC) {
        return nsp_error_quiet(NSP_ERR_IO, "bad message magic 0x%08x: not an nspcomm "
                                           "rendezvous peer",
                               ntohl(hdr.magic));
    }
    *type = ntohl(hdr.type);
    *len  = tcp_ntoh64(hdr.len);
    return NSP_OK;
}

static void tcp_set_nodelay(int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ------------------------------------------------------------------------ */
/* Ids and addresses                                                        */
/* ------------------------------------------------------------------------ */

static void tcp_id_store(const tcp_id_t *tid, nsp_unique_id_t *id)
{
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, tid, sizeof(*tid));
}

static nsp_status_t tcp_id_load(const nsp_unique_id_t *id, tcp_id_t *tid)
{
    memcpy(tid, id->internal, sizeof(*tid));
    if (tid->magic != TCP_ID_MAGIC || tid->version != TCP_ID_VERSION ||
        (tid->family != AF_INET && tid->family != AF_INET6) || tid->port == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "not an nspcomm unique id (magic 0x%08x, version %u): create it with "
                         "nsp_get_unique_id() or nsp_unique_id_from_string()",
                         tid->magic, tid->version);
    }
    return NSP_OK;
}

nsp_status_t nsp_bootstrap_tcp_port(const nsp_unique_id_t *id, int *port)
{
    tcp_id_t tid;

    NSP_CHECK(tcp_id_load(id, &tid));
    *port = tid.port;
    return NSP_OK;
}

/* "a.b.c.d:port" or "[v6]:port" of an id, for messages. */
static void tcp_id_where(const tcp_id_t *tid, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    inet_ntop(tid->family, tid->addr, host, sizeof(host));
    snprintf(buf, len, tid->family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, tid->port);
}

/* The IPv4 address to advertise: $NSPCOMM_SOCKET_IFNAME's, else the first
 * non-loopback interface that is up, else 127.0.0.1. */
static nsp_status_t tcp_local_address(struct in_addr *out)
{
    const char     *want = getenv("NSPCOMM_SOCKET_IFNAME");
    struct ifaddrs *ifs  = NULL;
    int             found = 0;

    out->s_addr = htonl(INADDR_LOOPBACK);
    if (getifaddrs(&ifs) != 0) {
        NSP_WARN("getifaddrs: %s; advertising 127.0.0.1 for the rendezvous", strerror(errno));
        return NSP_OK;
    }
    for (struct ifaddrs *it = ifs; it != NULL && !found; it = it->ifa_next) {
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != AF_INET ||
            !(it->ifa_flags & IFF_UP)) {
            continue;
        }
        if (want != NULL && want[0] != '\0' ? strcmp(it->ifa_name, want) == 0
                                            : !(it->ifa_flags & IFF_LOOPBACK)) {
            *out  = ((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr;
            found = 1;
        }
    }
    freeifaddrs(ifs);
    if (!found && want != NULL && want[0] != '\0') {
        return nsp_error(NSP_ERR_NOT_FOUND,
                         "NSPCOMM_SOCKET_IFNAME=%s: no such interface with an IPv4 address "
                         "that is up (see `ip addr`)",
                         want);
    }
    return NSP_OK;
}

nsp_status_t nsp_unique_id_to_string(const nsp_unique_id_t *id, char *buf, size_t len)
{
    tcp_id_t tid;
    char     where[INET6_ADDRSTRLEN + 16];
    int      n;

    if (id == NULL || buf == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_unique_id_to_string: NULL argument");
    }
    NSP_CHECK(tcp_id_load(id, &tid));
    tcp_id_where(&tid, where, sizeof(where));
    n = snprintf(buf, len, "%s:%016llx", where, (unsigned long long)tid.nonce);
    if (n < 0 || (size_t)n >= len) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_unique_id_to_string: buffer of %zu bytes is too small; use "
                         "NSP_UNIQUE_ID_STRLEN (%d)",
                         len, NSP_UNIQUE_ID_STRLEN);
    }
    return NSP_OK;
}

/* Resolve a host name or numeric address into tid (IPv4 preferred). */
static nsp_status_t tcp_resolve(const char *host, tcp_id_t *tid)
{
    struct addrinfo  hints = {0};
    struct addrinfo *res   = NULL;
    int              rc;

    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc                = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        return nsp_error(NSP_ERR_NOT_FOUND, "rendezvous host '%s' does not resolve: %s", host,
                         gai_strerror(rc));
    }
    const struct addrinfo *pick = res;
    for (const struct addrinfo *it = res; it != NULL; it = it->ai_next) {
        if (it->ai_family == AF_INET) {
            pick = it;
            break;
        }
    }
    tid->family = (uint16_t)pick->ai_family;
    if (pick->ai_family == AF_INET) {
        memcpy(tid->addr, &((struct sockaddr_in *)(void *)pick->ai_addr)->sin_addr, 4);
    } else {
        memcpy(tid->addr, &((struct sockaddr_in6 *)(void *)pick->ai_addr)->sin6_addr, 16);
    }
    freeaddrinfo(res);
    return NSP_OK;
}

nsp_status_t nsp_unique_id_from_string(const char *str, nsp_unique_id_t *id)
{
    tcp_id_t           tid  = {0};
    char               host[256];
    const char        *rest;
    char              *end;
    unsigned long      port;
    unsigned long long nonce = 0;

    if (str == NULL || id == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_unique_id_from_string: NULL argument");
    }
    /* HOST is "[v6]" or everything up to the first ':'. */
    if (str[0] == '[') {
        const char *close = strchr(str, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - str - 1) >= sizeof(host)) {
            goto err_parse;
        }
        memcpy(host, str + 1, (size_t)(close - str - 1));
        host[close - str - 1] = '\0';
        rest                  = close + 2;
    } else {
        const char *colon = strchr(str, ':');
        if (colon == NULL || colon == str || (size_t)(colon - str) >= sizeof(host)) {
            goto err_parse;
        }
        memcpy(host, str, (size_t)(colon - str));
        host[colon - str] = '\0';
        rest              = colon + 1;
    }
    errno = 0;
    port  = strtoul(rest, &end, 10);
    if (errno != 0 || end == rest || port == 0 || port > 65535) {
        goto err_parse;
    }
    if (*end == ':') {
        const char *hex = end + 1;
        nonce           = strtoull(hex, &end, 16);
        if (end == hex || *end != '\0') {
            goto err_parse;
        }
    } else if (*end != '\0') {
        goto err_parse;
    }
    NSP_CHECK(tcp_resolve(host, &tid));
    tid.magic   = TCP_ID_MAGIC;
    tid.version = TCP_ID_VERSION;
    tid.port    = (uint16_t)port;
    tid.nonce   = nonce;
    tcp_id_store(&tid, id);
    return NSP_OK;
err_parse:
    return nsp_error(NSP_ERR_PARSE,
                     "'%s' is not a rendezvous address: expected HOST:PORT or HOST:PORT:NONCE "
                     "(as printed by nsp_unique_id_to_string), PORT in 1..65535",
                     str);
}

/* ------------------------------------------------------------------------ */
/* The server                                                               */
/* ------------------------------------------------------------------------ */

typedef struct tcp_server {
    int                listen_fd;
    tcp_id_t           id;
    pid_t              pid;      /* the process whose thread serves */
    int                nranks;   /* 0 until the first HELLO */
    double             timeout_s;
    int               *fds;      /* [nranks], -1: not joined */
    uint64_t           part;     /* bytes per rank of the current round */
    char              *parts;    /* [nranks][part] */
    int               *arrived;  /* [nranks]: 1 DATA, 2 CLOSE in this round */
    struct tcp_server *next;     /* registry list */
} tcp_server_t;

static pthread_mutex_t tcp_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  tcp_registry_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t  tcp_atfork_once   = PTHREAD_ONCE_INIT;
static tcp_server_t   *tcp_registry;

/* A fork while the server thread holds the registry lock would leave the
 * child's copy locked forever: take it around fork. */
static void tcp_atfork_prepare(void)
{
    pthread_mutex_lock(&tcp_registry_lock);
}

static void tcp_atfork_release(void)
{
    pthread_mutex_unlock(&tcp_registry_lock);
}

static void tcp_atfork_install(void)
{
    pthread_atfork(tcp_atfork_prepare, tcp_atfork_release, tcp_atfork_release);
}

static void tcp_registry_add(tcp_server_t *srv)
{
    pthread_mutex_lock(&tcp_registry_lock);
    srv->next    = tcp_registry;
    tcp_registry = srv;
    pthread_mutex_unlock(&tcp_registry_lock);
}

static void tcp_registry_remove(tcp_server_t *srv)
{
    pthread_mutex_lock(&tcp_registry_lock);
    for (tcp_server_t **it = &tcp_registry; *it != NULL; it = &(*it)->next) {
        if (*it == srv) {
            *it = srv->next;
            break;
        }
    }
    pthread_cond_broadcast(&tcp_registry_cond);
    pthread_mutex_unlock(&tcp_registry_lock);
}

/* Tell every connected rank that the rendezvous failed, and why. */
static void srv_broadcast_error(tcp_server_t *srv, nsp_status_t status, const char *text)
{
    size_t  tlen = strlen(text);
    char   *msg  = malloc(4 + tlen);
    int32_t code = (int32_t)htonl((uint32_t)(int32_t)status);

    NSP_DEBUG("rendezvous server port %u fails: %s", srv->id.port, text);
    if (msg == NULL) {
        return;
    }
    memcpy(msg, &code, 4);
    memcpy(msg + 4, text, tlen);
    for (int r = 0; r < srv->nranks; ++r) {
        if (srv->fds[r] >= 0) {
            (void)tcp_send_msg(srv->fds[r], TCP_MSG_ERROR, msg, 4 + tlen, nsp_now_s() + 1.0);
        }
    }
    free(msg);
}

/* Send an error to one connection (a stranger or a bad HELLO) and close it. */
static void srv_reject(int fd, nsp_status_t status, const char *text)
{
    size_t  tlen = strlen(text);
    char    msg[4 + TCP_ERROR_TEXT_MAX];
    int32_t code = (int32_t)htonl((uint32_t)(int32_t)status);

    tlen = tlen < TCP_ERROR_TEXT_MAX ? tlen : TCP_ERROR_TEXT_MAX;
    memcpy(msg, &code, 4);
    memcpy(msg + 4, text, tlen);
    (void)tcp_send_msg(fd, TCP_MSG_ERROR, msg, 4 + tlen, nsp_now_s() + 1.0);
    close(fd);
}

/* Append the ranks for which missing(r) holds, "3, 5, 6", to buf. */
static void srv_list_ranks(const tcp_server_t *srv, int want_state, const int *state, char *buf,
                           size_t len)
{
    size_t used  = strlen(buf);
    int    count = 0;

    for (int r = 0; r < srv->nranks && used + 16 < len; ++r) {
        if (state[r] == want_state) {
            int n = snprintf(buf + used, len - used, "%s%d", count > 0 ? ", " : "", r);
            used += n > 0 ? (size_t)n : 0;
            ++count;
        }
    }
}

/* Read and check one HELLO on a fresh connection; on success the rank is
 * joined. A stranger is rejected alone; an inconsistent job fails all. */
static nsp_status_t srv_accept_one(tcp_server_t *srv, int fd, char *why, size_t whylen)
{
    tcp_hello_t hello;
    uint32_t    type;
    uint64_t    len;
    int         nranks, rank;

    if (tcp_recv_hdr(fd, &type, &len, nsp_now_s() + 5.0) < 0 || type != TCP_MSG_HELLO ||
        len != sizeof(hello) || tcp_recv_all(fd, &hello, sizeof(hello), nsp_now_s() + 5.0) < 0) {
        close(fd);
        return NSP_OK; /* not one of ours */
    }
    if (srv->id.nonce != 0 && tcp_ntoh64(hello.nonce) != srv->id.nonce) {
        srv_reject(fd, NSP_ERR_INVALID_ARG,
                   "the unique id's nonce does not match this rendezvous: the id is from "
                   "another job or was mangled in transit");
        return NSP_OK;
    }
    nranks = (int)ntohl(hello.nranks);
    rank   = (int)ntohl(hello.rank);
    if (nranks < 1 || nranks > (1 << 24)) {
        srv_reject(fd, NSP_ERR_INVALID_ARG, "nranks out of range in HELLO");
        return NSP_OK;
    }
    if (srv->nranks == 0) {
        srv->nranks    = nranks;
        srv->timeout_s = ntohl(hello.timeout_ms) / 1000.0;
        srv->fds       = malloc((size_t)nranks * sizeof(*srv->fds));
        srv->arrived   = calloc((size_t)nranks, sizeof(*srv->arrived));
        if (srv->fds == NULL || srv->arrived == NULL) {
            srv_reject(fd, NSP_ERR_NO_MEMORY, "rendezvous server out of memory");
            srv->nranks = 0;
            return nsp_error_quiet(NSP_ERR_NO_MEMORY, "rendezvous: no memory");
        }
        for (int r = 0; r < nranks; ++r) {
            srv->fds[r] = -1;
        }
    }
    if (nranks != srv->nranks) {
        snprintf(why, whylen,
                 "rank %d says the world has %d ranks but an earlier rank said %d: every rank "
                 "must pass the same nranks",
                 rank, nranks, srv->nranks);
        srv_reject(fd, NSP_ERR_MISMATCH, why);
        return NSP_ERR_MISMATCH;
    }
    if (rank < 0 || rank >= nranks || srv->fds[rank] >= 0) {
        snprintf(why, whylen, "rank %d joined %s (world of %d ranks): every rank needs a "
                              "distinct rank in [0, nranks)",
                 rank, rank >= 0 && rank < nranks ? "twice" : "out of range", nranks);
        srv_reject(fd, NSP_ERR_INVALID_ARG, why);
        return NSP_ERR_INVALID_ARG;
    }
    double t = ntohl(hello.timeout_ms) / 1000.0;
    srv->timeout_s = t > srv->timeout_s ? t : srv->timeout_s;
    srv->fds[rank] = fd;
    tcp_set_nodelay(fd);
    return NSP_OK;
}

static int srv_joined(const tcp_server_t *srv)
{
    int n = 0;

    for (int r = 0; r < srv->nranks; ++r) {
        n += srv->fds[r] >= 0;
    }
    return n;
}

/* Accept ranks until all joined: no limit for the first, then timeout_s. */
static nsp_status_t srv_accept_all(tcp_server_t *srv, char *why, size_t whylen)
{
    double deadline = -1.0;

    while (srv->nranks == 0 || srv_joined(srv) < srv->nranks) {
        nsp_status_t status = tcp_wait_fd(srv->listen_fd, POLLIN, deadline);
        if (status == NSP_ERR_TIMEOUT) {
            int *joined = calloc((size_t)srv->nranks, sizeof(*joined));
            for (int r = 0; joined != NULL && r < srv->nranks; ++r) {
                joined[r] = srv->fds[r] >= 0;
            }
            snprintf(why, whylen, "rank(s) ");
            if (joined != NULL) {
                srv_list_ranks(srv, 0, joined, why, whylen);
            }
            snprintf(why + strlen(why), whylen - strlen(why),
                     " of %d never joined the rendezvous within %.1f s (NSPCOMM_TIMEOUT); "
                     "were they started with the same id?",
                     srv->nranks, srv->timeout_s);
            free(joined);
            return NSP_ERR_TIMEOUT;
        }
        if (status < 0) {
            snprintf(why, whylen, "rendezvous server: %s", nsp_last_error());
            return status;
        }
        int fd = accept(srv->listen_fd, NULL, NULL);
        if (fd < 0) {
            continue;
        }
        NSP_CHECK(srv_accept_one(srv, fd, why, whylen));
        if (srv->nranks > 0 && deadline < 0) {
            deadline = nsp_now_s() + srv->timeout_s;
        }
    }
    return NSP_OK;
}

/* Read one rank's DATA or CLOSE for the current round. */
static nsp_status_t srv_read_part(tcp_server_t *srv, int r, double deadline, char *why,
                                  size_t whylen)
{
    uint32_t     type;
    uint64_t     len;
    nsp_status_t status = tcp_recv_hdr(srv->fds[r], &type, &len, deadline);

    if (status == NSP_OK && type == TCP_MSG_CLOSE) {
        srv->arrived[r] = 2;
        return NSP_OK;
    }
    if (status < 0 || type != TCP_MSG_DATA) {
        snprintf(why, whylen, "rank %d left the rendezvous (its process died or closed the "
                              "connection early)",
                 r);
        return NSP_ERR_PEER_FAILED;
    }
    if (srv->parts == NULL) {
        srv->part  = len;
        srv->parts = malloc((size_t)srv->nranks * (len > 0 ? len : 1));
        if (srv->parts == NULL) {
            snprintf(why, whylen, "rendezvous server: no memory for %d parts of %llu bytes",
                     srv->nranks, (unsigned long long)len);
            return NSP_ERR_NO_MEMORY;
        }
    } else if (len != srv->part) {
        snprintf(why, whylen, "rank %d sent %llu bytes but others sent %llu in the same "
                              "bootstrap allgather",
                 r, (unsigned long long)len, (unsigned long long)srv->part);
        return NSP_ERR_MISMATCH;
    }
    if (tcp_recv_all(srv->fds[r], srv->parts + (size_t)r * len, len, deadline) < 0) {
        snprintf(why, whylen, "rank %d left the rendezvous mid-message", r);
        return NSP_ERR_PEER_FAILED;
    }
    srv->arrived[r] = 1;
    return NSP_OK;
}

/* One round: gather every rank's part (in whatever order they come), then
 * send everyone the result. *closed = 1 when all ranks sent CLOSE instead. */
static nsp_status_t srv_round(tcp_server_t *srv, int *closed, char *why, size_t whylen)
{
    struct pollfd *pfds;
    double         deadline = -1.0;
    int            left     = srv->nranks;
    int            ncloses  = 0;
    nsp_status_t   status   = NSP_OK;

    pfds = calloc((size_t)srv->nranks, sizeof(*pfds));
    if (pfds == NULL) {
        snprintf(why, whylen, "rendezvous server: no memory");
        return NSP_ERR_NO_MEMORY;
    }
    memset(srv->arrived, 0, (size_t)srv->nranks * sizeof(*srv->arrived));
    free(srv->parts);
    srv->parts = NULL;
    while (left > 0) {
        int n = 0;
        for (int r = 0; r < srv->nranks; ++r) {
            pfds[r].fd     = srv->arrived[r] ? -1 : srv->fds[r];
            pfds[r].events = POLLIN;
        }
        n = poll(pfds, (nfds_t)srv->nranks, tcp_poll_ms(deadline));
        if (n == 0) {
            snprintf(why, whylen, "rank(s) ");
            srv_list_ranks(srv, 0, srv->arrived, why, whylen);
            snprintf(why + strlen(why), whylen - strlen(why),
                     " did not take part in a bootstrap allgather within %.1f s "
                     "(NSPCOMM_TIMEOUT) while the others waited",
                     srv->timeout_s);
            status = NSP_ERR_TIMEOUT;
            goto out_free_pfds;
        }
        if (n < 0) {
            continue; /* EINTR */
        }
        for (int r = 0; r < srv->nranks; ++r) {
            if (pfds[r].fd >= 0 && pfds[r].revents != 0) {
                if (deadline < 0) {
                    deadline = nsp_now_s() + srv->timeout_s;
                }
                status = srv_read_part(srv, r, deadline, why, whylen);
                if (status < 0) {
                    goto out_free_pfds;
                }
                ncloses += srv->arrived[r] == 2;
                --left;
            }
        }
    }
    if (ncloses == srv->nranks) {
        *closed = 1;
        goto out_free_pfds;
    }
    if (ncloses > 0) {
        snprintf(why, whylen, "rank(s) ");
        srv_list_ranks(srv, 2, srv->arrived, why, whylen);
        snprintf(why + strlen(why), whylen - strlen(why),
                 " finished bootstrap while others still exchange data: ranks ran different "
                 "init sequences (different backends or configs?)");
        status = NSP_ERR_MISMATCH;
        goto out_free_pfds;
    }
    for (int r = 0; r < srv->nranks; ++r) {
        double send_deadline = nsp_now_s() + srv->timeout_s;
        if (tcp_send_msg(srv->fds[r], TCP_MSG_RESULT, srv->parts,
                         (size_t)srv->nranks * srv->part, send_deadline) < 0) {
            snprintf(why, whylen, "rank %d left the rendezvous before the result reached it",
                     r);
            status = NSP_ERR_PEER_FAILED;
            goto out_free_pfds;
        }
    }
out_free_pfds:
    free(pfds);
    return status;
}

static void srv_free(tcp_server_t *srv)
{
    for (int r = 0; srv->fds != NULL && r < srv->nranks; ++r) {
        if (srv->fds[r] >= 0) {
            close(srv->fds[r]);
        }
    }
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    free(srv->fds);
    free(srv->arrived);
    free(srv->parts);
    free(srv);
}

static void *srv_main(void *arg)
{
    tcp_server_t *srv    = arg;
    char          why[TCP_ERROR_TEXT_MAX] = "";
    int           closed = 0;
    nsp_status_t  status = srv_accept_all(srv, why, sizeof(why));

    /* No more joins: free the port for the next rendezvous. */
    close(srv->listen_fd);
    srv->listen_fd = -1;
    while (status == NSP_OK && !closed) {
        status = srv_round(srv, &closed, why, sizeof(why));
    }
    if (status < 0 && srv->nranks > 0) {
        srv_broadcast_error(srv, status, why);
    }
    tcp_registry_remove(srv);
    srv_free(srv);
    return NULL;
}

static nsp_status_t tcp_listen(int port, int *fd_out, int *port_out)
{
    struct sockaddr_in sa  = {0};
    socklen_t          len = sizeof(sa);
    int                one = 1;
    int                fd  = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return nsp_error(NSP_ERR_IO, "rendezvous: socket: %s", strerror(errno));
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port        = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int err = errno;
        close(fd);
        return nsp_error(NSP_ERR_IO,
                         "rendezvous: cannot listen on port %d: %s%s", port, strerror(err),
                         port != 0 ? " (choose another port in NSPCOMM_ROOT)" : "");
    }
    *fd_out   = fd;
    *port_out = ntohs(sa.sin_port);
    return NSP_OK;
}

nsp_status_t nsp_bootstrap_tcp_serve(int port, int with_nonce, nsp_unique_id_t *id)
{
    tcp_server_t  *srv;
    struct in_addr addr;
    pthread_attr_t attr;
    pthread_t      thread;
    nsp_unique_id_t made;
    nsp_status_t   status;
    int            bound_port = 0;

    pthread_once(&tcp_atfork_once, tcp_atfork_install);
    NSP_CHECK(tcp_local_address(&addr));
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory for the server");
    }
    srv->listen_fd = -1;
    NSP_CHECK_GOTO(tcp_listen(port, &srv->listen_fd, &bound_port), status, err_free_srv);
    srv->id.magic   = TCP_ID_MAGIC;
    srv->id.version = TCP_ID_VERSION;
    srv->id.family  = AF_INET;
    memcpy(srv->id.addr, &addr, 4);
    srv->id.port = (uint16_t)bound_port;
    while (with_nonce && srv->id.nonce == 0) {
        if (getrandom(&srv->id.nonce, sizeof(srv->id.nonce), 0) != sizeof(srv->id.nonce)) {
            srv->id.nonce = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid();
        }
    }
    srv->pid = getpid();
    /* before the thread starts: it frees srv once the rendezvous is over */
    tcp_id_store(&srv->id, &made);
    {
        char where[64];
        tcp_id_where(&srv->id, where, sizeof(where));
        NSP_DEBUG("rendezvous server listening at %s", where);
    }
    tcp_registry_add(srv);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, srv_main, srv) != 0) {
        pthread_attr_destroy(&attr);
        tcp_registry_remove(srv);
        status = nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: cannot start the server thread");
        goto err_free_srv;
    }
    pthread_attr_destroy(&attr);
    *id = made;
    return NSP_OK;
err_free_srv:
    srv_free(srv);
    return status;
}

nsp_status_t nsp_get_unique_id(nsp_unique_id_t *id)
{
    if (id == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_get_unique_id: id is NULL");
    }
    return nsp_bootstrap_tcp_serve(0, 1, id);
}

nsp_status_t nsp_bootstrap_tcp_wait_server(const nsp_unique_id_t *id, double deadline)
{
    tcp_id_t tid;

    memcpy(&tid, id->internal, sizeof(tid));
    pthread_mutex_lock(&tcp_registry_lock);
    for (;;) {
        tcp_server_t *found = NULL;
        for (tcp_server_t *it = tcp_registry; it != NULL; it = it->next) {
            if (it->pid == getpid() && it->id.port == tid.port && it->id.nonce == tid.nonce) {
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
        pthread_cond_timedwait(&tcp_registry_cond, &tcp_registry_lock, &ts);
    }
    pthread_mutex_unlock(&tcp_registry_lock);
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* A rank's side                                                            */
/* ------------------------------------------------------------------------ */

typedef struct tcp_bootstrap {
    nsp_bootstrap_t base;
    int             fd;
    char            where[64];
} tcp_bootstrap_t;

/* Turn a server ERROR payload into our error. */
static nsp_status_t tcp_server_error(tcp_bootstrap_t *bs, uint64_t len, double deadline)
{
    char    text[TCP_ERROR_TEXT_MAX + 1] = "";
    int32_t code                         = (int32_t)NSP_ERR_IO;
    size_t  tlen;

    if (len < 4 || len > 4 + TCP_ERROR_TEXT_MAX ||
        tcp_recv_all(bs->fd, &code, 4, deadline) < 0) {
        return nsp_error(NSP_ERR_IO, "rendezvous at %s sent a malformed error", bs->where);
    }
    tlen = (size_t)len - 4;
    if (tcp_recv_all(bs->fd, text, tlen, deadline) < 0) {
        tlen = 0;
    }
    text[tlen] = '\0';
    code       = (int32_t)ntohl((uint32_t)code);
    if (code >= 0 || code < NSP_ERR_INTERNAL) {
        code = NSP_ERR_IO;
    }
    return nsp_error((nsp_status_t)code, "rank %d: rendezvous at %s failed: %s", bs->base.rank,
                     bs->where, text);
}

static nsp_status_t tcp_lost(tcp_bootstrap_t *bs, nsp_status_t status, const char *doing)
{
    char     cause[256];
    uint32_t type;
    uint64_t len;

    /* The server may have rejected this rank and closed: its ERROR says why. */
    if (status != NSP_ERR_TIMEOUT && tcp_recv_hdr(bs->fd, &type, &len, nsp_now_s() + 0.5) == NSP_OK &&
        type == TCP_MSG_ERROR) {
        return tcp_server_error(bs, len, nsp_now_s() + 0.5);
    }
    /* nsp_error() below overwrites the last error: copy the cause first. */
    snprintf(cause, sizeof(cause), "%s", nsp_last_error());
    if (status == NSP_ERR_TIMEOUT) {
        return nsp_error(NSP_ERR_TIMEOUT,
                         "rank %d: rendezvous at %s did not answer while %s within %.1f s "
                         "(NSPCOMM_TIMEOUT); is the process that created the id alive?",
                         bs->base.rank, bs->where, doing, bs->base.timeout_s + TCP_CLIENT_GRACE_S);
    }
    return nsp_error(status == NSP_ERR_PEER_FAILED ? NSP_ERR_PEER_FAILED : NSP_ERR_IO,
                     "rank %d: lost the rendezvous at %s while %s (%s): the process that "
                     "created the id exited or the network failed",
                     bs->base.rank, bs->where, doing, cause);
}

static nsp_status_t tcp_allgather(nsp_bootstrap_t *base, const void *sendbuf, void *recvbuf,
                                  size_t bytes)
{
    tcp_bootstrap_t *bs       = (tcp_bootstrap_t *)base;
    double           deadline = nsp_now_s() + base->timeout_s + TCP_CLIENT_GRACE_S;
    uint32_t         type;
    uint64_t         len;
    nsp_status_t     status;

    status = tcp_send_msg(bs->fd, TCP_MSG_DATA, sendbuf, bytes, deadline);
    if (status < 0) {
        return tcp_lost(bs, status, "sending its part");
    }
    status = tcp_recv_hdr(bs->fd, &type, &len, deadline);
    if (status < 0) {
        return tcp_lost(bs, status, "waiting for the other ranks");
    }
    if (type == TCP_MSG_ERROR) {
        return tcp_server_error(bs, len, deadline);
    }
    if (type != TCP_MSG_RESULT || len != (uint64_t)base->nranks * bytes) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "rank %d: rendezvous at %s answered %llu bytes for an allgather of %d x "
                         "%zu: ranks disagree on the bootstrap sequence",
                         base->rank, bs->where, (unsigned long long)len, base->nranks, bytes);
    }
    status = tcp_recv_all(bs->fd, recvbuf, (size_t)len, deadline);
    if (status < 0) {
        return tcp_lost(bs, status, "receiving the result");
    }
    return NSP_OK;
}

static nsp_status_t tcp_close(nsp_bootstrap_t *base, int done)
{
    tcp_bootstrap_t *bs = (tcp_bootstrap_t *)base;

    if (done) {
        (void)tcp_send_msg(bs->fd, TCP_MSG_CLOSE, NULL, 0, nsp_now_s() + 1.0);
    }
    close(bs->fd);
    free(bs);
    return NSP_OK;
}

static const nsp_bootstrap_ops_t tcp_bootstrap_ops = {
    .name      = "tcp",
    .allgather = tcp_allgather,
    .close     = tcp_close,
};

/* Connect to the rendezvous, retrying while it is not listening yet (rank 0
 * of an NSPCOMM_ROOT job may start after the others). */
static nsp_status_t tcp_connect(const tcp_id_t *tid, const char *where, int rank,
                                double deadline, int *fd_out)
{
    struct sockaddr_storage ss = {0};
    socklen_t               len;
    int                     last_err = 0;

    if (tid->family == AF_INET) {
        struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
        sa->sin_family         = AF_INET;
        sa->sin_port           = htons(tid->port);
        memcpy(&sa->sin_addr, tid->addr, 4);
        len = sizeof(*sa);
    } else {
        struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&ss;
        sa->sin6_family         = AF_INET6;
        sa->sin6_port           = htons(tid->port);
        memcpy(&sa->sin6_addr, tid->addr, 16);
        len = sizeof(*sa);
    }
    do {
        int fd = socket(tid->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return nsp_error(NSP_ERR_IO, "rendezvous: socket: %s", strerror(errno));
        }
        if (connect(fd, (struct sockaddr *)&ss, len) == 0) {
            tcp_set_nodelay(fd);
            *fd_out = fd;
            return NSP_OK;
        }
        last_err = errno;
        close(fd);
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    } while (nsp_now_s() < deadline);
    return nsp_error(NSP_ERR_TIMEOUT,
                     "rank %d: cannot reach the rendezvous at %s (%s) within the timeout: is the "
                     "process that created the id (or rank 0 for NSPCOMM_ROOT) alive and "
                     "reachable?",
                     rank, where, strerror(last_err));
}

nsp_status_t nsp_bootstrap_tcp_join(const nsp_unique_id_t *id, int rank, int nranks,
                                    double timeout_s, nsp_bootstrap_t **out)
{
    tcp_bootstrap_t *bs;
    tcp_id_t         tid;
    tcp_hello_t      hello = {0};
    nsp_status_t     status;
    double           ms    = timeout_s * 1000.0;

    NSP_CHECK(tcp_id_load(id, &tid));
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rendezvous: no memory");
    }
    bs->base.ops       = &tcp_bootstrap_ops;
    bs->base.rank      = rank;
    bs->base.nranks    = nranks;
    bs->base.timeout_s = timeout_s;
    tcp_id_where(&tid, bs->where, sizeof(bs->where));
    NSP_CHECK_GOTO(tcp_connect(&tid, bs->where, rank, nsp_now_s() + timeout_s, &bs->fd), status,
                   err_free_bs);
    hello.nonce      = tcp_hton64(tid.nonce);
    hello.nranks     = htonl((uint32_t)nranks);
    hello.rank       = htonl((uint32_t)rank);
    hello.timeout_ms = htonl(ms > 4e9 ? 4000000000u : (uint32_t)ms);
    status = tcp_send_msg(bs->fd, TCP_MSG_HELLO, &hello, sizeof(hello), nsp_now_s() + timeout_s);
    if (status < 0) {
        status = tcp_lost(bs, status, "joining");
        goto err_close_fd;
    }
    *out = &bs->base;
    return NSP_OK;
err_close_fd:
    close(bs->fd);
err_free_bs:
    free(bs);
    return status;
}
