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
