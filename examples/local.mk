# examples/: the main demo and small usage examples.
#
# examples/nsp_demo (docs/demo.md): nested SP attention on N local ranks over
# UCX, planned by static, disjoint and nested, checked and measured beside the
# cost model's prediction. What scripts/main-job.sh runs.
if NSP_COMM
noinst_PROGRAMS += examples/nsp_demo
examples_nsp_demo_SOURCES = \
	examples/nsp_demo.c \
	examples/demo.h \
	examples/demo_launch.c \
	examples/demo_calib.c \
	examples/demo_data.c \
	examples/demo_rank.c \
	examples/demo_report.c \
	examples/demo_svg.c \
	perf/svg.c \
	perf/svg.h
examples_nsp_demo_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools \
	-DNSP_DEMO_DATADIR='"$(abs_top_srcdir)/data"'
examples_nsp_demo_LDADD = perf/libnspperf.la tools/libnsptools.la libnspcomm.la libnspcomm_planner.la -lm

# A fast smoke test of the demo (TAP): 3 ranks, tiny sizes.
TESTS += tests/demo/test_demo.sh
dist_noinst_SCRIPTS += tests/demo/test_demo.sh tests/demo/check_demo_json.py
endif
