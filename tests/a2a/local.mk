# tests/a2a: the nested all-to-all, and the users of the tree's groups.
if NSP_COMM
# Tests of the nested all-to-all (tests/a2a/): pure ones in one process.
check_LTLIBRARIES += tests/a2a/liba2aref.la
tests_a2a_liba2aref_la_SOURCES = tests/a2a/a2a_ref.c tests/a2a/a2a_ref.h tests/a2a/a2a_mp.h
tests_a2a_liba2aref_la_CFLAGS = $(AM_CFLAGS)

A2A_TEST_LIBS = tests/a2a/liba2aref.la tests/libnsptest.la libnspcomm.la libnspcomm_planner.la -lm

check_PROGRAMS += tests/a2a/test_layout tests/a2a/test_pack tests/a2a/test_levels
TESTS += tests/a2a/test_layout tests/a2a/test_pack tests/a2a/test_levels
tests_a2a_test_layout_SOURCES = tests/a2a/test_layout.c
tests_a2a_test_layout_LDADD = $(A2A_TEST_LIBS)
tests_a2a_test_pack_SOURCES = tests/a2a/test_pack.c
tests_a2a_test_pack_LDADD = $(A2A_TEST_LIBS)
tests_a2a_test_levels_SOURCES = tests/a2a/test_levels.c
tests_a2a_test_levels_LDADD = $(A2A_TEST_LIBS)
# The mapped path's row copies, through the cache and streamed around it.
check_PROGRAMS += tests/a2a/test_copy_rows
TESTS += tests/a2a/test_copy_rows
tests_a2a_test_copy_rows_SOURCES = tests/a2a/test_copy_rows.c
tests_a2a_test_copy_rows_LDADD = $(A2A_TEST_LIBS)
# Buffer sizes given through params (NSP_A2A_FIELD_BYTES), checked.
check_PROGRAMS += tests/a2a/test_a2a_bytes
TESTS += tests/a2a/test_a2a_bytes
tests_a2a_test_a2a_bytes_SOURCES = tests/a2a/test_a2a_bytes.c
tests_a2a_test_a2a_bytes_LDADD = $(A2A_TEST_LIBS)
# Every entry of every ops table set (memory types, engines, transports).
check_PROGRAMS += tests/a2a/test_tables
TESTS += tests/a2a/test_tables
tests_a2a_test_tables_SOURCES = tests/a2a/test_tables.c
tests_a2a_test_tables_LDADD = $(A2A_TEST_LIBS)
endif

# Multi-rank tests: real processes over UCX on loopback (tests/mp.h).
if NSP_COMM
check_PROGRAMS += tests/a2a/test_a2a_mp
TESTS += tests/a2a/test_a2a_mp
tests_a2a_test_a2a_mp_SOURCES = tests/a2a/test_a2a_mp.c
tests_a2a_test_a2a_mp_LDADD = $(A2A_TEST_LIBS)
# Mapped sources (nsp_mem_alloc, params.mapped) over UCX on loopback.
check_PROGRAMS += tests/a2a/test_a2a_mapped
TESTS += tests/a2a/test_a2a_mapped
tests_a2a_test_a2a_mapped_SOURCES = tests/a2a/test_a2a_mapped.c
tests_a2a_test_a2a_mapped_LDADD = $(A2A_TEST_LIBS)
# The device engine (the CUDA memory type's) on a test device over UCX:
# derived once, data, gating, refusals.
check_PROGRAMS += tests/a2a/test_a2a_device
TESTS += tests/a2a/test_a2a_device
tests_a2a_test_a2a_device_SOURCES = tests/a2a/test_a2a_device.c tests/a2a/sync_device.c \
	tests/a2a/sync_device.h
tests_a2a_test_a2a_device_LDADD = $(A2A_TEST_LIBS)
# Persistent handles, two worlds in one process, two threads with a world each.
check_PROGRAMS += tests/a2a/test_a2a_worlds
TESTS += tests/a2a/test_a2a_worlds
tests_a2a_test_a2a_worlds_SOURCES = tests/a2a/test_a2a_worlds.c
tests_a2a_test_a2a_worlds_LDADD = $(A2A_TEST_LIBS)
endif

# perf/nsp_a2a_perf end to end on 4 forked ranks (small sizes).
if NSP_COMM
TESTS += tests/a2a/test_a2a_perf.sh
dist_noinst_SCRIPTS += tests/a2a/test_a2a_perf.sh
# The exchange moved as runs (alltoallv_iov_post) and packed, over real processes.
TESTS += tests/a2a/test_a2a_runs.sh
dist_noinst_SCRIPTS += tests/a2a/test_a2a_runs.sh
endif

# tests/a2a/test_group_users: ring attention and the nested all-to-all take
# one and the same group of the tree, on a tree that has it and one that lacks it.
if NSP_COMM
check_PROGRAMS += tests/a2a/test_group_users
TESTS += tests/a2a/test_group_users
tests_a2a_test_group_users_SOURCES = tests/a2a/test_group_users.c
tests_a2a_test_group_users_LDADD = $(NATTN_TEST_LIBS)
endif
