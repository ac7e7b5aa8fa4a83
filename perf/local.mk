# perf/: microbenchmarks and the cluster simulator
#
# perf/libnspperf: the frame every perf/ tool shares (perf/common.h:
# statistics, launching, tables, JSON that always parses) and the
# calibration measurements nsp_calibrate and the demo both make
# (perf/calib.h). A noinst convenience library, linked into those programs.
noinst_LTLIBRARIES += perf/libnspperf.la
perf_libnspperf_la_SOURCES = perf/common.c perf/common.h
if NSP_COMM
perf_libnspperf_la_SOURCES += perf/launch.c perf/calib.c perf/calib.h
endif
perf_libnspperf_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
perf_libnspperf_la_CFLAGS = $(AM_CFLAGS)

# Its TAP test: numbers that are not finite, escaping, the table's N/A,
# statistics; no ranks, no network.
check_PROGRAMS += tests/perf/test_perf_common
TESTS += tests/perf/test_perf_common
tests_perf_test_perf_common_SOURCES = tests/perf/test_perf_common.c
tests_perf_test_perf_common_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tests \
	-I$(top_srcdir)/tools
tests_perf_test_perf_common_LDADD = perf/libnspperf.la tests/libnsptest.la libnspcomm.la \
	libnspcomm_planner.la -lm
