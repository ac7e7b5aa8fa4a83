# tools/: what the tools, examples and tests share and libnspcomm does not
# export (a noinst convenience library, linked into those programs only):
#   nsp_opt    the checked option parser (every number, size, choice, path)
#   nsp_launch the fork launcher (tests/mp.c, examples/demo_launch.c, nsp_a2a_perf)
#   nc_enter   a forked rank enters its node of a namespace cluster (NSP_NETCLUSTER)
# It needs libnspcomm_planner (status and logging) beside it, and libnspcomm
# for nsp_launch_make_uid (a file of its own).
noinst_LTLIBRARIES += tools/libnsptools.la
tools_libnsptools_la_SOURCES = tools/nsp_opt.c tools/nsp_opt.h tools/nsp_launch.c tools/nsp_launch.h \
	tools/nsp_launch_uid.c tools/nc_enter.c tools/nc_enter.h
tools_libnsptools_la_CFLAGS = $(AM_CFLAGS)

# The bad-input and fault tests of the tools (docs/reliability.md).
TESTS += tests/tools/test_bad_input.sh tests/tools/test_faults.sh
dist_noinst_SCRIPTS += tests/tools/test_bad_input.sh tests/tools/test_faults.sh
# The launcher itself, with real processes (stopped, TERM-ignoring, timed-out
# ranks, a left segment, a failed make).
check_PROGRAMS += tests/tools/test_launch
TESTS += tests/tools/test_launch
tests_tools_test_launch_SOURCES = tests/tools/test_launch.c
tests_tools_test_launch_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_tools_test_launch_LDADD = tests/libnsptest.la libnspcomm_planner.la
