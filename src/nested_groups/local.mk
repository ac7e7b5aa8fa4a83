# src/nested_groups (docs/design.md §1, §4, §6): the nested tree of sub-communicators
# and the ring exchange on its levels.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/nested_groups/tree_math.c \
	src/nested_groups/tree.c \
	src/nested_groups/ring.c
noinst_HEADERS += \
	src/nested_groups/tree.h
endif
