"""The constants of include/nspcomm.h the bindings use, under the header's own
names: status codes, enums, field-mask bits, plan flags, sizes.

One copy, kept by hand; tests/python/test_abi.py compiles a probe against
the header with a C compiler and fails when any value here differs from
the compiler's, when a name here is not in the header, or when the header
has a member of one of these families (status codes, NSP_*_FIELD_*,
NSP_PLAN_FLAG_*, dtypes, directions, planner kinds) that is missing here.
"""

# ---- version (section 1) ----------------------------------------------------
NSP_VERSION_MAJOR = 0
NSP_VERSION_MINOR = 1

# ---- status codes (NSP_STATUS_MAP) --------------------------------------------
NSP_OK = 0
NSP_INPROGRESS = 1
NSP_ERR_INVALID_ARG = -1
NSP_ERR_NO_MEMORY = -2
NSP_ERR_IO = -3
NSP_ERR_PARSE = -4
NSP_ERR_NOT_FOUND = -5
NSP_ERR_INFEASIBLE = -6
NSP_ERR_UNSUPPORTED = -7
NSP_ERR_TIMEOUT = -8
NSP_ERR_PEER_FAILED = -9
NSP_ERR_MISMATCH = -10
NSP_ERR_BACKEND = -11
NSP_ERR_INTERNAL = -12

STATUS_NAMES = {v: k for k, v in dict(globals()).items()
                if k == "NSP_OK" or k == "NSP_INPROGRESS" or k.startswith("NSP_ERR_")}

# ---- plans and the planner (section 3) ------------------------------------------
NSP_PLAN_FLAG_GREEDY_FALLBACK = 1 << 0
NSP_PLAN_FLAG_SOLVER_TIMEOUT = 1 << 1
NSP_PLAN_FLAG_RING = 1 << 2

NSP_PLANNER_STATIC = 0
NSP_PLANNER_DISJOINT = 1
NSP_PLANNER_NESTED = 2
NSP_PLANNER_MEGATRON = 3

NSP_PLANNER_FIELD_STATIC_DEGREE = 1 << 0
NSP_PLANNER_FIELD_STATIC_RECOMPUTE = 1 << 1
NSP_PLANNER_FIELD_TIME_LIMIT = 1 << 2
NSP_PLANNER_FIELD_LEVEL_DEGREES = 1 << 3
NSP_PLANNER_FIELD_MAX_ROUNDS = 1 << 4
NSP_PLANNER_FIELD_ENABLE_RING = 1 << 5
NSP_PLANNER_FIELD_MAX_SEQLEN = 1 << 6

# ---- communicators ------------------------------------------------------------
NSP_UNIQUE_ID_BYTES = 128
NSP_CONFIG_MAGIC = 0x4E535043  # "NSPC"
NSP_TREE_MAX_LEVELS = 32

# ---- the nested all-to-all ---------------------------------------------------
NSP_A2A_SEQ_TO_HEAD = 0
NSP_A2A_HEAD_TO_SEQ = 1

NSP_A2A_REPLICAS_FIRST = 0
NSP_A2A_REPLICAS_SUM_F32 = 1
NSP_A2A_REPLICAS_SUM_BF16 = 2
NSP_A2A_REPLICAS_SUM_FP16 = 3

NSP_A2A_FIELD_STREAM = 1 << 0
NSP_A2A_FIELD_REPLICAS = 1 << 1
NSP_A2A_FIELD_SERIAL = 1 << 2
NSP_A2A_FIELD_CHECK = 1 << 3
NSP_A2A_FIELD_MAPPED = 1 << 4
NSP_A2A_FIELD_BYTES = 1 << 5

# ---- attention -----------------------------------------------------------------
NSP_ATTN_FIELD_BYTES = 1 << 0

NSP_ATTN_FP32 = 0
NSP_ATTN_BF16 = 1
NSP_ATTN_FP16 = 2

NSP_NESTED_ATTN_FIELD_KERNEL = 1 << 0
NSP_NESTED_ATTN_FIELD_DTYPE = 1 << 1
NSP_NESTED_ATTN_FIELD_SERIAL = 1 << 2
NSP_NESTED_ATTN_FIELD_CHECK = 1 << 3
NSP_NESTED_ATTN_FIELD_SLICES = 1 << 4
NSP_NESTED_ATTN_FIELD_DKV_F32 = 1 << 5


def header_constants():
    """{name: value} of every constant above (what test_abi.py checks)."""
    return {k: v for k, v in globals().items() if k.startswith("NSP_") and isinstance(v, int)}
