/*
 * The rendezvous wire format (see rdv_wire.h): encode, decode and check
 * messages; the HMAC-SHA256 of the challenge-response (OpenSSL libcrypto).
 */
#include "transport/rdv_wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <stdio.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void rdv_hdr_encode(uint32_t type, uint64_t len, uint8_t out[RDV_HDR_BYTES])
{
    put32(out, RDV_MSG_MAGIC);
    put32(out + 4, type);
    put32(out + 8, (uint32_t)(len >> 32));
    put32(out + 12, (uint32_t)len);
}

int rdv_mul_bounded(uint64_t a, uint64_t b, uint64_t max, uint64_t *out)
{
    if (a != 0 && b > max / a) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/* The payload length a type must have, or accept, in a phase. */
static nsp_status_t hdr_len_ok(const rdv_hdr_t *h, uint64_t expect, char *why, size_t whylen)
{
    uint64_t want = UINT64_MAX; /* exact length, when fixed */

    switch (h->type) {
    case RDV_MSG_CHALLENGE: want = RDV_NONCE_BYTES; break;
    case RDV_MSG_AUTH:      want = RDV_AUTH_BYTES; break;
    case RDV_MSG_WELCOME:   want = RDV_MAC_BYTES; break;
    case RDV_MSG_CLOSE:     want = 0; break;
    case RDV_MSG_ERROR:
        if (h->len < 4 || h->len > 4 + RDV_ERROR_TEXT_MAX) {
            snprintf(why, whylen, "ERROR message of %llu bytes (want 4..%d)",
                     (unsigned long long)h->len, 4 + RDV_ERROR_TEXT_MAX);
            return NSP_ERR_IO;
        }
        return NSP_OK;
    case RDV_MSG_DATA:
        if (h->len > RDV_PART_MAX) {
            snprintf(why, whylen, "DATA of %llu bytes exceeds the %u-byte limit of a bootstrap "
                                  "part",
                     (unsigned long long)h->len, RDV_PART_MAX);
            return NSP_ERR_IO;
        }
        want = expect;
        break;
    case RDV_MSG_RESULT:
        if (h->len > RDV_RESULT_MAX) {
            snprintf(why, whylen, "RESULT of %llu bytes exceeds the %llu-byte bound of a "
                                  "bootstrap result",
                     (unsigned long long)h->len, (unsigned long long)RDV_RESULT_MAX);
            return NSP_ERR_IO;
        }
        if (h->len != expect) { /* exact, even for expect = UINT64_MAX */
            snprintf(why, whylen, "RESULT of %llu bytes where %llu are expected",
                     (unsigned long long)h->len, (unsigned long long)expect);
            return NSP_ERR_MISMATCH;
        }
        return NSP_OK;
    default: break;
    }
    if (want != UINT64_MAX && h->len != want) {
        snprintf(why, whylen, "message type %u of %llu bytes where %llu are expected", h->type,
                 (unsigned long long)h->len, (unsigned long long)want);
        return h->type == RDV_MSG_DATA || h->type == RDV_MSG_RESULT ? NSP_ERR_MISMATCH
                                                                     : NSP_ERR_IO;
    }
    return NSP_OK;
}

/* Is `type` a message that may arrive in `phase`? */
static int hdr_type_ok(uint32_t type, rdv_phase_t phase)
{
    switch (phase) {
    case RDV_AT_CHALLENGE: return type == RDV_MSG_CHALLENGE || type == RDV_MSG_ERROR;
    case RDV_AT_AUTH:      return type == RDV_MSG_AUTH;
    case RDV_AT_WELCOME:   return type == RDV_MSG_WELCOME || type == RDV_MSG_ERROR;
    case RDV_AT_PART:      return type == RDV_MSG_DATA || type == RDV_MSG_CLOSE;
    case RDV_AT_RESULT:    return type == RDV_MSG_RESULT || type == RDV_MSG_ERROR;
    }
    return 0;
}

nsp_status_t rdv_hdr_parse(const uint8_t in[RDV_HDR_BYTES], rdv_phase_t phase, uint64_t expect,
                           rdv_hdr_t *out, char *why, size_t whylen)
{
    rdv_hdr_t    h;
    uint32_t     magic = get32(in);
    nsp_status_t st;

    if (magic != RDV_MSG_MAGIC) {
        snprintf(why, whylen, "bad message magic 0x%08x: not an nspcomm rendezvous peer (or "
                              "another nspcomm version)",
                 magic);
        return NSP_ERR_IO;
    }
    h.type = get32(in + 4);
    h.len  = (uint64_t)get32(in + 8) << 32 | get32(in + 12);
    if (!hdr_type_ok(h.type, phase)) {
        snprintf(why, whylen, "unexpected message type %u at this point of the rendezvous",
                 h.type);
        return NSP_ERR_IO;
    }
    st = hdr_len_ok(&h, expect, why, whylen);
    if (st != NSP_OK) {
        return st;
    }
    *out = h;
    return NSP_OK;
}

void rdv_auth_encode(const rdv_auth_t *a, uint8_t out[RDV_AUTH_BYTES])
{
    memcpy(out, a->cnonce, RDV_NONCE_BYTES);
    put32(out + 32, a->nranks);
    put32(out + 36, a->rank);
    put32(out + 40, a->timeout_ms);
    put32(out + 44, a->flags);
    memcpy(out + RDV_AUTH_BODY, a->mac, RDV_MAC_BYTES);
}

void rdv_auth_decode(const uint8_t in[RDV_AUTH_BYTES], rdv_auth_t *a)
{
    memcpy(a->cnonce, in, RDV_NONCE_BYTES);
    a->nranks     = get32(in + 32);
    a->rank       = get32(in + 36);
    a->timeout_ms = get32(in + 40);
    a->flags      = get32(in + 44);
    memcpy(a->mac, in + RDV_AUTH_BODY, RDV_MAC_BYTES);
}

nsp_status_t rdv_mac(const uint8_t key[RDV_KEY_BYTES], int server,
                     const uint8_t snonce[RDV_NONCE_BYTES], const uint8_t body[RDV_AUTH_BODY],
                     uint8_t out[RDV_MAC_BYTES])
{
    /* [label (20 bytes, NUL-padded)][Ns 32][AUTH body 48] */
    uint8_t      msg[20 + RDV_NONCE_BYTES + RDV_AUTH_BODY] = {0};
    const char  *label = server ? "nspcomm rdv2 server" : "nspcomm rdv2 rank";
    unsigned int n     = 0;

    memcpy(msg, label, strlen(label));
    memcpy(msg + 20, snonce, RDV_NONCE_BYTES);
    memcpy(msg + 20 + RDV_NONCE_BYTES, body, RDV_AUTH_BODY);
    if (HMAC(EVP_sha256(), key, RDV_KEY_BYTES, msg, sizeof(msg), out, &n) == NULL ||
        n != RDV_MAC_BYTES) {
        return NSP_ERR_INTERNAL;
    }
    return NSP_OK;
}

nsp_status_t rdv_auth_verify(const uint8_t key[RDV_KEY_BYTES],
                             const uint8_t snonce[RDV_NONCE_BYTES],
                             const uint8_t in[RDV_AUTH_BYTES], rdv_auth_t *a, char *why,
                             size_t whylen)
{
    uint8_t    mac[RDV_MAC_BYTES];
    rdv_auth_t got;

    if (rdv_mac(key, 0, snonce, in, mac) != NSP_OK) {
        snprintf(why, whylen, "HMAC-SHA256 failed in the crypto library");
        return NSP_ERR_INTERNAL;
    }
    if (CRYPTO_memcmp(mac, in + RDV_AUTH_BODY, RDV_MAC_BYTES) != 0) {
        snprintf(why, whylen, "authentication failed: the rank does not hold this "
                              "rendezvous's secret (another job's id, or a different "
                              "NSPCOMM_TOKEN), or it replayed another connection's answer");
        return NSP_ERR_INVALID_ARG;
    }
    rdv_auth_decode(in, &got);
    if (got.nranks < 1 || got.nranks > RDV_NRANKS_MAX || got.flags != 0) {
        snprintf(why, whylen, "AUTH with nranks %u (want 1..%d) or flags 0x%x (want 0)",
                 got.nranks, RDV_NRANKS_MAX, got.flags);
        return NSP_ERR_INVALID_ARG;
    }
    *a = got;
    return NSP_OK;
}

void rdv_error_decode(const uint8_t *in, size_t len, nsp_status_t *code, char *text,
                      size_t textlen)
{
    int32_t c = len >= 4 ? (int32_t)get32(in) : (int32_t)NSP_ERR_IO;
    size_t  n = len >= 4 ? len - 4 : 0;

    if (c >= 0 || c < (int32_t)NSP_ERR_INTERNAL) {
        c = (int32_t)NSP_ERR_IO;
    }
    if (textlen == 0) {
        *code = (nsp_status_t)c;
        return;
    }
    n = n < textlen - 1 ? n : textlen - 1;
    for (size_t i = 0; i < n; ++i) {
        uint8_t ch = in[4 + i];
        text[i]    = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    text[n] = '\0';
    *code   = (nsp_status_t)c;
}

size_t rdv_error_encode(nsp_status_t code, const char *text, uint8_t out[4 + RDV_ERROR_TEXT_MAX])
{
    size_t n = strlen(text);

    n = n < RDV_ERROR_TEXT_MAX ? n : RDV_ERROR_TEXT_MAX;
    put32(out, (uint32_t)(int32_t)code);
    memcpy(out + 4, text, n);
    return 4 + n;
}
