/*
 * mp_run_uid (see mp.h): mp_run_made with nsp_launch_make_uid as the maker;
 * mp_comm_tree: a rank's world and tree. In a file of its own so that tests
 * which do not link libnspcomm can still use the rest of the launcher (a
 * static archive member is linked only when used).
 */
#include "mp.h"

#include "nspcomm.h"
#include "nsp_launch.h"

#include <stdio.h>

int mp_run_uid(int nranks, double timeout_s, mp_fn_t fn, void *arg, struct nsp_unique_id *id,
               mp_result_t *res)
{
    return mp_run_made(nranks, timeout_s, fn, arg, id, sizeof(*id), nsp_launch_make_uid, res);
}

int mp_comm_tree(const nsp_unique_id_t *id, int rank, int nranks, double timeout_s, int sparse,
                 nsp_comm_t **comm, nsp_tree_t **tree)
{
    nsp_config_t cfg = NSP_CONFIG_INITIALIZER;
    int          degrees[2] = {1, nranks};

    cfg.timeout_s = timeout_s;
    *comm = NULL;
    *tree = NULL;
    if (nsp_comm_init_rank(comm, nranks, *id, rank, &cfg) != NSP_OK) {
        mp_note("init: %s", nsp_last_error());
        return -1;
    }
    if (nsp_tree_create(*comm, sparse ? degrees : NULL, sparse ? 2 : 0, tree) != NSP_OK) {
        mp_note("tree: %s", nsp_last_error());
        nsp_comm_destroy(*comm);
        *comm = NULL;
        return -1;
    }
    return 0;
}

void mp_comm_tree_free(nsp_comm_t *comm, nsp_tree_t *tree)
{
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    nsp_a2a_release_cache();
}
