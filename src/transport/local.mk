# src/transport (DESIGN §3, §4): the internal transport interface, the UCX
# backend, bootstrap (TCP rendezvous, out-of-band callbacks), requests and the
# public communicator.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/transport/request.c \
	src/transport/transport.c \
	src/transport/bootstrap_tcp.c \
	src/transport/bootstrap_oob.c \
	src/transport/ucx.c \
	src/transport/ucx_report.c \
	src/transport/ucx_progress.c \
	src/transport/comm.c
noinst_HEADERS += \
	src/transport/transport.h \
	src/transport/request.h \
	src/transport/bootstrap.h \
	src/transport/comm.h \
	src/transport/ucx_report.h \
	src/transport/ucx_progress.h
endif

# tests/comm: multi-process tests of the communication layer (real processes
# over UCX on loopback, launched by tests/mp.c).
if NSP_COMM
COMM_TEST_SOURCES = tests/comm/comm_util.c tests/comm/comm_util.h
COMM_TEST_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
check_PROGRAMS += tests/comm/test_tree_math tests/comm/test_bootstrap \
	tests/comm/test_alltoallv tests/comm/test_tree tests/comm/test_ring \
	tests/comm/test_failure
TESTS += tests/comm/test_tree_math tests/comm/test_bootstrap \
	tests/comm/test_alltoallv tests/comm/test_tree tests/comm/test_ring \
	tests/comm/test_failure
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
endif
