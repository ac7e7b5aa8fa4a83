/*
 * The methods of nsp_a2a_perf, in the order of its table and JSON. A new
 * method is a file of its own defining `const a2a_method_t a2a_method_NAME`
 * (perf/a2a_perf.h) and ONE line below, X(a2a_method_NAME); the file goes
 * into perf_nsp_a2a_perf_SOURCES (perf/a2a.mk). docs/design/extending.md, "A perf
 * method", walks through one.
 */
#include "config.h"

#include "a2a_perf.h"

#define A2A_METHOD_TABLE(X)          \
    X(a2a_method_nested)             \
    X(a2a_method_nested_oneshot)     \
    X(a2a_method_serial)             \
    X(a2a_method_levels)             \
    X(a2a_method_flat)               \
    X(a2a_method_tp_same)            \
    X(a2a_method_tp_flat)            \
    X(a2a_method_mpi)                \
    X(a2a_method_mpi_flat)           \
    X(a2a_method_mpi_pack)           \
    X(a2a_method_nested_mapped)      \
    X(a2a_method_flat_mapped)

#define A2A_DECLARE(sym) extern const a2a_method_t sym;
#define A2A_ENTRY(sym)   &sym,

A2A_METHOD_TABLE(A2A_DECLARE)

const a2a_method_t *const a2a_methods[] = {A2A_METHOD_TABLE(A2A_ENTRY)};
const int a2a_nmethods = (int)(sizeof(a2a_methods) / sizeof(a2a_methods[0]));

_Static_assert(sizeof(a2a_methods) / sizeof(a2a_methods[0]) <= A2A_MAX_METHODS,
               "--methods is a 32-bit mask: at most A2A_MAX_METHODS methods");
