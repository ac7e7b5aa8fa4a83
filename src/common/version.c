/*
 * The library's version and the sizes of its public structs, so a binding
 * that mirrors the structs (ctypes, cffi, another compiler) can refuse to
 * run against a library built from another header instead of corrupting
 * memory.
 */
#include "nspcomm.h"

#include "common/log.h"

#include <string.h>

nsp_status_t nsp_version(int *major, int *minor, int *patch, unsigned *code)
{
    if (major != NULL) {
        *major = NSP_VERSION_MAJOR;
    }
    if (minor != NULL) {
        *minor = NSP_VERSION_MINOR;
    }
    if (patch != NULL) {
        *patch = NSP_VERSION_PATCH;
    }
    if (code != NULL) {
        *code = NSP_VERSION_CODE;
    }
    return NSP_OK;
}

/* One row per public struct a binding may mirror: its name and sizeof. */
#define NSP_ABI_STRUCTS(X)                                                  \
    X(nsp_model_t) X(nsp_cluster_t) X(nsp_plan_group_t) X(nsp_plan_round_t) \
    X(nsp_plan_prediction_t) X(nsp_plan_t) X(nsp_planner_params_t)          \
    X(nsp_unique_id_t) X(nsp_config_t) X(nsp_oob_coll_t)                    \
    X(nsp_layout_info_t) X(nsp_layout_level_t) X(nsp_layout_heads_t)        \
    X(nsp_a2a_params_t) X(nsp_attn_params_t) X(nsp_attn_batch_t)            \
    X(nsp_attn_kernel_t) X(nsp_nested_attn_params_t)                        \
    X(nsp_nested_attn_level_stats_t) X(nsp_nested_attn_stats_t)

nsp_status_t nsp_struct_size(const char *name, size_t *size)
{
    if (name == NULL || size == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_struct_size: name or size is NULL");
    }
#define NSP_ABI_ROW_(type)                \
    if (strcmp(name, #type) == 0) {       \
        *size = sizeof(type);             \
        return NSP_OK;                    \
    }
    NSP_ABI_STRUCTS(NSP_ABI_ROW_)
#undef NSP_ABI_ROW_
    return nsp_error(NSP_ERR_NOT_FOUND, "nsp_struct_size: '%s' is not a public struct of "
                     "nspcomm %d.%d.%d (names are the typedefs of nspcomm.h, e.g. nsp_plan_t)",
                     name, NSP_VERSION_MAJOR, NSP_VERSION_MINOR, NSP_VERSION_PATCH);
}

nsp_status_t nsp_abi_check(unsigned version_code, size_t plan_size, size_t params_size)
{
    if (version_code / 100 != NSP_VERSION_CODE / 100) {
        return nsp_error(NSP_ERR_MISMATCH, "nspcomm: the caller was built against version "
                         "%u.%u.%u but the library is %d.%d.%d: rebuild the caller against "
                         "this library's nspcomm.h",
                         version_code / 10000, version_code / 100 % 100, version_code % 100,
                         NSP_VERSION_MAJOR, NSP_VERSION_MINOR, NSP_VERSION_PATCH);
    }
    if (plan_size != sizeof(nsp_plan_t) || params_size != sizeof(nsp_nested_attn_params_t)) {
        return nsp_error(NSP_ERR_MISMATCH, "nspcomm: struct sizes differ between the caller "
                         "(nsp_plan_t %zu, nsp_nested_attn_params_t %zu bytes) and the library "
                         "(%zu, %zu): the caller's nspcomm.h is not this library's",
                         plan_size, params_size, sizeof(nsp_plan_t),
                         sizeof(nsp_nested_attn_params_t));
    }
    return NSP_OK;
}
