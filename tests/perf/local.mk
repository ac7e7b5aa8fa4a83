# tests/perf: the tests of perf/'s frame and of nsp_a2a_perf.

# perf/libnspperf's TAP test: numbers that are not finite, escaping, the table's N/A,
# statistics; no ranks, no network.
check_PROGRAMS += tests/perf/test_perf_common
TESTS += tests/perf/test_perf_common
tests_perf_test_perf_common_SOURCES = tests/perf/test_perf_common.c
tests_perf_test_perf_common_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tests \
	-I$(top_srcdir)/tools
tests_perf_test_perf_common_LDADD = perf/libnspperf.la tests/libnsptest.la libnspcomm.la \
	libnspcomm_planner.la -lm

if NSP_COMM
# A method is one file and one table line (tests/perf/test_a2a_method.sh):
# nsp_a2a_perf built with tests/perf/a2a_dummy.c and a copy of the table
# that has one line more, X(a2a_method_dummy).
check_PROGRAMS += tests/perf/nsp_a2a_perf_dummy
tests_perf_nsp_a2a_perf_dummy_SOURCES = perf/nsp_a2a_perf.c tests/perf/a2a_dummy.c
nodist_tests_perf_nsp_a2a_perf_dummy_SOURCES = tests/perf/a2a_methods_dummy.c
tests_perf_nsp_a2a_perf_dummy_CPPFLAGS = $(perf_nsp_a2a_perf_CPPFLAGS)
tests_perf_nsp_a2a_perf_dummy_LDADD = $(perf_nsp_a2a_perf_LDADD)
CLEANFILES += tests/perf/a2a_methods_dummy.c
tests/perf/a2a_methods_dummy.c: $(top_srcdir)/perf/a2a_methods.c
	$(AM_V_GEN)$(MKDIR_P) tests/perf && \
	$(AWK) '{ print } /^#define A2A_METHOD_TABLE\(X\)/ { print "    X(a2a_method_dummy) \\" }' \
	    $(top_srcdir)/perf/a2a_methods.c > $@-t && mv $@-t $@

# The perf JSON parses strictly, and methods that cannot run are absent
# (tests/perf/test_a2a_json.sh); the registry (tests/perf/test_a2a_method.sh).
TESTS += tests/perf/test_a2a_json.sh tests/perf/test_a2a_method.sh
dist_noinst_SCRIPTS += tests/perf/test_a2a_json.sh tests/perf/test_a2a_method.sh
endif
