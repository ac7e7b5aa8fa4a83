# perf/nsp_sim: the cluster simulator (planner only: no UCX, hwloc, CUDA or NCCL).
# The default workload is found in the source tree (or $NSPCOMM_DATA_DIR).
noinst_PROGRAMS += perf/nsp_sim
perf_nsp_sim_SOURCES = perf/nsp_sim.c perf/sim_svg.c perf/sim_svg.h perf/svg.c perf/svg.h
perf_nsp_sim_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools \
	-DNSP_ABS_TOP_SRCDIR='"$(abs_top_srcdir)"'
perf_nsp_sim_LDADD = perf/libnspperf.la tools/libnsptools.la libnspcomm_planner.la -lm
