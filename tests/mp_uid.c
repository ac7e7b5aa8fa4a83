/*
 * mp_run_uid (see mp.h): mp_run_made with nsp_get_unique_id as the maker.
 * In a file of its own so that tests which do not link libnspcomm can still
 * use the rest of the launcher (a static archive member is linked only
 * when used).
 */
#include "mp.h"

#include "nspcomm.h"

#include <stdio.h>

/* mp_make_fn_t: a fresh bootstrap id; its rendezvous thread starts here, in
 * the parent, after the fork. */
static int mp_make_uid(void *out, size_t bytes, char *why, size_t whylen)
{
    nsp_status_t st;

    if (bytes != sizeof(nsp_unique_id_t)) {
        snprintf(why, whylen, "mp_run_uid: field of %zu bytes, an id has %zu", bytes,
                 sizeof(nsp_unique_id_t));
        return 1;
    }
    st = nsp_get_unique_id(out);
    if (st != NSP_OK) {
        snprintf(why, whylen, "nsp_get_unique_id: %s: %s", nsp_status_string(st),
                 nsp_last_error());
        return 1;
    }
    return 0;
}

int mp_run_uid(int nranks, double timeout_s, mp_fn_t fn, void *arg, struct nsp_unique_id *id,
               mp_result_t *res)
{
    return mp_run_made(nranks, timeout_s, fn, arg, id, sizeof(*id), mp_make_uid, res);
}
