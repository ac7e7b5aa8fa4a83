# tests/netcluster: multi-node tests on a namespace cluster made by
# scripts/netcluster.sh (needs root; skips with the reason otherwise). The
# driver reuses the multi-rank test programs of tests/a2a, tests/comm and
# tests/nested_attn, so it needs them built.
if NSP_COMM
check_PROGRAMS += tests/netcluster/test_nc_world
TESTS += tests/netcluster/test_netcluster.sh tests/netcluster/test_calibrate.sh
tests_netcluster_test_nc_world_SOURCES = tests/netcluster/test_nc_world.c
tests_netcluster_test_nc_world_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
dist_noinst_SCRIPTS += tests/netcluster/test_netcluster.sh tests/netcluster/test_calibrate.sh \
	tests/netcluster/check_cluster.py
endif
