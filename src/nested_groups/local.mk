# src/nested_groups (docs/design.md §1, §4, §6): the nested tree of sub-communicators
# and the ring exchange on its levels.
# Its groups (group.c) carry every exchange: the all-to-all and the one ring step.
if NSP_COMM
libnspcomm_la_SOURCES += \
	src/nested_groups/tree_math.c \
	src/nested_groups/tree.c \
	src/nested_groups/group.c \
	src/nested_groups/ring.c
noinst_HEADERS += \
	src/nested_groups/tree.h \
	src/nested_groups/group.h
endif
