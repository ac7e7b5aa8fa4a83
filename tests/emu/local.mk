# tests/emu: the emulated device (stream order, cross-stream waits, events,
# timed kernels, host functions, destroy with work pending, two devices in
# two threads, the trace, math mode, sticky errors) and its timing model
# against hand-computed values. No ranks, no network.
if NSP_COMM
check_PROGRAMS += tests/emu/test_emu_device tests/emu/test_emu_timing
TESTS += tests/emu/test_emu_device tests/emu/test_emu_timing
tests_emu_test_emu_device_SOURCES = tests/emu/test_emu_device.c
tests_emu_test_emu_device_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
tests_emu_test_emu_timing_SOURCES = tests/emu/test_emu_timing.c
tests_emu_test_emu_timing_LDADD = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la
endif
# Nested attention on the emulated device ("emu" memory type,
# NSPCOMM_DEVICE=emu:FILE): 2 and 4 real processes over UCX, math mode
# against the single-process reference, ordering and completion from the
# trace, a dropped peer, the refused FILEs.
if NSP_COMM
check_PROGRAMS += tests/emu/test_emu_attn
TESTS += tests/emu/test_emu_attn
tests_emu_test_emu_attn_SOURCES = tests/emu/test_emu_attn.c
tests_emu_test_emu_attn_LDADD = $(NATTN_TEST_LIBS)
endif
