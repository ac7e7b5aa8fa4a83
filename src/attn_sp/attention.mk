# src/attn_sp: reference attention, ring attention math, nested attention
# (docs/attention.md). The host reference needs no UCX: it is a convenience
# library that libnspcomm absorbs, and that single-process tests link with
# the planner library alone (for nsp_error and the status strings).
noinst_LTLIBRARIES += libnspattn.la
libnspattn_la_SOURCES = \
	src/attn_sp/attn_ref.c \
	src/attn_sp/attn_tile.c \
	src/attn_sp/attn_tile_generic.c \
	src/attn_sp/attn_tile_avx2.c \
	src/attn_sp/attn_ring_math.c
libnspattn_la_LIBADD = -lm
noinst_HEADERS += \
	src/attn_sp/attn_ref.h \
	src/attn_sp/attn_tile.h \
	src/attn_sp/attn_tile_impl.h \
	src/attn_sp/attn_ring_math.h
if NSP_COMM
libnspcomm_la_LIBADD += libnspattn.la
endif

# Tests: single process, no UCX.
NSP_ATTN_TEST_LIBS = tests/libnsptest.la libnspattn.la libnspcomm_planner.la -lm

check_PROGRAMS += tests/attn/test_attn_ref
TESTS += tests/attn/test_attn_ref
tests_attn_test_attn_ref_SOURCES = tests/attn/test_attn_ref.c tests/attn/attn_naive.c \
	tests/attn/attn_naive.h
tests_attn_test_attn_ref_LDADD = $(NSP_ATTN_TEST_LIBS)

check_PROGRAMS += tests/attn/test_attn_ring_sim
TESTS += tests/attn/test_attn_ring_sim
tests_attn_test_attn_ring_sim_SOURCES = tests/attn/test_attn_ring_sim.c \
	tests/attn/attn_naive.c tests/attn/attn_naive.h
tests_attn_test_attn_ring_sim_LDADD = $(NSP_ATTN_TEST_LIBS)

# Timing of the reference kernel (not a test): tests/attn/bench_attn [T n_q n_kv D]
check_PROGRAMS += tests/attn/bench_attn
tests_attn_bench_attn_SOURCES = tests/attn/bench_attn.c
tests_attn_bench_attn_LDADD = $(NSP_ATTN_TEST_LIBS)
