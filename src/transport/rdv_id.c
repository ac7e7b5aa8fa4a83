/*
 * What a rendezvous id holds (rdv.h): address, port and the 32-byte secret;
 * its printable form "ADDRESS:PORT:SECRET" (64 hex digits); the address to
 * advertise; and, for NSPCOMM_ROOT rendezvous, the secret derived from
 * NSPCOMM_TOKEN / NSPCOMM_TOKEN_FILE or, without one, loopback only.
 */
#include "transport/rdv.h"

#include "common/log.h"
#include "transport/bootstrap.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define RDV_TOKEN_MIN      16   /* characters of NSPCOMM_TOKEN */
#define RDV_TOKEN_FILE_MAX 4096 /* bytes read from NSPCOMM_TOKEN_FILE */

void rdv_id_store(const rdv_id_t *rid, nsp_unique_id_t *id)
{
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, rid, sizeof(*rid));
}

nsp_status_t rdv_id_load(const nsp_unique_id_t *id, rdv_id_t *rid)
{
    NSP_CHECK(rdv_id_load_port0(id, rid));
    if (rid->port == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "unique id without a port: not served yet");
    }
    return NSP_OK;
}

nsp_status_t rdv_id_load_port0(const nsp_unique_id_t *id, rdv_id_t *rid)
{
    memcpy(rid, id->internal, sizeof(*rid));
    if (rid->magic != RDV_ID_MAGIC || rid->version != RDV_ID_VERSION ||
        (rid->family != AF_INET && rid->family != AF_INET6)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "not an nspcomm unique id (magic 0x%08x, version %u): create it with "
                         "nsp_get_unique_id() or nsp_unique_id_from_string()",
                         rid->magic, rid->version);
    }
    return NSP_OK;
}

void rdv_id_where(const rdv_id_t *rid, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    inet_ntop(rid->family, rid->addr, host, sizeof(host));
    snprintf(buf, len, rid->family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, rid->port);
}

socklen_t rdv_id_sockaddr(const rdv_id_t *rid, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (rid->family == AF_INET) {
        struct sockaddr_in *sa = (struct sockaddr_in *)ss;
        sa->sin_family         = AF_INET;
        sa->sin_port           = htons(rid->port);
        memcpy(&sa->sin_addr, rid->addr, 4);
        return sizeof(*sa);
    }
    struct sockaddr_in6 *sa = (struct sockaddr_in6 *)ss;
    sa->sin6_family         = AF_INET6;
    sa->sin6_port           = htons(rid->port);
    memcpy(&sa->sin6_addr, rid->addr, 16);
    return sizeof(*sa);
}

nsp_status_t rdv_random(uint8_t *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return nsp_error(NSP_ERR_IO, "rendezvous: getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    return NSP_OK;
}

nsp_status_t rdv_local_address(struct in_addr *out)
{
    const char     *want  = getenv("NSPCOMM_SOCKET_IFNAME");
    struct ifaddrs *ifs   = NULL;
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

/* ------------------------------------------------------------------------ */
/* Printable form                                                           */
/* ------------------------------------------------------------------------ */

nsp_status_t nsp_unique_id_to_string(const nsp_unique_id_t *id, char *buf, size_t len)
{
    rdv_id_t rid;
    char     where[INET6_ADDRSTRLEN + 16];
    char     hex[2 * RDV_KEY_BYTES + 2] = "";
    int      n;

    if (id == NULL || buf == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_unique_id_to_string: NULL argument");
    }
    NSP_CHECK(rdv_id_load(id, &rid));
    rdv_id_where(&rid, where, sizeof(where));
    if (rid.flags & RDV_ID_SECRET) {
        hex[0] = ':';
        for (int i = 0; i < RDV_KEY_BYTES; ++i) {
            snprintf(hex + 1 + 2 * i, 3, "%02x", rid.key[i]);
        }
    }
    n = snprintf(buf, len, "%s%s", where, hex);
    if (n < 0 || (size_t)n >= len) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_unique_id_to_string: buffer of %zu bytes is too small; use "
                         "NSP_UNIQUE_ID_STRLEN (%d)",
                         len, NSP_UNIQUE_ID_STRLEN);
    }
    return NSP_OK;
}

/* Resolve a host name or numeric address into rid (IPv4 preferred). */
static nsp_status_t rdv_resolve(const char *host, rdv_id_t *rid)
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
    rid->family = (uint16_t)pick->ai_family;
    if (pick->ai_family == AF_INET) {
        memcpy(rid->addr, &((struct sockaddr_in *)(void *)pick->ai_addr)->sin_addr, 4);
    } else {
        memcpy(rid->addr, &((struct sockaddr_in6 *)(void *)pick->ai_addr)->sin6_addr, 16);
    }
    freeaddrinfo(res);
    return NSP_OK;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Exactly 2 * RDV_KEY_BYTES hex digits into key; 0 if not. */
static int parse_secret(const char *hex, uint8_t key[RDV_KEY_BYTES])
{
    if (strlen(hex) != 2 * RDV_KEY_BYTES) {
        return 0;
    }
    for (int i = 0; i < RDV_KEY_BYTES; ++i) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return 0;
        }
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return 1;
}

/* Split "HOST:REST" or "[V6]:REST": host into host[hostlen], *rest after ':'. */
static int split_host(const char *str, char *host, size_t hostlen, const char **rest)
{
    const char *close = str[0] == '[' ? strchr(str, ']') : NULL;
    const char *from  = str[0] == '[' ? str + 1 : str;
    const char *colon = str[0] == '[' ? (close != NULL ? close + 1 : NULL) : strchr(str, ':');
    size_t      n;

    if (colon == NULL || *colon != ':' || (str[0] == '[' && close == NULL)) {
        return 0;
    }
    n = (size_t)((str[0] == '[' ? close : colon) - from);
    if (n == 0 || n >= hostlen) {
        return 0;
    }
    memcpy(host, from, n);
    host[n] = '\0';
    *rest   = colon + 1;
    return 1;
}

nsp_status_t nsp_unique_id_from_string(const char *str, nsp_unique_id_t *id)
{
    rdv_id_t      rid = {0};
    char          host[256];
    const char   *rest;
    char         *end;
    unsigned long port;

    if (str == NULL || id == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_unique_id_from_string: NULL argument");
    }
    if (!split_host(str, host, sizeof(host), &rest) || rest[0] < '0' || rest[0] > '9') {
        goto err_parse;
    }
    errno = 0;
    port  = strtoul(rest, &end, 10);
    if (errno != 0 || end == rest || port == 0 || port > 65535) {
        goto err_parse;
    }
    if (*end == ':') {
        if (!parse_secret(end + 1, rid.key)) {
            goto err_parse;
        }
        rid.flags = RDV_ID_SECRET;
    } else if (*end != '\0') {
        goto err_parse;
    }
    NSP_CHECK(rdv_resolve(host, &rid));
    rid.magic   = RDV_ID_MAGIC;
    rid.version = RDV_ID_VERSION;
    rid.port    = (uint16_t)port;
    rdv_id_store(&rid, id);
    return NSP_OK;
err_parse:
    return nsp_error(NSP_ERR_PARSE,
                     "'%.80s' is not a rendezvous address: expected HOST:PORT or "
                     "HOST:PORT:SECRET (as printed by nsp_unique_id_to_string: SECRET is 64 hex "
                     "digits), PORT in 1..65535",
                     str);
}

/* ------------------------------------------------------------------------ */
/* NSPCOMM_ROOT: the secret from NSPCOMM_TOKEN, or loopback only            */
/* ------------------------------------------------------------------------ */

/* The token text of NSPCOMM_TOKEN_FILE, trailing white space cut. */
static nsp_status_t token_from_file(const char *path, char *buf, size_t len, size_t *n)
{
    struct stat st;
    ssize_t     got;
    int         fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        return nsp_error(NSP_ERR_IO, "NSPCOMM_TOKEN_FILE=%s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0) {
        NSP_WARN("NSPCOMM_TOKEN_FILE=%s is readable by group or others (mode %03o): every "
                 "user who can read it can join this job's rendezvous; chmod 600 it",
                 path, (unsigned)(st.st_mode & 0777));
    }
    got = read(fd, buf, len);
    close(fd);
    if (got < 0 || (size_t)got >= len) {
        return nsp_error(NSP_ERR_IO, "NSPCOMM_TOKEN_FILE=%s: %s", path,
                         got < 0 ? strerror(errno) : "longer than 4096 bytes");
    }
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ' ||
                       buf[got - 1] == '\t')) {
        --got;
    }
    *n = (size_t)got;
    return NSP_OK;
}

/* key = HMAC-SHA256(token, label): the same on every rank of the token. */
static nsp_status_t token_key(const char *token, size_t n, uint8_t key[RDV_KEY_BYTES])
{
    static const char label[] = "nspcomm rendezvous key v2";
    unsigned int      len     = 0;

    if (n < RDV_TOKEN_MIN) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "NSPCOMM_TOKEN has %zu characters: use at least %d, the same on every "
                         "rank (e.g. export NSPCOMM_TOKEN=$(openssl rand -hex 32))",
                         n, RDV_TOKEN_MIN);
    }
    if (HMAC(EVP_sha256(), token, (int)n, (const unsigned char *)label, sizeof(label) - 1, key,
             &len) == NULL ||
        len != RDV_KEY_BYTES) {
        return nsp_error(NSP_ERR_INTERNAL, "rendezvous: HMAC-SHA256 of NSPCOMM_TOKEN failed");
    }
    return NSP_OK;
}

/* 1 if addr (family) is an address of one of this host's interfaces. */
static int address_is_local(int family, const uint8_t *addr)
{
    struct ifaddrs *ifs   = NULL;
    int             found = 0;

    if (getifaddrs(&ifs) != 0) {
        return 0;
    }
    for (struct ifaddrs *it = ifs; it != NULL && !found; it = it->ifa_next) {
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != family) {
            continue;
        }
        if (family == AF_INET) {
            found = memcmp(&((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr, addr, 4) == 0;
        } else {
            found =
                memcmp(&((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr, addr, 16) == 0;
        }
    }
    freeifaddrs(ifs);
    return found;
}

static int address_is_loopback(const rdv_id_t *rid)
{
    static const uint8_t v6_loop[16] = {[15] = 1};

    return rid->family == AF_INET ? rid->addr[0] == 127 : memcmp(rid->addr, v6_loop, 16) == 0;
}

/* No token: keep the rendezvous on this host's loopback, or say why not. */
static nsp_status_t root_loopback_only(rdv_id_t *rid, const char *where)
{
    if (!address_is_loopback(rid)) {
        if (!address_is_local(rid->family, rid->addr)) {
            return nsp_error(NSP_ERR_INVALID_ARG,
                             "NSPCOMM_ROOT=%s is another host, and without a secret the "
                             "rendezvous listens on loopback only (anyone who can reach the "
                             "port could join): export the same NSPCOMM_TOKEN to every rank "
                             "(at least %d characters, e.g. $(openssl rand -hex 32)) or "
                             "NSPCOMM_TOKEN_FILE",
                             where, RDV_TOKEN_MIN);
        }
        rid->family = AF_INET;
        memset(rid->addr, 0, sizeof(rid->addr));
        rid->addr[0] = 127;
        rid->addr[3] = 1;
    }
    NSP_INFO("NSPCOMM_TOKEN is not set: the rendezvous of NSPCOMM_ROOT=%s listens on loopback "
             "(127.0.0.1:%u) only, so ranks on other hosts cannot join and any process of this "
             "host can; set NSPCOMM_TOKEN for a multi-host job",
             where, rid->port);
    return NSP_OK;
}

nsp_status_t nsp_bootstrap_tcp_root_secure(nsp_unique_id_t *id, const char *token,
                                           const char *token_file)
{
    rdv_id_t     rid;
    char         where[INET6_ADDRSTRLEN + 16];
    char         buf[RDV_TOKEN_FILE_MAX];
    size_t       n = 0;
    nsp_status_t status;

    NSP_CHECK(rdv_id_load(id, &rid));
    rdv_id_where(&rid, where, sizeof(where));
    if (rid.flags & RDV_ID_SECRET) {
        return NSP_OK; /* NSPCOMM_ROOT carried a whole id, secret included */
    }
    if (token_file != NULL && token_file[0] != '\0') {
        NSP_CHECK(token_from_file(token_file, buf, sizeof(buf), &n));
        token = buf;
    } else if (token != NULL && token[0] != '\0') {
        n = strlen(token);
    } else {
        NSP_CHECK(root_loopback_only(&rid, where));
        rdv_id_store(&rid, id);
        return NSP_OK;
    }
    status = token_key(token, n, rid.key);
    OPENSSL_cleanse(buf, sizeof(buf)); /* the token file's text */
    NSP_CHECK(status);
    rid.flags |= RDV_ID_SECRET;
    rdv_id_store(&rid, id);
    OPENSSL_cleanse(&rid, sizeof(rid));
    return NSP_OK;
}
