# tests/comm: multi-process tests of the communication layer (real processes
# over UCX on loopback, launched by tests/mp.c).
if NSP_COMM
COMM_TEST_SOURCES = tests/comm/comm_util.c tests/comm/comm_util.h
COMM_TEST_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
check_PROGRAMS += tests/comm/test_tree_math tests/comm/test_bootstrap \
	tests/comm/test_alltoallv tests/comm/test_tree tests/comm/test_ring \
	tests/comm/test_failure tests/comm/test_rdv_hostile tests/comm/test_owed \
	tests/comm/test_alltoallv_iov
TESTS += tests/comm/test_tree_math tests/comm/test_bootstrap \
	tests/comm/test_alltoallv tests/comm/test_tree tests/comm/test_ring \
	tests/comm/test_failure tests/comm/test_rdv_hostile tests/comm/test_owed \
	tests/comm/test_alltoallv_iov
tests_comm_test_alltoallv_iov_SOURCES = tests/comm/test_alltoallv_iov.c $(COMM_TEST_SOURCES)
tests_comm_test_alltoallv_iov_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_tree_math_SOURCES = tests/comm/test_tree_math.c
tests_comm_test_tree_math_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_bootstrap_SOURCES = tests/comm/test_bootstrap.c $(COMM_TEST_SOURCES)
tests_comm_test_bootstrap_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_alltoallv_SOURCES = tests/comm/test_alltoallv.c $(COMM_TEST_SOURCES)
tests_comm_test_alltoallv_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_tree_SOURCES = tests/comm/test_tree.c $(COMM_TEST_SOURCES)
tests_comm_test_tree_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_ring_SOURCES = tests/comm/test_ring.c $(COMM_TEST_SOURCES)
tests_comm_test_ring_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_failure_SOURCES = tests/comm/test_failure.c $(COMM_TEST_SOURCES)
tests_comm_test_failure_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_owed_SOURCES = tests/comm/test_owed.c $(COMM_TEST_SOURCES)
tests_comm_test_owed_LDADD = $(COMM_TEST_LDADD)
tests_comm_test_rdv_hostile_SOURCES = tests/comm/test_rdv_hostile.c tests/comm/rdv_peer.c \
	tests/comm/rdv_peer.h
tests_comm_test_rdv_hostile_LDADD = $(COMM_TEST_LDADD)
endif

# tests/comm/test_group: the tree's groups and their operations on forked ranks.
if NSP_COMM
check_PROGRAMS += tests/comm/test_group
TESTS += tests/comm/test_group
tests_comm_test_group_SOURCES = tests/comm/test_group.c $(COMM_TEST_SOURCES)
tests_comm_test_group_LDADD = $(COMM_TEST_LDADD)
endif
