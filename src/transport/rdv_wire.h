/*
 * The TCP rendezvous's wire format and its parser (internal): pure
 * functions over bytes, no sockets, no logging, no allocation, so that the
 * server, the ranks, the tests and a fuzzer share one definition of what a
 * valid message is at each point of the protocol.
 *
 * Every message is a 16-byte header {magic, type, payload length} in
 * network byte order, then the payload. The conversation:
 *
 *   server -> rank  CHALLENGE  [32] server nonce Ns, fresh per connection
 *   rank -> server  AUTH       [80] client nonce Nc[32], nranks, rank,
 *                              timeout_ms, flags (u32 each), mac[32] =
 *                              HMAC-SHA256(K, "nspcomm rdv2 rank" || Ns ||
 *                              the first 48 bytes of AUTH)
 *   server -> rank  WELCOME    [32] HMAC-SHA256(K, "nspcomm rdv2 server" ||
 *                              Ns || the first 48 bytes of AUTH): the server
 *                              knows K too
 *   rank -> server  DATA       [part] this rank's part of one allgather
 *   server -> rank  RESULT     [nranks * part] every part in rank order
 *   rank -> server  CLOSE      [0] this rank finished bootstrap
 *   server -> rank  ERROR      [4 + text] int32 status, then text (<= 512)
 *
 * K is the 32-byte secret of the unique id. Nothing is allocated from a
 * length read off the wire before AUTH checked out; after it, a DATA length
 * is bounded by RDV_PART_MAX and must equal the round's, and nranks * part
 * is a checked product.
 */
#ifndef NSP_TRANSPORT_RDV_WIRE_H_
#define NSP_TRANSPORT_RDV_WIRE_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

#define RDV_MSG_MAGIC     0x4e535232u /* "NSR2": version 2 of the rendezvous */
#define RDV_HDR_BYTES     16
#define RDV_NONCE_BYTES   32
#define RDV_KEY_BYTES     32
#define RDV_MAC_BYTES     32
#define RDV_AUTH_BODY     48 /* Nc + four u32: what the MAC covers after Ns */
#define RDV_AUTH_BYTES    (RDV_AUTH_BODY + RDV_MAC_BYTES)
#define RDV_ERROR_TEXT_MAX 512
#define RDV_PART_MAX      (1u << 20)  /* bytes one rank may contribute to one round */
#define RDV_RESULT_MAX    (256ull << 20) /* bytes of one round's result, nranks * part */
#define RDV_NRANKS_MAX    (1 << 20)

typedef enum {
    RDV_MSG_CHALLENGE = 1,
    RDV_MSG_AUTH      = 2,
    RDV_MSG_WELCOME   = 3,
    RDV_MSG_DATA      = 4,
    RDV_MSG_CLOSE     = 5,
    RDV_MSG_RESULT    = 6,
    RDV_MSG_ERROR     = 7
} rdv_msg_type_t;

/** Where in the conversation a header arrives: decides what is valid. */
typedef enum {
    RDV_AT_CHALLENGE, /* a rank waits for CHALLENGE (or ERROR) */
    RDV_AT_AUTH,      /* the server waits for AUTH from a fresh connection */
    RDV_AT_WELCOME,   /* a rank waits for WELCOME (or ERROR) */
    RDV_AT_PART,      /* the server waits for DATA or CLOSE from a rank */
    RDV_AT_RESULT     /* a rank waits for RESULT (or ERROR) */
} rdv_phase_t;

typedef struct rdv_hdr {
    uint32_t type;
    uint64_t len; /* payload bytes */
} rdv_hdr_t;

/** The fields of AUTH, host order. */
typedef struct rdv_auth {
    uint8_t  cnonce[RDV_NONCE_BYTES];
    uint32_t nranks;
    uint32_t rank;
    uint32_t timeout_ms;
    uint32_t flags; /* 0 */
    uint8_t  mac[RDV_MAC_BYTES];
} rdv_auth_t;

/** Header bytes for (type, len). */
void rdv_hdr_encode(uint32_t type, uint64_t len, uint8_t out[RDV_HDR_BYTES]);

/**
 * Decode a header and check it against `phase`. `expect` is the payload
 * length the phase needs where the receiver knows it: RDV_AT_RESULT: the
 * exact result bytes; RDV_AT_PART: the round's part bytes, or UINT64_MAX
 * while the round has none yet (then any DATA up to RDV_PART_MAX passes).
 * Ignored elsewhere. On success fills *out. Errors (why[whylen] says what
 * was wrong): NSP_ERR_IO (bad magic, a type not valid here, a length not
 * valid for the type), NSP_ERR_MISMATCH (DATA or RESULT whose length differs
 * from `expect`).
 */
nsp_status_t rdv_hdr_parse(const uint8_t in[RDV_HDR_BYTES], rdv_phase_t phase, uint64_t expect,
                           rdv_hdr_t *out, char *why, size_t whylen);

/** AUTH payload bytes for *a (a->mac as given). */
void rdv_auth_encode(const rdv_auth_t *a, uint8_t out[RDV_AUTH_BYTES]);

/** Decode an AUTH payload (exactly RDV_AUTH_BYTES bytes). */
void rdv_auth_decode(const uint8_t in[RDV_AUTH_BYTES], rdv_auth_t *a);

/**
 * The rank's MAC (`server` = 0) or the server's (`server` = 1) over the
 * server nonce and the first RDV_AUTH_BODY bytes of an encoded AUTH.
 * Errors: NSP_ERR_INTERNAL (the crypto library failed).
 */
nsp_status_t rdv_mac(const uint8_t key[RDV_KEY_BYTES], int server,
                     const uint8_t snonce[RDV_NONCE_BYTES], const uint8_t body[RDV_AUTH_BODY],
                     uint8_t out[RDV_MAC_BYTES]);

/**
 * Check an AUTH received on a connection whose challenge was `snonce`:
 * the MAC first (in constant time), then the fields (nranks in
 * [1, RDV_NRANKS_MAX], flags 0). Only then *a is filled. Errors:
 * NSP_ERR_INVALID_ARG (bad MAC: wrong secret, or a response replayed from
 * another connection; fields out of range), NSP_ERR_INTERNAL.
 */
nsp_status_t rdv_auth_verify(const uint8_t key[RDV_KEY_BYTES],
                             const uint8_t snonce[RDV_NONCE_BYTES],
                             const uint8_t in[RDV_AUTH_BYTES], rdv_auth_t *a, char *why,
                             size_t whylen);

/**
 * Decode an ERROR payload of `len` bytes (4..4 + RDV_ERROR_TEXT_MAX): the
 * status (anything not a known error becomes NSP_ERR_IO) and the text,
 * NUL-terminated in text[textlen], unprintable bytes replaced by '?'.
 */
void rdv_error_decode(const uint8_t *in, size_t len, nsp_status_t *code, char *text,
                      size_t textlen);

/** ERROR payload for (code, text): 4 + min(strlen, RDV_ERROR_TEXT_MAX) bytes
 *  into out[4 + RDV_ERROR_TEXT_MAX]; returns the byte count. */
size_t rdv_error_encode(nsp_status_t code, const char *text,
                        uint8_t out[4 + RDV_ERROR_TEXT_MAX]);

/** a * b into *out when it fits in `max`; 0 on overflow or above max. */
int rdv_mul_bounded(uint64_t a, uint64_t b, uint64_t max, uint64_t *out);

#endif /* NSP_TRANSPORT_RDV_WIRE_H_ */
