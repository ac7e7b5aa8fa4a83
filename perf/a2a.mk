# perf/nsp_a2a_perf: nested all-to-all microbenchmark (nccl-tests style), with
# MPI_Alltoallv side by side when Open MPI is found (NSP_MPI).
#
# perf/libnspa2a: its frame and its methods, each method a file registered
# by one line of the table perf/a2a_methods.c (docs/design/extending.md, "A perf
# method"); the program is the table, main and this library.
if NSP_COMM
noinst_LTLIBRARIES += perf/libnspa2a.la
perf_libnspa2a_la_SOURCES = perf/a2a_perf.h perf/a2a_harness.h perf/a2a_run.c perf/a2a_output.c \
	perf/a2a_data.c perf/a2a_plans.c \
	perf/a2a_nested.c perf/a2a_levels.c perf/a2a_tp.c perf/a2a_mpi.c
perf_libnspa2a_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools
perf_libnspa2a_la_CFLAGS = $(AM_CFLAGS)
noinst_PROGRAMS += perf/nsp_a2a_perf
perf_nsp_a2a_perf_SOURCES = perf/nsp_a2a_perf.c perf/a2a_methods.c
perf_nsp_a2a_perf_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools -DNSP_DATADIR='"$(abs_top_srcdir)/data"'
perf_nsp_a2a_perf_LDADD = perf/libnspa2a.la perf/libnspperf.la tools/libnsptools.la libnspcomm.la \
	libnspcomm_planner.la -lm
if NSP_MPI
perf_libnspa2a_la_CPPFLAGS += $(MPI_CFLAGS)
perf_nsp_a2a_perf_CPPFLAGS += $(MPI_CFLAGS)
perf_nsp_a2a_perf_LDADD += $(MPI_LIBS)
endif

endif
dist_noinst_SCRIPTS += perf/a2a_compare.sh perf/a2a_profile.sh perf/a2a_profile.py

# perf/nsp_calibrate: measure a world, write the cluster file (docs/reference/calibration.md).
if NSP_COMM
noinst_PROGRAMS += perf/nsp_calibrate
perf_nsp_calibrate_SOURCES = perf/nsp_calibrate.c
perf_nsp_calibrate_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf -I$(top_srcdir)/tools
perf_nsp_calibrate_LDADD = perf/libnspperf.la tools/libnsptools.la libnspcomm.la libnspcomm_planner.la -lm
endif
