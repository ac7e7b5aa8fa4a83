# src/topology (see docs/design.md §3): hwloc discovery of this host, host
# identities and rank placement, suggested level degrees; perf/nsp_topo.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/topology/place.c \
	src/topology/levels.c \
	src/topology/discover.c \
	src/topology/print.c
noinst_HEADERS += \
	src/topology/topology.h

# perf/nsp_topo: this host's (or an XML's) topology and suggested levels.
noinst_PROGRAMS += perf/nsp_topo
perf_nsp_topo_SOURCES = perf/nsp_topo.c
perf_nsp_topo_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
perf_nsp_topo_LDADD = tools/libnsptools.la libnspcomm.la libnspcomm_planner.la

TOPO_TEST_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la

check_PROGRAMS += tests/topology/test_place tests/topology/test_levels \
	tests/topology/test_discover
TESTS += tests/topology/test_place tests/topology/test_levels \
	tests/topology/test_discover tests/topology/test_nsp_topo.sh
tests_topology_test_place_SOURCES = tests/topology/test_place.c
tests_topology_test_place_LDADD = $(TOPO_TEST_LDADD)
tests_topology_test_levels_SOURCES = tests/topology/test_levels.c
tests_topology_test_levels_LDADD = $(TOPO_TEST_LDADD)
tests_topology_test_discover_SOURCES = tests/topology/test_discover.c
tests_topology_test_discover_LDADD = $(TOPO_TEST_LDADD)
tests_topology_test_discover_CPPFLAGS = $(AM_CPPFLAGS) \
	-DTOPO_FIXTURE_DIR='"$(abs_top_srcdir)/tests/topology"'
endif

# XML fixtures (and the script that wrote them) travel with the tests.
dist_noinst_DATA += \
	tests/topology/h100-2s-8gpu.xml \
	tests/topology/host-1s-nogpu.xml \
	tests/topology/pcie-2numa-4gpu.xml \
	tests/topology/bad-no-complete.xml \
	tests/topology/bad-not-xml.xml
dist_noinst_SCRIPTS += tests/topology/make_fixtures.py tests/topology/test_nsp_topo.sh
