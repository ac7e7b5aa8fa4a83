# src/attn_sp (see docs/design.md §3): layouts, host pack/unpack, the nested
# variable-length all-to-all (one engine-neutral handle, the host engine
# with its mapped sources, the device engine) and the registry of memory
# types. The attention files are in attention.mk, the CUDA ones in
# src/transport/nccl.mk.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/attn_sp/layout.c \
	src/attn_sp/pack.c \
	src/attn_sp/copy_rows.c \
	src/attn_sp/pack_host_ops.c \
	src/attn_sp/a2a_bytes.c \
	src/attn_sp/nested_a2a_common.c \
	src/attn_sp/nested_a2a_handle.c \
	src/attn_sp/nested_a2a_host.c \
	src/attn_sp/nested_a2a_mapped.c \
	src/attn_sp/nested_a2a_device.c \
	src/attn_sp/nested_a2a_api.c \
	src/attn_sp/memtype.c \
	src/attn_sp/memtype_host.c \
	src/attn_sp/memtype_emu.c
noinst_HEADERS += \
	src/attn_sp/a2a_bytes.h \
	src/attn_sp/copy_rows.h \
	src/attn_sp/layout.h \
	src/attn_sp/pack.h \
	src/attn_sp/pack_ops.h \
	src/attn_sp/replica_sum.h \
	src/attn_sp/memtype.h \
	src/attn_sp/memtype_emu.h \
	src/attn_sp/nested_a2a.h \
	src/attn_sp/nested_a2a_common.h \
	src/attn_sp/nested_a2a_engine.h \
	src/attn_sp/nested_a2a_mapped.h
endif
