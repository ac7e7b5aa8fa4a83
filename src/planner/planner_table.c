/*
 * The planners of this build, by kind and by name (docs/design/extending.md, "A
 * planner"). A planner is one file defining
 *     const nsp_planner_entry_t nsp_planner_NAME_entry = {...};
 * (planners.h) and one line X(NAME) of NSP_PLANNER_TABLE below, in the
 * order nsp_planner_at() lists them.
 */
#include "planner/planners.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

/* One line more, for the test that shows what adding a planner takes
 * (tests/planner/planners/test_planner_dummy.c builds this file with it). */
#ifdef NSP_PLANNER_TEST_DUMMY
#define NSP_PLANNER_TEST_LINE(X) X(dummy)
#else
#define NSP_PLANNER_TEST_LINE(X)
#endif

#define NSP_PLANNER_TABLE(X) \
    X(static)                \
    X(disjoint)              \
    X(nested)                \
    X(megatron)              \
    NSP_PLANNER_TEST_LINE(X)

#define NSP_PLANNER_DECLARE_(name) extern const nsp_planner_entry_t nsp_planner_##name##_entry;
NSP_PLANNER_TABLE(NSP_PLANNER_DECLARE_)
#undef NSP_PLANNER_DECLARE_

#define NSP_PLANNER_ADDRESS_(name) &nsp_planner_##name##_entry,
static const nsp_planner_entry_t *const planner_table[] = {
    NSP_PLANNER_TABLE(NSP_PLANNER_ADDRESS_)
};
#undef NSP_PLANNER_ADDRESS_

#define NSP_PLANNER_COUNT ((int)(sizeof(planner_table) / sizeof(planner_table[0])))

const nsp_planner_entry_t *nsp_planner_find_kind(nsp_planner_kind_t kind)
{
    for (int i = 0; i < NSP_PLANNER_COUNT; ++i) {
        if (planner_table[i]->kind == kind) {
            return planner_table[i];
        }
    }
    return NULL;
}

const nsp_planner_entry_t *nsp_planner_find_name(const char *name)
{
    for (int i = 0; i < NSP_PLANNER_COUNT; ++i) {
        if (strcmp(planner_table[i]->name, name) == 0) {
            return planner_table[i];
        }
    }
    return NULL;
}

nsp_status_t nsp_planner_count(int *count)
{
    if (count == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_planner_count: NULL count");
    }
    *count = NSP_PLANNER_COUNT;
    return NSP_OK;
}

nsp_status_t nsp_planner_at(int index, nsp_planner_kind_t *kind, const char **name)
{
    if (index < 0 || index >= NSP_PLANNER_COUNT) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_planner_at: index %d is not in [0, %d) "
                         "(nsp_planner_count)", index, NSP_PLANNER_COUNT);
    }
    if (kind != NULL) {
        *kind = planner_table[index]->kind;
    }
    if (name != NULL) {
        *name = planner_table[index]->name;
    }
    return NSP_OK;
}

nsp_status_t nsp_planner_kind_from_name(const char *name, nsp_planner_kind_t *kind)
{
    const nsp_planner_entry_t *planner;
    char                       known[256] = "";

    if (name == NULL || kind == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_planner_kind_from_name: NULL argument");
    }
    planner = nsp_planner_find_name(name);
    if (planner != NULL) {
        *kind = planner->kind;
        return NSP_OK;
    }
    for (int i = 0; i < NSP_PLANNER_COUNT; ++i) {
        const size_t len = strlen(known);
        snprintf(known + len, sizeof(known) - len, "%s%s", i > 0 ? ", " : "",
                 planner_table[i]->name);
    }
    return nsp_error(NSP_ERR_NOT_FOUND, "unknown planner '%s' (known: %s)", name, known);
}
