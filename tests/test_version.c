/* nsp_version, nsp_struct_size, nsp_abi_check (the ABI check of bindings),
 * nsp_planner_kind_from_name, nsp_planner_count/at (the planners listed) and
 * nsp_launcher_detect (torchrun and friends). */
#include "nspcomm.h"
#include "common/log.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static void test_version(void)
{
    int      major = -1, minor = -1, patch = -1;
    unsigned code  = 0;
    size_t   size  = 0;

    tap_is_int(nsp_version(&major, &minor, &patch, &code), NSP_OK, "nsp_version succeeds");
    tap_is_int(code, NSP_VERSION_CODE, "it reports the header's NSP_VERSION_CODE");
    tap_ok(major == NSP_VERSION_MAJOR && minor == NSP_VERSION_MINOR &&
           patch == NSP_VERSION_PATCH, "and its major, minor, patch");
    tap_is_int(nsp_version(NULL, NULL, NULL, NULL), NSP_OK, "every output may be NULL");
    tap_is_int(nsp_struct_size("nsp_plan_t", &size), NSP_OK, "nsp_struct_size(nsp_plan_t)");
    tap_is_int((int64_t)size, (int64_t)sizeof(nsp_plan_t), "equals sizeof(nsp_plan_t)");
    tap_is_int(nsp_struct_size("nsp_nested_attn_stats_t", &size), NSP_OK,
               "nsp_struct_size(nsp_nested_attn_stats_t)");
    tap_is_int((int64_t)size, (int64_t)sizeof(nsp_nested_attn_stats_t), "equals its sizeof");
    tap_is_int(nsp_struct_size("nsp_no_such_t", &size), NSP_ERR_NOT_FOUND,
               "an unknown struct name is NSP_ERR_NOT_FOUND");
    tap_ok(strstr(nsp_last_error(), "nsp_no_such_t") != NULL, "and the message names it");
    tap_is_int(NSP_ABI_CHECK(), NSP_OK, "NSP_ABI_CHECK() passes for this header");
    tap_is_int(nsp_abi_check(NSP_VERSION_CODE + 100, sizeof(nsp_plan_t),
                             sizeof(nsp_nested_attn_params_t)),
               NSP_ERR_MISMATCH, "another minor version is NSP_ERR_MISMATCH");
    tap_is_int(nsp_abi_check(NSP_VERSION_CODE, sizeof(nsp_plan_t) + 8,
                             sizeof(nsp_nested_attn_params_t)),
               NSP_ERR_MISMATCH, "another sizeof(nsp_plan_t) is NSP_ERR_MISMATCH");
    tap_ok(strstr(nsp_last_error(), "struct sizes differ") != NULL, "and the message says so");
}

static void test_kind_names(void)
{
    nsp_planner_kind_t k = (nsp_planner_kind_t)-1;

    tap_is_int(nsp_planner_kind_from_name("nested", &k), NSP_OK, "kind 'nested' is known");
    tap_is_int(k, NSP_PLANNER_NESTED, "and is NSP_PLANNER_NESTED");
    tap_is_int(nsp_planner_kind_from_name("disjoint", &k), NSP_OK, "kind 'disjoint' is known");
    tap_is_int(k, NSP_PLANNER_DISJOINT, "and is NSP_PLANNER_DISJOINT");
    tap_is_int(nsp_planner_kind_from_name("bogus", &k), NSP_ERR_NOT_FOUND,
               "an unknown kind is NSP_ERR_NOT_FOUND");
    tap_ok(strstr(nsp_last_error(), "static") != NULL, "and the message lists the known ones");
}

/* nsp_planner_count / nsp_planner_at list the built-in planners in their
 * documented order, each name round-tripping through kind_from_name. */
static void test_planner_list(void)
{
    static const char *const names[] = {"static", "disjoint", "nested", "megatron"};
    static const nsp_planner_kind_t kinds[] = {NSP_PLANNER_STATIC, NSP_PLANNER_DISJOINT,
                                               NSP_PLANNER_NESTED, NSP_PLANNER_MEGATRON};
    int                count = -1;
    nsp_planner_kind_t k = (nsp_planner_kind_t)-1, back = (nsp_planner_kind_t)-1;
    const char        *name = NULL;

    tap_is_int(nsp_planner_count(&count), NSP_OK, "nsp_planner_count succeeds");
    tap_is_int(count, 4, "this build has the four built-in planners");
    for (int i = 0; i < 4; ++i) {
        tap_ok(nsp_planner_at(i, &k, &name) == NSP_OK && k == kinds[i] && name != NULL &&
                   strcmp(name, names[i]) == 0,
               "planner %d is %s (kind %d)", i, names[i], (int)kinds[i]);
        tap_ok(nsp_planner_kind_from_name(name, &back) == NSP_OK && back == k,
               "and its name gives its kind back");
    }
    tap_is_int(nsp_planner_at(0, NULL, NULL), NSP_OK, "both outputs may be NULL");
    tap_is_int(nsp_planner_at(count, &k, &name), NSP_ERR_INVALID_ARG,
               "an index past the count is NSP_ERR_INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "[0, 4)") != NULL, "and the message gives the range");
    tap_is_int(nsp_planner_at(-1, &k, &name), NSP_ERR_INVALID_ARG,
               "a negative index is NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_planner_count(NULL), NSP_ERR_INVALID_ARG, "a NULL count is NSP_ERR_INVALID_ARG");
}

int main(void)
{
    setenv("NSPCOMM_LOG_LEVEL", "ERROR", 0);
    test_version();
    test_kind_names();
    test_planner_list();
    return tap_done();
}
