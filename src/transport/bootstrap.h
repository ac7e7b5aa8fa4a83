/*
 * Bootstrap: a blocking allgather among the ranks of a communicator being
 * created, before any backend exists (internal).
 *
 * Two implementations: the TCP rendezvous of nsp_get_unique_id (a star
 * through the process that created the id, see rdv.h) and the
 * framework's out-of-band allgather callbacks (bootstrap_oob.c). Backends
 * use it in world_create to exchange their addresses (UCX worker addresses,
 * an ncclUniqueId); the communicator uses it to allgather host identities.
 * A bootstrap is closed (nsp_bootstrap_close) as soon as the world exists.
 */
#ifndef NSP_TRANSPORT_BOOTSTRAP_H_
#define NSP_TRANSPORT_BOOTSTRAP_H_

#include "nspcomm.h"

#include <stddef.h>

typedef struct nsp_bootstrap nsp_bootstrap_t;

typedef struct nsp_bootstrap_ops {
    const char *name;  /**< "tcp" or "oob", for messages */
    /**
     * Blocking allgather: every rank contributes `bytes` bytes (the same
     * count on every rank); recvbuf gets [nranks][bytes] in rank order.
     * Errors: NSP_ERR_TIMEOUT (a rank did not contribute within timeout_s;
     * the message names it where known), NSP_ERR_PEER_FAILED, NSP_ERR_IO,
     * NSP_ERR_MISMATCH (ranks passed different sizes).
     */
    nsp_status_t (*allgather)(nsp_bootstrap_t *bs, const void *sendbuf, void *recvbuf,
                              size_t bytes);
    /**
     * Release. `done` = 1 after a successful init: tell the rendezvous this
     * rank finished. `done` = 0 on an error path: just leave (the others
     * learn that this rank is gone).
     */
    nsp_status_t (*close)(nsp_bootstrap_t *bs, int done);
} nsp_bootstrap_ops_t;

struct nsp_bootstrap {
    const nsp_bootstrap_ops_t *ops;
    int    rank;
    int    nranks;
    double timeout_s;
};

/** Convenience wrappers over the ops. */
nsp_status_t nsp_bootstrap_allgather(nsp_bootstrap_t *bs, const void *sendbuf, void *recvbuf,
                                     size_t bytes);
nsp_status_t nsp_bootstrap_close(nsp_bootstrap_t *bs, int done);

/**
 * Join the TCP rendezvous named by `id` as `rank` of `nranks`.
 * On success *bs is owned by the caller (nsp_bootstrap_close).
 * Errors: NSP_ERR_INVALID_ARG (bad id, rank out of range), NSP_ERR_TIMEOUT
 * (rendezvous unreachable or ranks missing), NSP_ERR_IO, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_bootstrap_tcp_join(const nsp_unique_id_t *id, int rank, int nranks,
                                    double timeout_s, nsp_bootstrap_t **bs);

/**
 * Serve the rendezvous of *id in a detached thread of this process: listen
 * on the id's address and port (port 0: a free one, written back into
 * *id), admit only ranks that prove they hold the id's secret. The thread
 * ends when every rank closed its bootstrap or the rendezvous failed.
 * Errors: NSP_ERR_INVALID_ARG (not an id), NSP_ERR_IO (socket, bind: the
 * message names address and port), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_bootstrap_tcp_serve(nsp_unique_id_t *id);

/**
 * Give an NSPCOMM_ROOT id (HOST:PORT, no secret) its secret: derived from
 * `token` (NSPCOMM_TOKEN, borrowed) or the contents of `token_file`
 * (NSPCOMM_TOKEN_FILE, preferred when both are set); with neither, the
 * rendezvous moves to loopback (127.0.0.1:PORT, INFO log saying why) when
 * HOST is this host. An id that already has a secret is left as it is.
 * Errors: NSP_ERR_INVALID_ARG (token shorter than 16 characters; no token
 * and HOST is another host: the message says to set NSPCOMM_TOKEN; not an
 * id), NSP_ERR_IO (token file unreadable), NSP_ERR_INTERNAL.
 */
nsp_status_t nsp_bootstrap_tcp_root_secure(nsp_unique_id_t *id, const char *token,
                                           const char *token_file);

/**
 * If this process serves the rendezvous of `id`, wait (until `deadline`,
 * nsp_now_s() clock) for its thread to finish, so a rank-0 process that
 * returns from init right away cannot take the server with it. Returns
 * NSP_OK also when the server is elsewhere.
 */
nsp_status_t nsp_bootstrap_tcp_wait_server(const nsp_unique_id_t *id, double deadline);

/** Bootstrap over the caller's out-of-band allgather callbacks (borrowed). */
nsp_status_t nsp_bootstrap_oob_create(const nsp_oob_coll_t *oob, double timeout_s,
                                      nsp_bootstrap_t **bs);

#endif /* NSP_TRANSPORT_BOOTSTRAP_H_ */
