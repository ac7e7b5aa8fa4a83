# src/planner: pure C, no transport, no hwloc (docs/design.md §3, §5).
libnspcomm_planner_la_SOURCES += \
	src/planner/cost.c \
	src/planner/presets.c \
	src/planner/plan.c \
	src/planner/evaluate.c \
	src/planner/model_io.c \
	src/planner/workload.c \
	src/planner/validate.c \
	src/planner/plan_json.c
noinst_HEADERS += \
	src/planner/cost.h \
	src/planner/plan_internal.h \
	src/planner/planner_io.h

# data/models and data/clusters ship through EXTRA_DIST (data) in Makefile.am.

# ---------------------------------------------------------------------------
# Tests of the cost model, files, workloads, plan JSON and validation
# (tests/planner/). random_plan.c builds random valid plans the way a
# planner does; gen_plans writes some for tools/plan_check.py.
# ---------------------------------------------------------------------------
PLANNER_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/tools \
	-DNSP_TEST_SRCDIR='"$(abs_top_srcdir)"'
PLANNER_TEST_LDADD = tests/libnsptest.la libnspcomm_planner.la -lm
PLANNER_TEST_COMMON = tests/planner/random_plan.c tests/planner/random_plan.h

PLANNER_TESTS = \
	tests/planner/test_json \
	tests/planner/test_cost_vectors \
	tests/planner/test_model_cluster \
	tests/planner/test_workload \
	tests/planner/test_plan_json \
	tests/planner/test_validate \
	tests/planner/test_ring_cost \
	tests/planner/test_xfer_cpu
check_PROGRAMS += $(PLANNER_TESTS) tests/planner/gen_plans
TESTS += $(PLANNER_TESTS)

tests_planner_test_json_SOURCES = tests/planner/test_json.c $(PLANNER_TEST_COMMON)
tests_planner_test_json_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_json_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_cost_vectors_SOURCES = tests/planner/test_cost_vectors.c $(PLANNER_TEST_COMMON)
tests_planner_test_cost_vectors_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_cost_vectors_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_model_cluster_SOURCES = tests/planner/test_model_cluster.c $(PLANNER_TEST_COMMON)
tests_planner_test_model_cluster_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_model_cluster_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_workload_SOURCES = tests/planner/test_workload.c $(PLANNER_TEST_COMMON)
tests_planner_test_workload_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_workload_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_plan_json_SOURCES = tests/planner/test_plan_json.c $(PLANNER_TEST_COMMON)
tests_planner_test_plan_json_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_plan_json_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_validate_SOURCES = tests/planner/test_validate.c $(PLANNER_TEST_COMMON)
tests_planner_test_validate_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_validate_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_ring_cost_SOURCES = tests/planner/test_ring_cost.c $(PLANNER_TEST_COMMON)
tests_planner_test_ring_cost_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_ring_cost_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_test_xfer_cpu_SOURCES = tests/planner/test_xfer_cpu.c $(PLANNER_TEST_COMMON)
tests_planner_test_xfer_cpu_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_test_xfer_cpu_LDADD = $(PLANNER_TEST_LDADD)
tests_planner_gen_plans_SOURCES = tests/planner/gen_plans.c $(PLANNER_TEST_COMMON)
tests_planner_gen_plans_CPPFLAGS = $(PLANNER_TEST_CPPFLAGS)
tests_planner_gen_plans_LDADD = $(PLANNER_TEST_LDADD)

# The independent checker re-derives every predicted number (Python 3, stdlib).
dist_noinst_SCRIPTS += tools/plan_check.py
if NSP_PYTHON
TESTS += tests/planner/test_plan_check.py tests/planner/test_ctypes.py
endif
EXTRA_DIST += tests/planner/test_plan_check.py tests/planner/test_ctypes.py \
	tests/planner/taplib.py tests/planner/data
