# tests/topology: placement of ranks on hosts, the suggested level degrees,
# discovery from hwloc XML fixtures, perf/nsp_topo end to end.
if NSP_COMM
TOPO_TEST_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la

check_PROGRAMS += tests/topology/test_place tests/topology/test_suggest_levels \
	tests/topology/test_discover
TESTS += tests/topology/test_place tests/topology/test_suggest_levels \
	tests/topology/test_discover tests/topology/test_nsp_topo.sh
tests_topology_test_place_SOURCES = tests/topology/test_place.c
tests_topology_test_place_LDADD = $(TOPO_TEST_LDADD)
tests_topology_test_suggest_levels_SOURCES = tests/topology/test_suggest_levels.c
tests_topology_test_suggest_levels_LDADD = $(TOPO_TEST_LDADD)
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
