# tests/gpu (docs/guide/gpu.md): what runs on any machine (the kernels' index
# maps against the host pack, the NCCL backend's registration and errors,
# ncclGetUniqueId) and what needs a GPU (the kernels against the host, the
# level streams, a one-rank NCCL tree); the latter print
# "1..0 # SKIP no CUDA device (...)" where there is none.
GPU_TEST_LIBS = tests/libnsptest.la libnspcomm.la libnspcomm_planner.la

check_PROGRAMS += tests/gpu/test_pack_map tests/gpu/test_nccl_backend
TESTS += tests/gpu/test_pack_map tests/gpu/test_nccl_backend
tests_gpu_test_pack_map_SOURCES = tests/gpu/test_pack_map.c tests/gpu/gpu_views.c \
	tests/gpu/gpu_views.h
tests_gpu_test_pack_map_LDADD = $(GPU_TEST_LIBS)
# The device reductions' element math and the memory tables, on the CPU.
check_PROGRAMS += tests/gpu/test_reduce_map
TESTS += tests/gpu/test_reduce_map
tests_gpu_test_reduce_map_SOURCES = tests/gpu/test_reduce_map.c
tests_gpu_test_reduce_map_LDADD = $(GPU_TEST_LIBS) -lm
tests_gpu_test_nccl_backend_SOURCES = tests/gpu/test_nccl_backend.c
tests_gpu_test_nccl_backend_CPPFLAGS = $(AM_CPPFLAGS)
tests_gpu_test_nccl_backend_LDADD = $(GPU_TEST_LIBS)
if NSP_CUDA
tests_gpu_test_nccl_backend_CPPFLAGS += $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
tests_gpu_test_nccl_backend_LDADD += $(CUDA_LIBS) $(NCCL_LIBS)

check_PROGRAMS += tests/gpu/test_pack_cuda tests/gpu/test_streams_cuda
TESTS += tests/gpu/test_pack_cuda tests/gpu/test_streams_cuda
tests_gpu_test_pack_cuda_SOURCES = tests/gpu/test_pack_cuda.c tests/gpu/gpu_views.c \
	tests/gpu/gpu_views.h
tests_gpu_test_pack_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_pack_cuda_LDADD = $(GPU_TEST_LIBS) $(CUDA_LIBS)
# Nested attention on device memory, one rank (GPU), and the reduction
# kernels against their host twins (GPU).
check_PROGRAMS += tests/gpu/test_nattn_cuda tests/gpu/test_reduce_cuda
TESTS += tests/gpu/test_nattn_cuda tests/gpu/test_reduce_cuda
tests_gpu_test_nattn_cuda_SOURCES = tests/gpu/test_nattn_cuda.c
tests_gpu_test_nattn_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_nattn_cuda_LDADD = tests/nested_attn/libnattntest.la $(GPU_TEST_LIBS) \
	$(CUDA_LIBS) -lm
tests_gpu_test_reduce_cuda_SOURCES = tests/gpu/test_reduce_cuda.c
tests_gpu_test_reduce_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_reduce_cuda_LDADD = $(GPU_TEST_LIBS) $(CUDA_LIBS) -lm
tests_gpu_test_streams_cuda_SOURCES = tests/gpu/test_streams_cuda.c
tests_gpu_test_streams_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_streams_cuda_LDADD = $(GPU_TEST_LIBS) $(CUDA_LIBS)
endif

# perf/gpu_check: the kernels on realistic shapes, bit-exact and timed.
dist_noinst_SCRIPTS += perf/gpu_check.sh perf/gpu_check_run.sh
GPU_CHECK_TARGETS = tests/gpu/test_pack_map tests/gpu/test_reduce_map \
	tests/gpu/test_nccl_backend
if NSP_CUDA
noinst_PROGRAMS += perf/gpu_check
perf_gpu_check_SOURCES = perf/gpu_check.c
perf_gpu_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools $(CUDA_CPPFLAGS)
perf_gpu_check_LDADD = tools/libnsptools.la libnspcomm.la libnspcomm_planner.la $(CUDA_LIBS)
GPU_CHECK_TARGETS += tests/gpu/test_pack_cuda tests/gpu/test_streams_cuda \
	tests/gpu/test_nattn_cuda tests/gpu/test_reduce_cuda perf/gpu_check
endif

# The GPU check (docs/guide/gpu.md) with this build: `make gpu-check` builds the
# GPU tests and perf/gpu_check, then runs them in order with a PASS/FAIL
# summary (perf/gpu_check_run.sh; exit 77, skip, where no GPU is usable).
# perf/gpu_check.sh configures a build tree for it on a bare checkout.
gpu-check-programs: $(GPU_CHECK_TARGETS)
gpu-check: gpu-check-programs
	$(SHELL) $(top_srcdir)/perf/gpu_check_run.sh $(abs_top_builddir) $(GPU_CHECK_FLAGS)
.PHONY: gpu-check gpu-check-programs
