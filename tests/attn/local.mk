# tests/attn: the host reference attention and its pieces (libnspattn).
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
