# tests/tools: the tools' answers to bad input and faults (docs/design/reliability.md).
TESTS += tests/tools/test_bad_input.sh tests/tools/test_faults.sh
dist_noinst_SCRIPTS += tests/tools/test_bad_input.sh tests/tools/test_faults.sh
# The launcher itself, with real processes (stopped, TERM-ignoring, timed-out
# ranks, a left segment, a failed make).
check_PROGRAMS += tests/tools/test_launch
TESTS += tests/tools/test_launch
tests_tools_test_launch_SOURCES = tests/tools/test_launch.c
tests_tools_test_launch_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_tools_test_launch_LDADD = tests/libnsptest.la libnspcomm_planner.la
