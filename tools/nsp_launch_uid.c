/*
 * nsp_launch_make_uid (nsp_launch.h): a fresh bootstrap id as the launcher's
 * `make`. In a file of its own, so programs that do not link libnspcomm can
 * use the rest of the launcher (an archive member is linked only when used).
 */
#include "nsp_launch.h"

#include <stdio.h>

int nsp_launch_make_uid(void *out, size_t bytes, char *why, size_t whylen)
{
    nsp_status_t st;

    if (bytes != sizeof(nsp_unique_id_t)) {
        snprintf(why, whylen, "launcher: a field of %zu bytes, an id has %zu", bytes,
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
