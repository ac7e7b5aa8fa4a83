/*
 * Mapped sources of the host engine (docs/reference/alltoall.md "Mapped sources"; the
 * steps of nested_a2a_host.c call these). A level whose group shares a
 * mapped region (nsp_mem_alloc) and whose post asked for it
 * (params.mapped = 1) first announces where its source sits (one small
 * message to each peer). Every index then holds the same d descriptors, so
 * all decide alike: if every source is mapped and readable by the whole
 * group, each rank copies its share straight out of the peers' sources
 * (one copy per byte) and sends a zero-byte "done" to each; the level
 * completes when its copies are done and every peer said done (so no one
 * reads its source any more). Otherwise the level falls back to the
 * exchange, exactly as without mapping.
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_MAPPED_H_
#define NSP_ATTN_SP_NESTED_A2A_MAPPED_H_

#include "attn_sp/nested_a2a_common.h"

/*
 * What a rank tells each peer of a level that may read mapped sources:
 * whether its level source lies in a mapped region, and where. Sent as
 * bytes between processes of one build.
 */
typedef struct nsp_a2a_desc {
    uint32_t ok;      /* 1: [offset, offset + bytes) of region `region` is the source */
    uint32_t region;  /* region id (nsp_tp_ops_t mem_find) */
    uint64_t offset;  /* bytes into the region */
    uint64_t bytes;   /* the level source's bytes (nsp_pack_src_bytes) */
} nsp_a2a_desc_t;

/* A level's mapped path: made at create when the level may map. */
typedef struct nsp_a2a_mapped {
    int             mapped;     /* this start decided: every peer's source read directly */
    nsp_a2a_tps_t   ctl;        /* the announce, then the "done" messages */
    nsp_a2a_desc_t  mine;       /* what this rank announces */
    nsp_a2a_desc_t *descs;      /* [d] what each index announced */
    unsigned char  *copied;     /* [d] index q's share already copied */
    int             spec_off;   /* an announce said no: copy nothing more early */
    size_t         *ctl_counts; /* [d] zeros: counts and displacements of "done" */
} nsp_a2a_mapped_t;

/**
 * May level L read mapped sources? Only if the post asked for it
 * (params->mapped, the same on every rank: agreement hash), its whole group
 * shares some mapped region (the same answer on every rank of the group:
 * regions are allocated collectively) and the copy needs no sum of
 * replicas. Then *out is its mapped path (nsp_a2a_mapped_free), else NULL.
 */
nsp_status_t nsp_a2a_mapped_setup(const nsp_a2a_level_t *L, nsp_a2a_mapped_t **out);

void nsp_a2a_mapped_free(nsp_a2a_mapped_t *M);

/** A new start: nothing decided, nothing copied (the messages of the last
 *  one abandoned). */
void nsp_a2a_mapped_arm(const nsp_a2a_level_t *L, nsp_a2a_mapped_t *M);

/** Abandon the messages in flight (the start is over). */
void nsp_a2a_mapped_disarm(nsp_a2a_mapped_t *M);

/** First step of the level: announce this rank's source to every peer. */
nsp_status_t nsp_a2a_mapped_announce(nsp_a2a_level_t *L, nsp_a2a_mapped_t *M);

/**
 * Second step: copy from each peer whose announce arrived (and allowed
 * it); once all are in, decide. NSP_INPROGRESS until then; NSP_OK with
 * *fell_back = 1 when some source is not mapped for the whole group (the
 * caller exchanges through the transport instead), or 0 when every share
 * was copied and the "done" messages are posted (M->mapped is set).
 */
nsp_status_t nsp_a2a_mapped_decide(nsp_a2a_level_t *L, nsp_a2a_mapped_t *M, int *fell_back);

/** Test the announce / "done" messages (nsp_a2a_tps_test). */
nsp_status_t nsp_a2a_mapped_test(nsp_a2a_mapped_t *M, uint64_t *progress, int *idle);

#endif /* NSP_ATTN_SP_NESTED_A2A_MAPPED_H_ */
