/*
 * A hand-driven rendezvous peer for tests: raw connections to a server
 * that send exactly the bytes a test wants (garbage, half headers, AUTH
 * with a right or wrong key, replays), and what the server answered.
 */
#ifndef NSP_TESTS_COMM_RDV_PEER_H_
#define NSP_TESTS_COMM_RDV_PEER_H_

#include "transport/rdv.h"

#include <stddef.h>
#include <stdint.h>

/** What the server did with a connection. */
typedef enum {
    PEER_OPEN,    /* nothing yet, still open */
    PEER_CLOSED,  /* closed (EOF or reset), no message */
    PEER_ERROR,   /* sent ERROR; the text is in the peer's `text` */
    PEER_WELCOME, /* admitted */
    PEER_OTHER    /* some other message */
} peer_outcome_t;

/** A connected raw peer. fd < 0 once closed. */
typedef struct rdv_peer {
    int      fd;
    uint8_t  snonce[RDV_NONCE_BYTES]; /* the challenge, once read */
    char     text[RDV_ERROR_TEXT_MAX + 1];
} rdv_peer_t;

/** The id's fields (address, port, key) of a unique id. */
void rdv_peer_id(const nsp_unique_id_t *id, rdv_id_t *rid);

/** Connect (non-blocking afterwards); 0 or -1. */
int rdv_peer_connect(const rdv_id_t *rid, rdv_peer_t *p);

/** Send bytes as they are; 0 or -1. */
int rdv_peer_send(rdv_peer_t *p, const void *buf, size_t len);

/** Read the CHALLENGE within timeout_s; 0 or -1. */
int rdv_peer_challenge(rdv_peer_t *p, double timeout_s);

/** AUTH message (header + payload, RDV_HDR_BYTES + RDV_AUTH_BYTES bytes)
 *  for (nranks, rank) answering p's challenge with `key`. */
void rdv_peer_auth_msg(const rdv_peer_t *p, const uint8_t key[RDV_KEY_BYTES], uint32_t nranks,
                       uint32_t rank, uint8_t *out);

/** Wait up to timeout_s for the server's next move on p. */
peer_outcome_t rdv_peer_outcome(rdv_peer_t *p, double timeout_s);

void rdv_peer_close(rdv_peer_t *p);

/** This process's resident set, KiB (/proc/self/status VmRSS); -1 if unknown. */
long rdv_rss_kib(void);

#endif /* NSP_TESTS_COMM_RDV_PEER_H_ */
