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

# tests/comm/test_group: the tree's groups and their operations on forked ranks.
if NSP_COMM
check_PROGRAMS += tests/comm/test_group
TESTS += tests/comm/test_group
tests_comm_test_group_SOURCES = tests/comm/test_group.c $(COMM_TEST_SOURCES)
tests_comm_test_group_LDADD = $(COMM_TEST_LDADD)
endif

# tests/a2a/test_group_users: ring attention and the nested all-to-all take
# one and the same group of the tree, on a tree that has it and one that lacks it.
if NSP_COMM
check_PROGRAMS += tests/a2a/test_group_users
TESTS += tests/a2a/test_group_users
tests_a2a_test_group_users_SOURCES = tests/a2a/test_group_users.c
tests_a2a_test_group_users_LDADD = $(NATTN_TEST_LIBS)
endif
