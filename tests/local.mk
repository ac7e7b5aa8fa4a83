# tests/: the TAP helper library shared by every test program.
check_LTLIBRARIES += tests/libnsptest.la
tests_libnsptest_la_SOURCES = tests/tap.c tests/tap.h tests/mp.c tests/mp.h tests/mp_uid.c
tests_libnsptest_la_CFLAGS = $(AM_CFLAGS)
# Its launcher is the tools' one (tools/nsp_launch.h).
tests_libnsptest_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_libnsptest_la_LIBADD = tools/libnsptools.la
# Its shell counterpart, sourced by the tests/*/test_*.sh scripts.
EXTRA_DIST += tests/tap.sh

# Status strings and logging.
check_PROGRAMS += tests/test_status
TESTS += tests/test_status
tests_test_status_SOURCES = tests/test_status.c
tests_test_status_LDADD = tests/libnsptest.la libnspcomm_planner.la

# The libraries export exactly what include/nspcomm.h declares (nm -D).
TESTS += tests/test_exports.sh
dist_noinst_SCRIPTS += tests/test_exports.sh

# The structure of src/: no call cycles between objects, function lengths.
TESTS += tests/test_structure.sh
dist_noinst_SCRIPTS += tests/test_structure.sh

# The Python package (python/) and its torch op: pytest, one TAP line per
# test (tests/python/test_python.sh; skips with a reason without torch).
TESTS += tests/python/test_python.sh
# The training run, short (4 ranks, 2 steps per planner; tests/python/test_train.sh).
TESTS += tests/python/test_train.sh
# The Hugging Face example, short (2 ranks, 2 steps; tests/python/test_hf.sh).
TESTS += tests/python/test_hf.sh
EXTRA_DIST += tests/python python examples/torch examples/hf perf/torch_ulysses_compare.py \
	perf/gpu_check_torch.py perf/torch_wire_bytes.py

# Version and ABI checks for bindings, planner kinds by name.
check_PROGRAMS += tests/test_version
TESTS += tests/test_version
tests_test_version_SOURCES = tests/test_version.c
tests_test_version_LDADD = tests/libnsptest.la libnspcomm_planner.la
