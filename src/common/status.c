/* Status strings, generated from NSP_STATUS_MAP so they never drift. */
#include "nspcomm.h"

const char *nsp_status_string(nsp_status_t status)
{
    switch (status) {
#define NSP_STATUS_CASE_(name, code, desc) \
    case name:                             \
        return #name ": " desc;
        NSP_STATUS_MAP(NSP_STATUS_CASE_)
#undef NSP_STATUS_CASE_
    }
    return "NSP_ERR_UNKNOWN: unknown status code";
}
