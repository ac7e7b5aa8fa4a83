# src/attn_sp: reference attention, ring attention math, nested attention
# (docs/design/attention.md). The host reference needs no UCX: it is a convenience
# library that libnspcomm absorbs, and that single-process tests link with
# the planner library alone (for nsp_error and the status strings).
noinst_LTLIBRARIES += libnspattn.la
libnspattn_la_SOURCES = \
	src/attn_sp/attn_ref.c \
	src/attn_sp/attn_bytes.c \
	src/attn_sp/attn_tile.c \
	src/attn_sp/attn_tile_geom.c \
	src/attn_sp/attn_tile_generic.c \
	src/attn_sp/attn_tile_avx2.c \
	src/attn_sp/attn_ring_math.c \
	src/attn_sp/attn_reduce.c
libnspattn_la_LIBADD = -lm
noinst_HEADERS += \
	src/attn_sp/attn_ref.h \
	src/attn_sp/attn_reduce.h \
	src/attn_sp/attn_reduce_map.h \
	src/attn_sp/attn_tile.h \
	src/attn_sp/attn_tile_impl.h \
	src/attn_sp/attn_ring_math.h
if NSP_COMM
libnspcomm_la_LIBADD += libnspattn.la
# Nested SP attention and ring levels (docs/reference/attention.md): they drive
# the nested all-to-all and the transport, so they live in libnspcomm.
libnspcomm_la_SOURCES += \
	src/attn_sp/nested_attn.c \
	src/attn_sp/ring_attn.c
noinst_HEADERS += \
	src/attn_sp/nested_attn.h \
	src/attn_sp/ring_attn.h
endif
