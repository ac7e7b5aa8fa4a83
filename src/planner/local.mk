# src/planner: pure C, no transport, no hwloc (DESIGN §3, §5).
libnspcomm_planner_la_SOURCES += \
	src/planner/cost.c \
	src/planner/presets.c \
	src/planner/plan.c \
	src/planner/evaluate.c
noinst_HEADERS += \
	src/planner/cost.h \
	src/planner/plan_internal.h
