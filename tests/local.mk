# tests/: the TAP helper library shared by every test program.
check_LTLIBRARIES += tests/libnsptest.la
tests_libnsptest_la_SOURCES = tests/tap.c tests/tap.h tests/mp.c tests/mp.h tests/mp_uid.c \
	perf/nc_enter.c perf/nc_enter.h
tests_libnsptest_la_CFLAGS = $(AM_CFLAGS)
# Its shell counterpart, sourced by the tests/*/test_*.sh scripts.
EXTRA_DIST += tests/tap.sh

# Status strings and logging.
check_PROGRAMS += tests/test_status
TESTS += tests/test_status
tests_test_status_SOURCES = tests/test_status.c
tests_test_status_LDADD = tests/libnsptest.la libnspcomm_planner.la
