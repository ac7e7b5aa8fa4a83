# src/attn_sp: reference attention, ring attention math, nested attention
# (docs/attention.md). The host reference needs no UCX: it is a convenience
# library that libnspcomm absorbs, and that single-process tests link with
# the planner library alone (for nsp_error and the status strings).
noinst_LTLIBRARIES += libnspattn.la
libnspattn_la_SOURCES = \
	src/attn_sp/attn_ref.c \
	src/attn_sp/attn_bytes.c \
	src/attn_sp/attn_tile.c \
	src/attn_sp/attn_tile_geom.c \
	src/attn_sp/attn_tile_generic.c \
	src/attn_sp/attn_tile_avx2.c \
	src/attn_sp/attn_ring_math.c \
	src/attn_sp/attn_reduce.c
libnspattn_la_LIBADD = -lm
noinst_HEADERS += \
	src/attn_sp/attn_ref.h \
	src/attn_sp/attn_reduce.h \
	src/attn_sp/attn_reduce_map.h \
	src/attn_sp/attn_tile.h \
	src/attn_sp/attn_tile_impl.h \
	src/attn_sp/attn_ring_math.h
if NSP_COMM
libnspcomm_la_LIBADD += libnspattn.la
# Nested SP attention and ring levels (docs/nested-attention.md): they drive
# the nested all-to-all and the transport, so they live in libnspcomm.
libnspcomm_la_SOURCES += \
	src/attn_sp/nested_attn.c \
	src/attn_sp/ring_attn.c
noinst_HEADERS += \
	src/attn_sp/nested_attn.h \
	src/attn_sp/ring_attn.h
endif

# Tests: single process, no UCX.
NSP_ATTN_TEST_LIBS = tests/libnsptest.la libnspattn.la libnspcomm_planner.la -lm

check_PROGRAMS += tests/attn/test_attn_ref
TESTS += tests/attn/test_attn_ref
tests_attn_test_attn_ref_SOURCES = tests/attn/test_attn_ref.c tests/attn/attn_naive.c \
	tests/attn/attn_naive.h
tests_attn_test_attn_ref_LDADD = $(NSP_ATTN_TEST_LIBS)

# Buffer sizes given through params (NSP_ATTN_FIELD_BYTES), checked.
check_PROGRAMS += tests/attn/test_attn_bytes
TESTS += tests/attn/test_attn_bytes
tests_attn_test_attn_bytes_SOURCES = tests/attn/test_attn_bytes.c
tests_attn_test_attn_bytes_LDADD = $(NSP_ATTN_TEST_LIBS)

# The dtype-generic reductions (bf16/fp16 conversions, merges, sums)
# against a float32 / float64 reference.
check_PROGRAMS += tests/attn/test_attn_reduce
TESTS += tests/attn/test_attn_reduce
tests_attn_test_attn_reduce_SOURCES = tests/attn/test_attn_reduce.c tests/attn/attn_naive.c \
	tests/attn/attn_naive.h
tests_attn_test_attn_reduce_LDADD = $(NSP_ATTN_TEST_LIBS)

check_PROGRAMS += tests/attn/test_attn_ring_sim
TESTS += tests/attn/test_attn_ring_sim
tests_attn_test_attn_ring_sim_SOURCES = tests/attn/test_attn_ring_sim.c \
	tests/attn/attn_naive.c tests/attn/attn_naive.h
tests_attn_test_attn_ring_sim_LDADD = $(NSP_ATTN_TEST_LIBS)

# Timing of the reference kernel (not a test): tests/attn/bench_attn [T n_q n_kv D]
check_PROGRAMS += tests/attn/bench_attn
tests_attn_bench_attn_SOURCES = tests/attn/bench_attn.c
tests_attn_bench_attn_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_attn_bench_attn_LDADD = $(NSP_ATTN_TEST_LIBS)

# Nested attention (tests/nested_attn/): the pure parts in one process, then
# 2, 4 and 8 real processes over UCX against the single-process reference.
if NSP_COMM
check_LTLIBRARIES += tests/nested_attn/libnattntest.la
tests_nested_attn_libnattntest_la_SOURCES = tests/nested_attn/nattn_test.c \
	tests/nested_attn/nattn_test.h
tests_nested_attn_libnattntest_la_CFLAGS = $(AM_CFLAGS)
NATTN_TEST_LIBS = tests/nested_attn/libnattntest.la tests/libnsptest.la libnspcomm.la \
	libnspcomm_planner.la -lm

check_PROGRAMS += tests/nested_attn/test_nested_attn_unit tests/nested_attn/test_nested_attn_mp
TESTS += tests/nested_attn/test_nested_attn_unit tests/nested_attn/test_nested_attn_mp
tests_nested_attn_test_nested_attn_unit_SOURCES = tests/nested_attn/test_nested_attn_unit.c
tests_nested_attn_test_nested_attn_unit_LDADD = $(NATTN_TEST_LIBS)
tests_nested_attn_test_nested_attn_mp_SOURCES = tests/nested_attn/test_nested_attn_mp.c
tests_nested_attn_test_nested_attn_mp_LDADD = $(NATTN_TEST_LIBS)
endif

# Pipelined vs serial nested attention on forked ranks (not a test):
# tests/nested_attn/bench_nested_attn [ranks tokens_per_rank max_len n_q n_kv D iters planner]
if NSP_COMM
check_PROGRAMS += tests/nested_attn/bench_nested_attn
tests_nested_attn_bench_nested_attn_SOURCES = tests/nested_attn/bench_nested_attn.c
tests_nested_attn_bench_nested_attn_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_nested_attn_bench_nested_attn_LDADD = $(NATTN_TEST_LIBS)
endif
