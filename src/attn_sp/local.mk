# src/attn_sp (see docs/design.md §3): layouts, host pack/unpack and the nested
# variable-length all-to-all. The attention files are in attention.mk.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/attn_sp/layout.c \
	src/attn_sp/pack.c \
	src/attn_sp/nested_a2a.c \
	src/attn_sp/a2a_bytes.c \
	src/attn_sp/nested_a2a_api.c
noinst_HEADERS += \
	src/attn_sp/a2a_bytes.h \
	src/attn_sp/layout.h \
	src/attn_sp/pack.h \
	src/attn_sp/nested_a2a.h \
	src/attn_sp/nested_a2a_common.h \
	src/attn_sp/nested_a2a_engine.h
endif
