# tools/demo: nsp_demo, the main demo (docs/guide/demo.md): nested SP attention on
# N local ranks over UCX, planned by static, disjoint and nested, checked and
# measured beside the cost model's prediction. What scripts/main-job.sh
# runs; it shares perf's calibration and tables (perf/libnspperf) and the
# tools' launcher and option parser. Its smoke test: tests/demo/local.mk.
if NSP_COMM
noinst_PROGRAMS += tools/nsp_demo
tools_nsp_demo_SOURCES = \
	tools/demo/nsp_demo.c \
	tools/demo/demo.h \
	tools/demo/demo_launch.c \
	tools/demo/demo_calib.c \
	tools/demo/demo_data.c \
	tools/demo/demo_rank.c \
	tools/demo/demo_report.c \
	tools/demo/demo_svg.c \
	perf/svg.c \
	perf/svg.h
tools_nsp_demo_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools \
	-DNSP_DEMO_DATADIR='"$(abs_top_srcdir)/data"'
tools_nsp_demo_LDADD = perf/libnspperf.la tools/libnsptools.la libnspcomm.la libnspcomm_planner.la -lm
endif
