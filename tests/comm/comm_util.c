/* Helpers shared by the comm tests; see comm_util.h. */
#include "comm_util.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>

/*
 * Layout: per rank a sequence number (the last round it posted) and a
 * length, then two banks of [nranks][max_bytes] data. Round k uses bank
 * k % 2: a rank can be at most one round ahead of the slowest (it finishes
 * round k only after everyone posted k), so the bank it writes is never the
 * one a slower rank still reads.
 */
struct shm_oob {
    int    nranks;
    size_t max_bytes;
    size_t total;
    struct {
        _Atomic uint64_t seq;
        uint64_t         len;
    } slot[MP_MAX_RANKS];
    unsigned char data[]; /* [2][nranks][max_bytes] */
};

shm_oob_t *shm_oob_create(int nranks, size_t max_bytes)
{
    size_t     total = sizeof(shm_oob_t) + 2 * (size_t)nranks * max_bytes;
    shm_oob_t *oob   = mp_shared_alloc(total);

    if (oob != NULL) {
        oob->nranks    = nranks;
        oob->max_bytes = max_bytes;
        oob->total     = total;
    }
    return oob;
}

void shm_oob_destroy(shm_oob_t *oob)
{
    if (oob != NULL) {
        mp_shared_free(oob, oob->total);
    }
}

static unsigned char *shm_bank(shm_oob_t *oob, uint64_t round, int rank)
{
    return oob->data + ((round % 2) * (size_t)oob->nranks + (size_t)rank) * oob->max_bytes;
}

static nsp_status_t shm_allgather(void *sbuf, void *rbuf, size_t msglen, void *coll_info,
                                  void **request)
{
    shm_oob_rank_t *st  = coll_info;
    shm_oob_t      *oob = st->oob;

    if (msglen > oob->max_bytes) {
        return NSP_ERR_INVALID_ARG;
    }
    st->round += 1;
    st->rbuf = rbuf;
    st->len  = msglen;
    memcpy(shm_bank(oob, st->round, st->rank), sbuf, msglen);
    oob->slot[st->rank].len = msglen;
    atomic_store_explicit(&oob->slot[st->rank].seq, st->round, memory_order_release);
    *request = st;
    return NSP_OK;
}

static nsp_status_t shm_test(void *request)
{
    shm_oob_rank_t *st  = request;
    shm_oob_t      *oob = st->oob;

    for (int r = 0; r < oob->nranks; ++r) {
        if (atomic_load_explicit(&oob->slot[r].seq, memory_order_acquire) < st->round) {
            return NSP_INPROGRESS;
        }
    }
    for (int r = 0; r < oob->nranks; ++r) {
        memcpy((unsigned char *)st->rbuf + (size_t)r * st->len, shm_bank(oob, st->round, r),
               st->len);
    }
    return NSP_OK;
}

static nsp_status_t shm_free(void *request)
{
    (void)request;
    return NSP_OK;
}

void shm_oob_coll(shm_oob_t *oob, int rank, shm_oob_rank_t *state, nsp_oob_coll_t *coll)
{
    memset(state, 0, sizeof(*state));
    state->oob  = oob;
    state->rank = rank;
    memset(coll, 0, sizeof(*coll));
    coll->allgather = shm_allgather;
    coll->req_test  = shm_test;
    coll->req_free  = shm_free;
    coll->coll_info = state;
    coll->n_oob_eps = (uint32_t)oob->nranks;
    coll->oob_ep    = (uint32_t)rank;
}

uint64_t cu_hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 0x85ebca77c2b2ae63ull) * 0x94d049bb133111ebull ^ d * 0xd6e8feb86659fd93ull;

    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

void cu_fill(unsigned char *buf, size_t bytes, int iter, int src, int dst)
{
    for (size_t i = 0; i < bytes; ++i) {
        buf[i] = cu_byte(iter, src, dst, i);
    }
}

long cu_check(const unsigned char *buf, size_t bytes, int iter, int src, int dst)
{
    for (size_t i = 0; i < bytes; ++i) {
        if (buf[i] != cu_byte(iter, src, dst, i)) {
            return (long)i;
        }
    }
    return -1;
}

size_t cu_count(int iter, int src, int dst, size_t max_bytes)
{
    uint64_t h = cu_hash((uint64_t)iter + 77, (uint64_t)src, (uint64_t)dst, 12345);

    if (h % 8 == 0) {
        return 0;
    }
    return (size_t)((h >> 8) % (max_bytes + 1));
}

nsp_config_t cu_config(double timeout_s)
{
    nsp_config_t cfg = NSP_CONFIG_INITIALIZER;

    cfg.timeout_s = timeout_s;
    return cfg;
}

int cu_fail(const char *what, nsp_status_t status)
{
    mp_note("%s: %s: %s", what, nsp_status_string(status), nsp_last_error());
    return 10;
}

int cu_world_tree(const nsp_unique_id_t *id, int rank, int nranks, double timeout_s,
                  const int *degrees, int nlevels, nsp_comm_t **comm, nsp_tree_t **tree)
{
    nsp_config_t cfg = cu_config(timeout_s);
    nsp_status_t st;

    *comm = NULL;
    *tree = NULL;
    st    = nsp_comm_init_rank(comm, nranks, *id, rank, &cfg);
    if (st == NSP_OK) {
        st = nsp_tree_create(*comm, degrees, nlevels, tree);
    }
    if (st != NSP_OK) {
        nsp_comm_destroy(*comm);
        *comm = NULL;
        return cu_fail("init/tree", st);
    }
    return 0;
}
