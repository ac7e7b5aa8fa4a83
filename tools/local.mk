# tools/: what the tools, the demo and the tests share and libnspcomm does
# not export (a noinst convenience library, linked into those programs
# only; the C example in examples/ uses none of it):
#   nsp_opt    the checked option parser (every number, size, choice, path)
#   nsp_launch the fork launcher (tests/mp.c, tools/demo/demo_launch.c, nsp_a2a_perf)
#   nc_enter   a forked rank enters its node of a namespace cluster (NSP_NETCLUSTER)
# It needs libnspcomm_planner (status and logging) beside it, and libnspcomm
# for nsp_launch_make_uid (a file of its own).
noinst_LTLIBRARIES += tools/libnsptools.la
tools_libnsptools_la_SOURCES = tools/nsp_opt.c tools/nsp_opt.h tools/nsp_launch.c tools/nsp_launch.h \
	tools/nsp_launch_uid.c tools/nc_enter.c tools/nc_enter.h
tools_libnsptools_la_CFLAGS = $(AM_CFLAGS)
# Its tests: tests/tools/local.mk; the demo (tools/demo/): tools/demo/local.mk.
