# perf/nsp_rdv_perf: the TCP rendezvous alone (join, 3 allgathers, close).
if NSP_COMM
noinst_PROGRAMS += perf/nsp_rdv_perf
perf_nsp_rdv_perf_SOURCES = perf/nsp_rdv_perf.c
perf_nsp_rdv_perf_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/perf
perf_nsp_rdv_perf_LDADD = perf/libnspperf.la libnspcomm.la libnspcomm_planner.la -lm
endif
