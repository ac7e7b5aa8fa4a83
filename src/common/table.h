/*
 * Ops tables (docs/design.md §3): a struct of function pointers, one table
 * per implementation, every entry set (what an implementation cannot do is
 * a function returning NSP_ERR_UNSUPPORTED with a message). A table type
 * lists its entries once, as an X-macro beside the struct:
 *
 *   #define NSP_FOO_ENTRIES(X) X(open) X(close)
 *   NSP_TABLE_COMPLETE(nsp_foo_t, open, NSP_FOO_ENTRIES);
 *
 * The assertion fails to compile when the struct gains an entry the list
 * lacks, so a test that walks the list (tests/a2a/test_tables.c) checks
 * every entry of every table.
 */
#ifndef NSP_COMMON_TABLE_H_
#define NSP_COMMON_TABLE_H_

#include <stddef.h>

#define NSP_TABLE_ONE_(entry) +1

/** Number of entries in an X-macro list. */
#define NSP_TABLE_COUNT(list) (0 list(NSP_TABLE_ONE_))

/** `type` holds, from its member `first` on, exactly the function pointers
 *  of `list` (before `first`: its name and other data). */
#define NSP_TABLE_COMPLETE(type, first, list)                                          \
    _Static_assert(sizeof(type) ==                                                     \
                       offsetof(type, first) + NSP_TABLE_COUNT(list) * sizeof(void (*)(void)), \
                   #type ": " #list " does not list every entry")

#endif /* NSP_COMMON_TABLE_H_ */
