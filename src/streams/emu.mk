# src/streams: the emulated accelerator (streams and events on host threads,
# docs/design/emulated-device.md) and the timing model of its kernels.
if NSP_COMM
libnspcomm_la_SOURCES += src/streams/emu_core.c src/streams/emu_device.c \
	src/streams/emu_enqueue.c src/streams/emu_timing.c \
	src/streams/emu_config.c src/streams/devops_emu.c
noinst_HEADERS += src/streams/emu_device.h src/streams/emu_internal.h \
	src/streams/emu_timing.h src/streams/emu_config.h
endif
