# GPU parts of nspcomm (docs/guide/gpu.md): the NCCL backend, the CUDA pack/unpack
# kernels, the CUDA device operations, the CUDA memory type (the device
# engine of the nested all-to-all on it), and their tests (tests/gpu/).
# Included by the top Makefile.am.
#
# nvcc compiles the .cu files through scripts/nvcc-wrapper, which turns the
# PIC flags libtool adds ("-fPIC -DPIC") into what nvcc accepts. The target
# GPUs are NSP_NVCC_ARCH (override: make NSP_NVCC_ARCH='-arch=sm_90'). Host
# compiler flags use nvcc's --compiler-options= form: libtool would eat a
# separate -Xcompiler.
SUFFIXES = .cu
NSP_NVCC_ARCH = -gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NSP_NVCC_FLAGS = -std=c++17 -O3 $(NSP_NVCC_ARCH) \
	--compiler-options=-fno-exceptions,-fno-threadsafe-statics,-fno-rtti,-fvisibility=hidden,-Wall \
	-Werror all-warnings
NSP_NVCC_COMPILE = $(SHELL) $(top_srcdir)/scripts/nvcc-wrapper $(NVCC) $(NSP_NVCC_FLAGS) \
	$(DEFS) $(DEFAULT_INCLUDES) $(INCLUDES) $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =

.cu.lo:
	@$(MKDIR_P) $(@D)
	$(AM_V_NVCC)$(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
		--mode=compile $(NSP_NVCC_COMPILE) -c -o $@ $<

EXTRA_DIST += scripts/nvcc-wrapper

if NSP_COMM
# Pure index maps of the kernels: built everywhere, so their tests run on
# any machine.
libnspcomm_la_SOURCES += src/attn_sp/pack_map.c src/attn_sp/attn_reduce_emul.c
# nsp_comm_from_nccl(): the real one with NCCL, a "how to build it" error
# without.
libnspcomm_la_SOURCES += src/transport/nccl_comm.c
noinst_HEADERS += \
	src/attn_sp/pack_map.h \
	src/attn_sp/attn_mem.h \
	src/attn_sp/attn_reduce_cuda.h \
	src/attn_sp/attn_reduce_kernels.h \
	src/attn_sp/pack_cuda.h \
	src/attn_sp/pack_cuda_kernels.h \
	src/streams/cuda_util.h \
	src/transport/nccl.h
EXTRA_DIST += src/attn_sp/pack_cuda_kernels.cu src/attn_sp/attn_reduce_kernels.cu

if NSP_CUDA
libnspcomm_la_SOURCES += \
	src/streams/cuda_util.c \
	src/streams/devops_cuda.c \
	src/attn_sp/pack_cuda.c \
	src/attn_sp/pack_cuda_kernels.cu \
	src/attn_sp/memtype_cuda.c \
	src/attn_sp/attn_reduce_kernels.cu \
	src/attn_sp/attn_reduce_cuda.c
endif
if NSP_CUDA
# No dependency tracking for .cu: name the headers the kernels include.
src/attn_sp/pack_cuda_kernels.lo: $(srcdir)/src/attn_sp/pack_map.h \
	$(srcdir)/src/attn_sp/pack_cuda_kernels.h
src/attn_sp/attn_reduce_kernels.lo: $(srcdir)/src/attn_sp/attn_reduce_map.h \
	$(srcdir)/src/attn_sp/attn_reduce_kernels.h
endif

if NSP_NCCL
libnspcomm_la_SOURCES += src/transport/nccl.c
endif

endif
