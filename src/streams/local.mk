# src/streams (see docs/design.md §3): per-level progress queues for pipelined
# levels (host), and one stream + event per level on a device through the
# device operations table (devops.h; its CUDA entry is in nccl.mk), which
# plugs into the same step model.
if NSP_COMM
libnspcomm_la_SOURCES += src/streams/levels.c src/streams/level_streams.c
noinst_HEADERS += src/streams/levels.h src/streams/level_streams.h src/streams/devops.h
endif
