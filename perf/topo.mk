# perf/nsp_topo: this host's (or an XML's) topology and suggested levels.
if NSP_COMM
noinst_PROGRAMS += perf/nsp_topo
perf_nsp_topo_SOURCES = perf/nsp_topo.c
perf_nsp_topo_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
perf_nsp_topo_LDADD = tools/libnsptools.la libnspcomm.la libnspcomm_planner.la
endif
