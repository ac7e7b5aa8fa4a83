/*
 * The rendezvous against strangers and careless users: before a world of
 * WORLD ranks (real forked processes running the TCP bootstrap: join, two
 * allgathers, close) forms, the test process plays one attack on the
 * server it started: garbage, a wrong magic, huge lengths before and after
 * authentication, half-sent headers and a trickled AUTH, 300 idle
 * connections, wrong secrets, a replayed response, a duplicate and an
 * out-of-range rank, and a flood of connections while the world forms.
 * After each: the attacker got what it should (ERROR or close, at once or
 * at the authentication deadline), the server is alive (the world forms
 * through it within WORLD_S), and its memory stayed bounded (RSS growth of
 * this process, which runs it, below RSS_MAX_KIB). Then the NSPCOMM_TOKEN
 * rules of nsp_comm_init_env's rendezvous.
 */
#include "rdv_peer.h"

#include "../mp.h"
#include "../tap.h"
#include "transport/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define WORLD        4
#define WORLD_S      5.0    /* a world must form within this after the attack */
#define RSS_MAX_KIB  (32 * 1024)
#define KEEP_MAX     320    /* attack connections held open during the world */
#define AUTH_S       3.0    /* the server's authentication deadline (rdv_server.c) */
#define RUN_TIMEOUT_S 30.0
#define FLOOD_FIRST  300    /* stranger connections before the flooded world starts */

typedef struct hcase hcase_t;
typedef int (*attack_fn_t)(hcase_t *c, const rdv_id_t *rid);

typedef struct attack {
    const char *name;
    attack_fn_t fn;      /* played by this process before the world; NULL: flood */
    int         settle;  /* 1: afterwards the held connections must be closed by the server */
} attack_t;

struct hcase {
    nsp_unique_id_t id;  /* made (with the attack) after the fork */
    const attack_t *atk;
    int            *done; /* shared: [0] ranks whose world formed, [1] flood connections */
    rdv_peer_t      keep[KEEP_MAX];
    int             nkeep;
    char            why[256]; /* empty: the attacker saw what it should */
};

/* ------------------------------------------------------------------------ */
/* Attacks (in the test process, on the server it runs)                     */
/* ------------------------------------------------------------------------ */

static rdv_peer_t *keep_new(hcase_t *c, const rdv_id_t *rid)
{
    rdv_peer_t *p = &c->keep[c->nkeep];

    if (c->nkeep >= KEEP_MAX || rdv_peer_connect(rid, p) != 0) {
        snprintf(c->why, sizeof(c->why), "cannot connect attack connection %d", c->nkeep);
        return NULL;
    }
    ++c->nkeep;
    return p;
}

/* The server must answer p with ERROR (text containing `want`, if given)
 * or a close, within `within` s. */
static int expect_refused(hcase_t *c, rdv_peer_t *p, const char *want, double within)
{
    peer_outcome_t o = rdv_peer_outcome(p, within);

    if ((o != PEER_ERROR && o != PEER_CLOSED) ||
        (want != NULL && (o != PEER_ERROR || strstr(p->text, want) == NULL))) {
        snprintf(c->why, sizeof(c->why), "server's answer %d (text '%.120s'), want a refusal%s%s",
                 (int)o, p->text, want != NULL ? " saying " : "", want != NULL ? want : "");
        return -1;
    }
    return 0;
}

static void fill_random(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; ++i) {
        seed   = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
}

static int atk_garbage(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t junk[4096];

    for (int i = 0; i < 20; ++i) {
        rdv_peer_t *p = keep_new(c, rid);
        fill_random(junk, sizeof(junk), (unsigned)i + 1);
        if (p == NULL || rdv_peer_send(p, junk, sizeof(junk)) != 0 ||
            expect_refused(c, p, NULL, 1.0) != 0) {
            return -1;
        }
    }
    return 0;
}

static int atk_old_magic(hcase_t *c, const rdv_id_t *rid)
{
    /* nspcomm 1's HELLO: {"NSPM", 1, 24} then 24 bytes */
    uint8_t     msg[16 + 24] = {0x4e, 0x53, 0x50, 0x4d, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 24};
    rdv_peer_t *p = keep_new(c, rid);

    return p == NULL || rdv_peer_send(p, msg, sizeof(msg)) != 0 ? -1
                                                                : expect_refused(c, p, "magic", 1.0);
}

static int atk_huge_pre(hcase_t *c, const rdv_id_t *rid)
{
    static const uint32_t types[] = {RDV_MSG_AUTH, RDV_MSG_DATA, RDV_MSG_ERROR, 0xffffffffu};
    static const uint64_t lens[]  = {1ull << 40, 1ull << 63, UINT64_MAX, 1u << 31};

    for (int i = 0; i < 4; ++i) {
        uint8_t     hdr[RDV_HDR_BYTES];
        rdv_peer_t *p = keep_new(c, rid);
        rdv_hdr_encode(types[i], lens[i], hdr);
        if (p == NULL || rdv_peer_send(p, hdr, sizeof(hdr)) != 0 ||
            expect_refused(c, p, NULL, 1.0) != 0) {
            return -1;
        }
    }
    return 0;
}

static int atk_half(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t hdr[RDV_HDR_BYTES];

    rdv_hdr_encode(RDV_MSG_AUTH, RDV_AUTH_BYTES, hdr);
    for (int i = 0; i < 50; ++i) {
        rdv_peer_t *p = keep_new(c, rid);
        if (p == NULL || rdv_peer_send(p, hdr, 7) != 0) {
            return -1;
        }
    }
    return 0;
}

/* A valid header, then the AUTH one byte every 200 ms: past the deadline. */
static int atk_trickle(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t     msg[RDV_HDR_BYTES + RDV_AUTH_BYTES];
    rdv_peer_t *p = keep_new(c, rid);
    double      t0 = mp_now();

    if (p == NULL || rdv_peer_challenge(p, 1.0) != 0) {
        return -1;
    }
    rdv_peer_auth_msg(p, ((const rdv_id_t *)rid)->key, WORLD, 0, msg);
    for (size_t i = 0; i < sizeof(msg) && mp_now() - t0 < AUTH_S + 1.0; ++i) {
        if (rdv_peer_send(p, msg + i, 1) != 0) {
            break; /* closed by the server */
        }
        usleep(200 * 1000);
    }
    return expect_refused(c, p, NULL, 1.0);
}

static int atk_idle(hcase_t *c, const rdv_id_t *rid)
{
    for (int i = 0; i < 300; ++i) {
        if (keep_new(c, rid) == NULL) {
            return -1;
        }
    }
    return 0;
}

static int atk_wrong_key(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t key[RDV_KEY_BYTES], msg[RDV_HDR_BYTES + RDV_AUTH_BYTES];

    memcpy(key, rid->key, sizeof(key));
    for (int i = 0; i < 20; ++i) {
        rdv_peer_t *p = keep_new(c, rid);
        key[i % RDV_KEY_BYTES] ^= 0x01; /* one bit off, then more */
        if (p == NULL || rdv_peer_challenge(p, 1.0) != 0) {
            return -1;
        }
        rdv_peer_auth_msg(p, key, WORLD, (uint32_t)(i % WORLD), msg);
        if (rdv_peer_send(p, msg, sizeof(msg)) != 0 ||
            expect_refused(c, p, "authentication failed", 1.0) != 0) {
            return -1;
        }
    }
    return 0;
}

/* A holder's valid AUTH for connection A, replayed on B and C. */
static int atk_replay(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t     msg[RDV_HDR_BYTES + RDV_AUTH_BYTES];
    rdv_peer_t *a = keep_new(c, rid);

    if (a == NULL || rdv_peer_challenge(a, 1.0) != 0) {
        return -1;
    }
    rdv_peer_auth_msg(a, rid->key, WORLD, 1, msg);
    rdv_peer_close(a);
    for (int i = 0; i < 2; ++i) {
        rdv_peer_t *b = keep_new(c, rid);
        if (b == NULL || rdv_peer_challenge(b, 1.0) != 0 || rdv_peer_send(b, msg, sizeof(msg)) ||
            expect_refused(c, b, "authentication failed", 1.0) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Authenticate as rank `rank` of `nranks` with the real key (a holder). */
static rdv_peer_t *join_as(hcase_t *c, const rdv_id_t *rid, uint32_t nranks, uint32_t rank,
                           peer_outcome_t *got)
{
    uint8_t     msg[RDV_HDR_BYTES + RDV_AUTH_BYTES];
    rdv_peer_t *p = keep_new(c, rid);

    if (p == NULL || rdv_peer_challenge(p, 1.0) != 0) {
        snprintf(c->why, sizeof(c->why), "no challenge");
        return NULL;
    }
    rdv_peer_auth_msg(p, rid->key, nranks, rank, msg);
    *got = rdv_peer_send(p, msg, sizeof(msg)) == 0 ? rdv_peer_outcome(p, 1.0) : PEER_CLOSED;
    return p;
}

/* After authenticating: DATA of 2^40 bytes (refused at once), and a DATA
 * of RDV_PART_MAX abandoned mid-way (its memory given back). */
static int atk_huge_post(hcase_t *c, const rdv_id_t *rid)
{
    uint8_t        hdr[RDV_HDR_BYTES], some[100] = {0};
    peer_outcome_t o1, o2;
    rdv_peer_t    *p1 = join_as(c, rid, WORLD, 1, &o1);
    rdv_peer_t    *p2 = p1 != NULL ? join_as(c, rid, WORLD, 2, &o2) : NULL;

    if (p2 == NULL || o1 != PEER_WELCOME || o2 != PEER_WELCOME) {
        snprintf(c->why, sizeof(c->why), "a holder was not admitted");
        return -1;
    }
    rdv_hdr_encode(RDV_MSG_DATA, 1ull << 40, hdr);
    if (rdv_peer_send(p1, hdr, sizeof(hdr)) != 0 || expect_refused(c, p1, "exceeds", 1.0) != 0) {
        return -1;
    }
    rdv_hdr_encode(RDV_MSG_DATA, RDV_PART_MAX, hdr);
    if (rdv_peer_send(p2, hdr, sizeof(hdr)) != 0 || rdv_peer_send(p2, some, sizeof(some)) != 0) {
        return -1;
    }
    usleep(100 * 1000);
    rdv_peer_close(p2);
    return 0;
}

static int atk_dup(hcase_t *c, const rdv_id_t *rid)
{
    peer_outcome_t o1, o2;
    rdv_peer_t    *first  = join_as(c, rid, WORLD, 1, &o1);
    rdv_peer_t    *second = first != NULL ? join_as(c, rid, WORLD, 1, &o2) : NULL;

    if (second == NULL || o1 != PEER_WELCOME || o2 != PEER_ERROR ||
        strstr(second->text, "joined twice") == NULL) {
        snprintf(c->why, sizeof(c->why), "first %d, second %d '%.120s': want WELCOME, then ERROR "
                                         "'joined twice'",
                 (int)o1, second != NULL ? (int)o2 : -1, second != NULL ? second->text : "");
        return -1;
    }
    /* The first instance is still rank 1: it leaves, the real one comes. */
    rdv_peer_close(first);
    return 0;
}

static int atk_range(hcase_t *c, const rdv_id_t *rid)
{
    peer_outcome_t o;
    rdv_peer_t    *p = join_as(c, rid, WORLD, 99, &o);

    if (p == NULL || o != PEER_ERROR || strstr(p->text, "out of range") == NULL) {
        snprintf(c->why, sizeof(c->why), "rank 99 of %d: outcome %d '%.120s'", WORLD, (int)o,
                 p != NULL ? p->text : "");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The world, and the flooding rank                                         */
/* ------------------------------------------------------------------------ */

/* A stranger process: connect, send junk, close, hold every 4th open,
 * until the world formed (or 15 s). */
static int flood(hcase_t *c)
{
    rdv_id_t   rid;
    rdv_peer_t held[200];
    uint8_t    junk[64];
    int        nheld = 0, n = 0;
    double     t0    = mp_now();

    rdv_peer_id(&c->id, &rid);
    while (__atomic_load_n(&c->done[0], __ATOMIC_SEQ_CST) < WORLD && mp_now() - t0 < 15.0) {
        rdv_peer_t p;
        if (rdv_peer_connect(&rid, &p) != 0) {
            continue;
        }
        fill_random(junk, sizeof(junk), (unsigned)n);
        __atomic_store_n(&c->done[1], ++n, __ATOMIC_SEQ_CST);
        if (n % 4 == 0 && nheld < 200) {
            held[nheld++] = p;
            continue;
        }
        (void)rdv_peer_send(&p, junk, sizeof(junk));
        rdv_peer_close(&p);
    }
    mp_set_value(1, n);
    for (int i = 0; i < nheld; ++i) {
        rdv_peer_close(&held[i]);
    }
    return 0;
}

static int rank_world(int rank, int nranks, void *arg)
{
    hcase_t         *c  = arg;
    nsp_bootstrap_t *bs = NULL;
    int              all[WORLD], sum[WORLD], mine = rank * 7;
    double           t0 = mp_now();
    nsp_status_t     st;

    if (rank == WORLD) {
        return flood(c);
    }
    /* Under flood: start once the stranger is well under way. */
    while (c->atk->fn == NULL && __atomic_load_n(&c->done[1], __ATOMIC_SEQ_CST) < FLOOD_FIRST &&
           mp_now() - t0 < 5.0) {
        usleep(1000);
    }
    t0 = mp_now();
    st = nsp_bootstrap_tcp_join(&c->id, rank, WORLD, 10.0, &bs);
    if (st == NSP_OK) {
        st = nsp_bootstrap_allgather(bs, &rank, all, sizeof(int));
    }
    if (st == NSP_OK) {
        st = nsp_bootstrap_allgather(bs, &mine, sum, sizeof(int));
    }
    if (bs != NULL) {
        nsp_bootstrap_close(bs, st == NSP_OK);
    }
    mp_set_value(0, mp_now() - t0);
    __atomic_add_fetch(&c->done[0], 1, __ATOMIC_SEQ_CST);
    if (st != NSP_OK) {
        mp_note("rank %d: %s", rank, nsp_last_error());
        return 2;
    }
    for (int r = 0; r < WORLD; ++r) {
        if (all[r] != r || sum[r] != 7 * r) {
            mp_note("slot %d holds %d, %d", r, all[r], sum[r]);
            return 3;
        }
    }
    return 0;
}

/* mp_make_fn_t: the id, then the attack on its server. */
static int make_and_attack(void *out, size_t bytes, char *why, size_t whylen)
{
    hcase_t *c = out;
    rdv_id_t rid;

    if (bytes != sizeof(*c) || nsp_get_unique_id(&c->id) != NSP_OK) {
        snprintf(why, whylen, "nsp_get_unique_id: %s", nsp_last_error());
        return 1;
    }
    rdv_peer_id(&c->id, &rid);
    c->why[0] = '\0';
    if (c->atk->fn != NULL && c->atk->fn(c, &rid) != 0 && c->why[0] == '\0') {
        snprintf(c->why, sizeof(c->why), "the attack itself failed");
    }
    return 0;
}

/* Connections the attack held: the server must have closed them all. */
static int held_all_closed(hcase_t *c)
{
    int closed = 0, open = 0;

    for (int i = 0; i < c->nkeep; ++i) {
        if (c->keep[i].fd < 0) {
            continue;
        }
        peer_outcome_t o = rdv_peer_outcome(&c->keep[i], AUTH_S + 1.5);
        closed += o == PEER_CLOSED || o == PEER_ERROR;
        open += o == PEER_OPEN;
    }
    return open == 0 && closed > 0;
}

static void play(const attack_t *atk, int *done)
{
    hcase_t    *c = calloc(1, sizeof(*c));
    mp_result_t res;
    long        rss0  = rdv_rss_kib(), rss1;
    double      worst = 0;
    int         nproc = atk->fn == NULL ? WORLD + 1 : WORLD;

    c->atk  = atk;
    c->done = done;
    done[0] = done[1] = 0;
    mp_run_made(nproc, RUN_TIMEOUT_S, rank_world, c, c, sizeof(*c), make_and_attack, &res);
    rss1 = rdv_rss_kib();
    for (int r = 0; r < WORLD; ++r) {
        worst = res.rank[r].value[0] > worst ? res.rank[r].value[0] : worst;
    }
    tap_ok(c->why[0] == '\0', "%s: the attacker is refused%s%s", atk->name,
           c->why[0] ? ": " : "", c->why);
    tap_ok(mp_all_ok(&res) && worst < WORLD_S,
           "... then a %d-rank world forms through the same server in %.3f s (< %.0f s)%s",
           WORLD, worst, WORLD_S, atk->fn == NULL ? " while a stranger floods it" : "");
    if (atk->fn == NULL) {
        tap_diag("flood: %.0f stranger connections (the world started after %d)",
                 res.rank[WORLD].value[1], FLOOD_FIRST);
    }
    tap_ok(rss0 > 0 && rss1 - rss0 < RSS_MAX_KIB, "... server memory bounded: RSS %+ld KiB",
           rss1 - rss0);
    if (atk->settle) {
        tap_ok(held_all_closed(c), "... and none of the %d held connections is left open",
               c->nkeep);
    }
    for (int i = 0; i < c->nkeep; ++i) {
        rdv_peer_close(&c->keep[i]);
    }
    free(c);
}

/* ------------------------------------------------------------------------ */
/* NSPCOMM_TOKEN                                                            */
/* ------------------------------------------------------------------------ */

static void test_tokens(void)
{
    nsp_unique_id_t a, b;
    rdv_id_t        ra, rb;
    char            path[] = "/tmp/nsp-token-XXXXXX";
    int             fd     = mkstemp(path);

    nsp_unique_id_from_string("127.0.0.1:4242", &a);
    b = a;
    tap_is_int(nsp_bootstrap_tcp_root_secure(&a, "0123456789abcdef-job-1", NULL), NSP_OK,
               "NSPCOMM_TOKEN of 22 characters: a secret");
    nsp_bootstrap_tcp_root_secure(&b, "0123456789abcdef-job-2", NULL);
    rdv_peer_id(&a, &ra);
    rdv_peer_id(&b, &rb);
    tap_ok((ra.flags & RDV_ID_SECRET) && memcmp(ra.key, rb.key, RDV_KEY_BYTES) != 0,
           "... other tokens, other keys");
    if (fd >= 0 && write(fd, "0123456789abcdef-job-1\n", 23) == 23) {
        fchmod(fd, 0600);
        nsp_unique_id_from_string("127.0.0.1:4242", &b);
        tap_is_int(nsp_bootstrap_tcp_root_secure(&b, NULL, path), NSP_OK, "NSPCOMM_TOKEN_FILE");
        rdv_peer_id(&b, &rb);
        tap_ok(memcmp(ra.key, rb.key, RDV_KEY_BYTES) == 0,
               "... same key as the same token in NSPCOMM_TOKEN (newline cut)");
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    nsp_unique_id_from_string("127.0.0.1:4242", &b);
    tap_is_int(nsp_bootstrap_tcp_root_secure(&b, "short", NULL), NSP_ERR_INVALID_ARG,
               "a 5-character token: INVALID_ARG");
    tap_is_int(nsp_bootstrap_tcp_root_secure(&b, NULL, NULL), NSP_OK,
               "no token, NSPCOMM_ROOT on loopback: OK (loopback only)");
    nsp_unique_id_from_string("198.18.0.1:4242", &b);
    tap_is_int(nsp_bootstrap_tcp_root_secure(&b, NULL, NULL), NSP_ERR_INVALID_ARG,
               "no token, NSPCOMM_ROOT on another host: INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "NSPCOMM_TOKEN") != NULL,
           "... and the message says to set NSPCOMM_TOKEN");
    tap_is_int(nsp_bootstrap_tcp_root_secure(&b, "0123456789abcdef-job-1", NULL), NSP_OK,
               "... with a token: OK");
}

/* An NSPCOMM_ROOT-style id on 127.0.0.1 whose key comes from `token`
 * (port as given: 0 lets the server pick). */
static void token_id(const char *token, uint16_t port, nsp_unique_id_t *id)
{
    rdv_id_t rid;

    nsp_unique_id_from_string("127.0.0.1:1", id);
    nsp_bootstrap_tcp_root_secure(id, token, NULL);
    rdv_peer_id(id, &rid);
    rid.port = port;
    memcpy(id->internal, &rid, sizeof(rid));
}

static int make_token_server(void *out, size_t bytes, char *why, size_t whylen)
{
    token_id("the-job-token-0123456789", 0, out);
    if (nsp_bootstrap_tcp_serve(out) != NSP_OK) {
        snprintf(why, whylen, "serve: %s", nsp_last_error());
        return 1;
    }
    return 0;
}

/* The last rank was given another NSPCOMM_TOKEN: it is refused at once
 * with a message naming the token; the others time out naming it. */
static int rank_token(int rank, int nranks, void *arg)
{
    nsp_unique_id_t *id = arg;
    nsp_bootstrap_t *bs = NULL;
    nsp_status_t     st;
    rdv_id_t         rid;
    char             want[32];

    if (rank == nranks - 1) {
        rdv_peer_id(id, &rid);
        token_id("another-job-token-0123456789", rid.port, id);
    }
    st = nsp_bootstrap_tcp_join(id, rank, nranks, 2.0, &bs);
    if (st == NSP_OK) {
        st = nsp_bootstrap_allgather(bs, &rank, want, sizeof(int));
        nsp_bootstrap_close(bs, 0);
    }
    mp_note("%s", nsp_last_error());
    snprintf(want, sizeof(want), "rank(s) %d ", nranks - 1);
    if (rank == nranks - 1) {
        return st == NSP_ERR_INVALID_ARG && strstr(nsp_last_error(), "NSPCOMM_TOKEN") ? 0 : 2;
    }
    return st == NSP_ERR_TIMEOUT && strstr(nsp_last_error(), want) != NULL ? 0 : 3;
}

static void test_wrong_token(void)
{
    nsp_unique_id_t id;
    mp_result_t     res;

    mp_run_made(3, RUN_TIMEOUT_S, rank_token, &id, &id, sizeof(id), make_token_server, &res);
    tap_ok(mp_all_ok(&res), "a rank with another NSPCOMM_TOKEN is refused (INVALID_ARG naming "
                            "the token), the others time out naming it");
    tap_diag("refused rank: %s", res.rank[2].note);
}

static const attack_t attacks[] = {
    {"garbage: 20 connections send 4 KiB of random bytes", atk_garbage, 0},
    {"wrong magic: an nspcomm-1 HELLO", atk_old_magic, 0},
    {"huge lengths before authentication (2^40, 2^63, 2^64-1, 2^31; bad types)", atk_huge_pre, 0},
    {"half-sent headers: 50 connections send 7 of 16 bytes and stall", atk_half, 1},
    {"a trickled AUTH: one byte every 200 ms", atk_trickle, 0},
    {"300 idle connections", atk_idle, 1},
    {"wrong secret: 20 AUTHs with keys a few bits off", atk_wrong_key, 0},
    {"replayed response: a holder's AUTH for one challenge sent on two others", atk_replay, 0},
    {"huge lengths after authentication: DATA of 2^40 bytes; 1 MiB DATA abandoned", atk_huge_post,
     0},
    {"duplicate rank: rank 1 joins twice", atk_dup, 0},
    {"out-of-range rank: rank 99 of 4", atk_range, 0},
    {"flood: a stranger connects, sends junk and holds connections while the world forms", NULL,
     0},
};

int main(void)
{
    int *done = mp_shared_alloc(2 * sizeof(int));

    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); ++i) {
        play(&attacks[i], done);
    }
    mp_shared_free(done, 2 * sizeof(int));
    test_wrong_token();
    test_tokens();
    return tap_done();
}
