# src/topology (see docs/design.md §3): hwloc discovery of this host, host
# identities and rank placement, suggested level degrees. Its tests are
# registered in tests/topology/local.mk, perf/nsp_topo in perf/topo.mk.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/topology/place.c \
	src/topology/suggest_levels.c \
	src/topology/discover.c \
	src/topology/print.c
noinst_HEADERS += \
	src/topology/topology.h
endif
