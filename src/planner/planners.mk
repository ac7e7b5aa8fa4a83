# src/planner: the planners and nsp_plan_create (static, disjoint, nested, megatron)
libnspcomm_planner_la_SOURCES += \
	src/planner/planner.c \
	src/planner/planner_table.c \
	src/planner/planner_params.c \
	src/planner/seq_cost.c \
	src/planner/assign.c \
	src/planner/static.c \
	src/planner/route.c \
	src/planner/route_tree.c \
	src/planner/route_fill.c \
	src/planner/nested.c \
	src/planner/disjoint.c \
	src/planner/dj_round.c \
	src/planner/megatron.c
noinst_HEADERS += \
	src/planner/planners.h \
	src/planner/route.h \
	src/planner/route_internal.h \
	src/planner/disjoint.h

# The disjoint planner's MILP (dj_milp*.c) on a generic row-form MILP
# (milp.c) and the solvers configure found, one file each, listed in
# milp_table.c (docs/extending.md, "A MILP solver"). CBC's file is a
# convenience library of its own, so only it sees CBC's include path.
libnspcomm_planner_la_SOURCES += \
	src/planner/dj_milp.c \
	src/planner/dj_milp_model.c \
	src/planner/dj_milp_map.c \
	src/planner/milp.c \
	src/planner/milp_table.c
noinst_HEADERS += src/planner/dj_milp.h src/planner/milp.h
if NSP_CBC
noinst_LTLIBRARIES += src/planner/libnsp_milp_cbc.la
src_planner_libnsp_milp_cbc_la_SOURCES = src/planner/milp_cbc.c
src_planner_libnsp_milp_cbc_la_CPPFLAGS = $(AM_CPPFLAGS) $(CBC_CFLAGS)
libnspcomm_planner_la_LIBADD += src/planner/libnsp_milp_cbc.la $(CBC_LIBS)
endif
if NSP_GLPK
libnspcomm_planner_la_SOURCES += src/planner/milp_glpk.c
libnspcomm_planner_la_LIBADD += $(GLPK_LIBS)
endif
EXTRA_DIST += src/planner/milp_cbc.c src/planner/milp_glpk.c

# ---------------------------------------------------------------------------
# Tests of the planners (tests/planners/): invariants over random batches,
# bad input, and targeted cases.
# ---------------------------------------------------------------------------
PLANNERS_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/tools
PLANNERS_TEST_LDADD = tests/libnsptest.la libnspcomm_planner.la -lm
PLANNERS_TESTS = \
	tests/planners/test_planners \
	tests/planners/test_planner_input \
	tests/planners/test_planner_cases \
	tests/planners/test_planner_ring \
	tests/planners/test_planner_megatron \
	tests/planners/test_planner_rounds \
	tests/planners/test_route_tree \
	tests/planners/test_route_fast
check_PROGRAMS += $(PLANNERS_TESTS)
TESTS += $(PLANNERS_TESTS)
tests_planners_test_planners_SOURCES = tests/planners/test_planners.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planners_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_planners_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_planner_input_SOURCES = tests/planners/test_planner_input.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planner_input_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_planner_input_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_planner_cases_SOURCES = tests/planners/test_planner_cases.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planner_cases_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_planner_cases_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_planner_ring_SOURCES = tests/planners/test_planner_ring.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planner_ring_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_planner_ring_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_planner_megatron_SOURCES = tests/planners/test_planner_megatron.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planner_megatron_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_planner_megatron_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_planner_rounds_SOURCES = tests/planners/test_planner_rounds.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_planner_rounds_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS) \
	-DNSP_TEST_SRCDIR='"$(abs_top_srcdir)"'
tests_planners_test_planner_rounds_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_route_tree_SOURCES = tests/planners/test_route_tree.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_route_tree_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_route_tree_LDADD = $(PLANNERS_TEST_LDADD)
tests_planners_test_route_fast_SOURCES = tests/planners/test_route_fast.c \
	tests/planners/check.c tests/planners/check.h
tests_planners_test_route_fast_CPPFLAGS = $(PLANNERS_TEST_CPPFLAGS)
tests_planners_test_route_fast_LDADD = $(PLANNERS_TEST_LDADD)
