# examples/: the C example (nested_alltoall.c), compiled against the public
# header alone (-I include, nothing of src/) and linked with the installed
# library, which exports nothing else: what a user's program sees.
# tests/examples runs it on forked ranks; tests/test_structure.sh checks
# that no example includes more than nspcomm.h and system headers.
# examples/torch/ is the PyTorch training example (docs/guide/pytorch.md).
if NSP_COMM
noinst_PROGRAMS += examples/nested_alltoall
examples_nested_alltoall_SOURCES = examples/nested_alltoall.c
examples_nested_alltoall_CPPFLAGS = -I$(top_srcdir)/include
examples_nested_alltoall_LDADD = lib/libnspcomm.la
endif
