# src/planner: pure C, no transport, no hwloc (docs/design.md §3, §5); its
# tests are registered in tests/planner/local.mk.
# The cost model, presets, plans, files, workloads, validation, plan JSON.
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

# The planners and nsp_plan_create (static, disjoint, nested, megatron; one
# entry each, listed in planner_table.c: docs/design/extending.md, "A planner").
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
# milp_table.c (docs/design/extending.md, "A MILP solver"). CBC's file is a
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
