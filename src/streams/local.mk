# src/streams (see docs/design.md §3): per-level progress queues for pipelined
# levels (host); the CUDA version (one stream + event per level) plugs into
# the same step model.
if NSP_COMM
libnspcomm_la_SOURCES += src/streams/levels.c
noinst_HEADERS += src/streams/levels.h
endif
