# tests/planner: the tests of src/planner, against libnspcomm_planner alone
# (no UCX, hwloc, CUDA or NCCL): the cost model, files, workloads, plan JSON
# and validation here, the planners in tests/planner/planners/.

# ---------------------------------------------------------------------------
# The cost model, files, workloads, plan JSON and validation. random_plan.c
# builds random valid plans the way a planner does; gen_plans writes some
# for tools/plan_check.py.
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

# ---------------------------------------------------------------------------
# The planners (tests/planner/planners/): invariants over random batches,
# bad input, targeted cases, the planner table and the MILP solvers.
# ---------------------------------------------------------------------------
PLANNERS_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/tools
PLANNERS_TEST_LDADD = tests/libnsptest.la libnspcomm_planner.la -lm
PLANNERS_TEST_COMMON = tests/planner/planners/check.c tests/planner/planners/check.h
PLANNERS_TESTS = \
	tests/planner/planners/test_planners \
	tests/planner/planners/test_planner_input \
	tests/planner/planners/test_planner_cases \
	tests/planner/planners/test_planner_ring \
	tests/planner/planners/test_planner_megatron \
	tests/planner/planners/test_planner_rounds \
	tests/planner/planners/test_route_tree \
	tests/planner/planners/test_route_fast
check_PROGRAMS += $(PLANNERS_TESTS)
TESTS += $(PLANNERS_TESTS)
tests_planner_planners_test_planners_SOURCES = tests/planner/planners/test_planners.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planners_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planners_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_planner_input_SOURCES = tests/planner/planners/test_planner_input.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planner_input_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planner_input_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_planner_cases_SOURCES = tests/planner/planners/test_planner_cases.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planner_cases_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planner_cases_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_planner_ring_SOURCES = tests/planner/planners/test_planner_ring.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planner_ring_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planner_ring_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_planner_megatron_SOURCES = tests/planner/planners/test_planner_megatron.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planner_megatron_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planner_megatron_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_planner_rounds_SOURCES = tests/planner/planners/test_planner_rounds.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_planner_rounds_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS) \
	-DNSP_TEST_SRCDIR='"$(abs_top_srcdir)"'
tests_planner_planners_test_planner_rounds_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_route_tree_SOURCES = tests/planner/planners/test_route_tree.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_route_tree_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_route_tree_LDADD = $(PLANNERS_TEST_LDADD)
tests_planner_planners_test_route_fast_SOURCES = tests/planner/planners/test_route_fast.c \
	$(PLANNERS_TEST_COMMON)
tests_planner_planners_test_route_fast_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_route_fast_LDADD = $(PLANNERS_TEST_LDADD)

# Adding a planner takes one file and one table line (docs/design/extending.md):
# the dummy planner (one file) and planner_table.c with its line switched
# on (dummy_table.c), linked before the library so its table is this one.
check_PROGRAMS += tests/planner/planners/test_planner_dummy
TESTS += tests/planner/planners/test_planner_dummy
tests_planner_planners_test_planner_dummy_SOURCES = tests/planner/planners/test_planner_dummy.c \
	tests/planner/planners/dummy_planner.c tests/planner/planners/dummy_table.c
tests_planner_planners_test_planner_dummy_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_planner_dummy_LDADD = $(PLANNERS_TEST_LDADD)

# The MILP solvers this build has (milp_table.c), by name.
check_PROGRAMS += tests/planner/planners/test_milp_solvers
TESTS += tests/planner/planners/test_milp_solvers
tests_planner_planners_test_milp_solvers_SOURCES = tests/planner/planners/test_milp_solvers.c
tests_planner_planners_test_milp_solvers_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planner_planners_test_milp_solvers_LDADD = $(PLANNERS_TEST_LDADD)
