# perf/nsp_plan_perf: planning time alone (planner only: no UCX, hwloc, CUDA or NCCL).
noinst_PROGRAMS += perf/nsp_plan_perf
perf_nsp_plan_perf_SOURCES = perf/nsp_plan_perf.c
perf_nsp_plan_perf_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools -DNSP_ABS_TOP_SRCDIR='"$(abs_top_srcdir)"'
perf_nsp_plan_perf_LDADD = perf/libnspperf.la tools/libnsptools.la libnspcomm_planner.la -lm
