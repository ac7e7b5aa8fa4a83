/*
 * Fuzz target: the rendezvous message parser (src/transport/rdv_wire.c).
 * The input is a stream as a peer would send it: byte 0 picks the phase
 * (what the receiver waits for), bytes 1..8 the length it expects; then
 * headers, each followed by its payload when the parser accepted it: AUTH
 * payloads go through the MAC check (a fixed key and challenge), ERROR
 * payloads through the decoder. Properties checked: an accepted header's
 * length is within the phase's bounds; an AUTH that verifies is one this
 * key signed (its re-encoding is byte-identical).
 */
#include "fuzz.h"

#include "transport/rdv_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t fuzz_key[RDV_KEY_BYTES]      = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t fuzz_snonce[RDV_NONCE_BYTES] = {42, 43, 44};

static void check_bounds(const rdv_hdr_t *h, rdv_phase_t phase, uint64_t expect)
{
    int ok = 1;

    switch (h->type) {
    case RDV_MSG_DATA:
        ok = h->len <= RDV_PART_MAX && (expect == UINT64_MAX || h->len == expect);
        break;
    case RDV_MSG_RESULT: ok = h->len == expect && h->len <= RDV_RESULT_MAX; break;
    case RDV_MSG_ERROR:  ok = h->len >= 4 && h->len <= 4 + RDV_ERROR_TEXT_MAX; break;
    case RDV_MSG_AUTH:   ok = phase == RDV_AT_AUTH && h->len == RDV_AUTH_BYTES; break;
    default:             ok = h->len <= RDV_NONCE_BYTES; break;
    }
    if (!ok) {
        fprintf(stderr, "accepted type %u of %llu bytes in phase %d\n", h->type,
                (unsigned long long)h->len, (int)phase);
        abort();
    }
}

static void payload(const rdv_hdr_t *h, const uint8_t *p, size_t n)
{
    char         why[256], text[RDV_ERROR_TEXT_MAX + 1];
    rdv_auth_t   a;
    nsp_status_t code;
    uint8_t      again[RDV_AUTH_BYTES];

    if (h->type == RDV_MSG_AUTH && n == RDV_AUTH_BYTES &&
        rdv_auth_verify(fuzz_key, fuzz_snonce, p, &a, why, sizeof(why)) == NSP_OK) {
        rdv_auth_encode(&a, again);
        if (memcmp(again, p, RDV_AUTH_BYTES) != 0 || a.nranks < 1 || a.nranks > RDV_NRANKS_MAX) {
            abort();
        }
    }
    if (h->type == RDV_MSG_ERROR) {
        rdv_error_decode(p, n, &code, text, sizeof(text));
        if (code >= 0 || strlen(text) > n) {
            abort();
        }
    }
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
    rdv_phase_t phase;
    uint64_t    expect = 0;
    size_t      at     = 9;
    char        why[256];

    if (size < 9) {
        return 0;
    }
    phase = (rdv_phase_t)(data[0] % 5);
    for (int i = 1; i <= 8; ++i) {
        expect = expect << 8 | data[i];
    }
    while (size - at >= RDV_HDR_BYTES) {
        rdv_hdr_t h;
        if (rdv_hdr_parse(data + at, phase, expect, &h, why, sizeof(why)) != NSP_OK) {
            if (strlen(why) == 0) {
                abort(); /* a refusal must say why */
            }
            return 0; /* the receiver closes here */
        }
        check_bounds(&h, phase, expect);
        at += RDV_HDR_BYTES;
        if (h.len > size - at) {
            return 0; /* the rest never comes: a deadline closes it */
        }
        payload(&h, data + at, (size_t)h.len);
        at += (size_t)h.len;
    }
    return 0;
}
