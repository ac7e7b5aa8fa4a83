# tests/fuzz: libFuzzer harnesses over the parsers (run by tests/fuzz/run.sh
# with clang, in CI), and their corpora replayed by `make check` through
# the same harnesses built with the ordinary compiler.
FUZZ_REPLAY_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_ENTRY=fuzz_entry
check_PROGRAMS += tests/fuzz/json_replay tests/fuzz/plan_replay \
	tests/fuzz/model_cluster_replay tests/fuzz/workload_replay
TESTS += tests/fuzz/json_replay tests/fuzz/plan_replay \
	tests/fuzz/model_cluster_replay tests/fuzz/workload_replay
FUZZ_REPLAY_LDADD = tests/libnsptest.la libnspcomm_planner.la -lm
tests_fuzz_json_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_json.c tests/fuzz/fuzz.h
tests_fuzz_json_replay_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS) -DFUZZ_NAME='"json"'
tests_fuzz_json_replay_LDADD = $(FUZZ_REPLAY_LDADD)
tests_fuzz_plan_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_plan.c tests/fuzz/fuzz.h
tests_fuzz_plan_replay_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS) -DFUZZ_NAME='"plan"'
tests_fuzz_plan_replay_LDADD = $(FUZZ_REPLAY_LDADD)
tests_fuzz_model_cluster_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_model_cluster.c \
	tests/fuzz/fuzz.h
tests_fuzz_model_cluster_replay_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS) -DFUZZ_NAME='"model_cluster"'
tests_fuzz_model_cluster_replay_LDADD = $(FUZZ_REPLAY_LDADD)
tests_fuzz_workload_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_workload.c \
	tests/fuzz/fuzz.h
tests_fuzz_workload_replay_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS) -DFUZZ_NAME='"workload"'
tests_fuzz_workload_replay_LDADD = $(FUZZ_REPLAY_LDADD)
if NSP_COMM
check_PROGRAMS += tests/fuzz/rdv_replay
TESTS += tests/fuzz/rdv_replay
tests_fuzz_rdv_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_rdv.c tests/fuzz/fuzz.h
tests_fuzz_rdv_replay_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS) -DFUZZ_NAME='"rdv"'
tests_fuzz_rdv_replay_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
endif
EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/corpus tests/fuzz/make_rdv_seeds.py
