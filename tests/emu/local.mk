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
