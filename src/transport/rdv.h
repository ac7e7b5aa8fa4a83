/*
 * The TCP rendezvous behind nsp_get_unique_id / nsp_comm_init_rank /
 * nsp_comm_init_env (internal): a star through one server thread.
 *
 * Files, one job each: rdv_wire.c (message format and parser, pure),
 * rdv_id.c (what a unique id holds, its printable form, addresses and the
 * secret from NSPCOMM_TOKEN), rdv_sock.c (socket reads and writes with
 * deadlines), rdv_server.c (the server's poll loop), rdv_client.c (a
 * rank's side: the nsp_bootstrap_t of bootstrap.h).
 *
 * Trust: whoever holds the id's 32-byte secret is a rank; anyone else who
 * can reach the port is a stranger, served only a challenge and closed
 * when the answer is wrong or late (docs/design/security.md).
 */
#ifndef NSP_TRANSPORT_RDV_H_
#define NSP_TRANSPORT_RDV_H_

#include "transport/rdv_wire.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <stddef.h>
#include <stdint.h>

#define RDV_ID_MAGIC   0x4e535042u /* "NSPB" */
#define RDV_ID_VERSION 2
#define RDV_ID_SECRET  0x1 /* flags: key holds a secret; else the key is zero (loopback only) */

/* What an nsp_unique_id_t holds. */
typedef struct rdv_id {
    uint32_t magic;
    uint16_t version;
    uint16_t family;   /* AF_INET or AF_INET6 */
    uint8_t  addr[16]; /* in_addr or in6_addr, network order */
    uint16_t port;     /* host order */
    uint16_t flags;    /* RDV_ID_SECRET */
    uint8_t  key[RDV_KEY_BYTES];
} rdv_id_t;

_Static_assert(sizeof(rdv_id_t) <= NSP_UNIQUE_ID_BYTES, "rdv id must fit in nsp_unique_id_t");

/* ---- rdv_id.c ---------------------------------------------------------- */

void         rdv_id_store(const rdv_id_t *rid, nsp_unique_id_t *id);
/** Errors: NSP_ERR_INVALID_ARG (not an id of this version; logged). */
nsp_status_t rdv_id_load(const nsp_unique_id_t *id, rdv_id_t *rid);
/** rdv_id_load, port 0 allowed (an id about to be served on a free port). */
nsp_status_t rdv_id_load_port0(const nsp_unique_id_t *id, rdv_id_t *rid);
/** "a.b.c.d:port" or "[v6]:port", for messages. */
void         rdv_id_where(const rdv_id_t *rid, char *buf, size_t len);
/** IPv4 address to advertise: $NSPCOMM_SOCKET_IFNAME's, else the first
 *  non-loopback interface up, else 127.0.0.1. Errors: NSP_ERR_NOT_FOUND. */
nsp_status_t rdv_local_address(struct in_addr *out);
/** The socket address of rid (address and port); returns its length. */
socklen_t    rdv_id_sockaddr(const rdv_id_t *rid, struct sockaddr_storage *ss);
/** `len` random bytes from the kernel. Errors: NSP_ERR_IO. */
nsp_status_t rdv_random(uint8_t *buf, size_t len);

/* ---- rdv_sock.c -------------------------------------------------------- */

/** Milliseconds until `deadline` (nsp_now_s clock) for poll(); -1 if < 0. */
int          rdv_poll_ms(double deadline);
/** Quiet errors (callers word the message): NSP_ERR_TIMEOUT, NSP_ERR_IO,
 *  NSP_ERR_PEER_FAILED (EOF or reset). */
nsp_status_t rdv_send_all(int fd, const void *buf, size_t len, double deadline);
nsp_status_t rdv_recv_all(int fd, void *buf, size_t len, double deadline);
nsp_status_t rdv_send_msg(int fd, uint32_t type, const void *payload, size_t len,
                          double deadline);
/** Receive and check a header for `phase` (rdv_hdr_parse); its complaint is
 *  the quiet last error. */
nsp_status_t rdv_recv_hdr(int fd, rdv_phase_t phase, uint64_t expect, rdv_hdr_t *hdr,
                          double deadline);
void         rdv_set_nodelay(int fd);

/* ---- rdv_server.c ------------------------------------------------------ */

/**
 * Serve the rendezvous of *id: listen on its address and port (port 0: a
 * free one, written back into *id), authenticate with its key. The server
 * is a detached thread of this process that ends when every rank closed
 * its bootstrap or the rendezvous failed.
 * Errors: NSP_ERR_IO (socket, bind: the message names address and port),
 * NSP_ERR_NO_MEMORY.
 */
nsp_status_t rdv_serve(nsp_unique_id_t *id);

#endif /* NSP_TRANSPORT_RDV_H_ */
