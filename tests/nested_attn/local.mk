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
