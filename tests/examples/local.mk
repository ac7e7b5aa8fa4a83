# tests/examples: the C example on 2 and 4 forked ranks, started through a
# launcher's environment (NSPCOMM_RANK, NSPCOMM_NRANKS, NSPCOMM_ROOT).
if NSP_COMM
check_PROGRAMS += tests/examples/test_examples
TESTS += tests/examples/test_examples
tests_examples_test_examples_SOURCES = tests/examples/test_examples.c
tests_examples_test_examples_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
endif
