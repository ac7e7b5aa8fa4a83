"""Tests of the nspcomm Python package and its torch op (pytest; run by
tests/python/test_python.sh under make check).

Multi-rank tests start real processes with a torchrun-style environment on
loopback (mp.run) and compare every rank's outputs and gradients with a
float64 single-process reference (refs.py). Tolerances, relative to the
largest |reference| of the tensor (lse: to max(1, |lse|); others floored at 0.1, as a one-token sequence has dq = 0):
  float32: 2e-5 (measured: under 1e-6)
  bfloat16 (inputs rounded to bf16; reference exact on those inputs): 1.5e-2
  (measured: under 8e-3; one rounding of every output to bf16 is 2^-9),
  with ring levels and replicated KV heads exchanged in bfloat16 too
  float16 (likewise): 2e-3 (measured: under 9e-4; fp16 has 3 more mantissa
  bits than bf16, one rounding is 2^-12), exchanged in float16 likewise
"""

import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mp  # noqa: E402
import plans  # noqa: E402

torch = pytest.importorskip("torch")
import nspcomm  # noqa: E402

TOL = {"float32": 2e-5, "bfloat16": 1.5e-2, "float16": 2e-3}
ATTN = {"nq": 8, "nkv": 2, "D": 16}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def check_errors(results, dtypes):
    worst = {}
    for r, res in enumerate(results):
        assert "raised" not in res and "exit" not in res, "rank %d: %s" % (r, res)
        for key, e in res.items():
            if "/" in key:
                dt = key.split("/")[0]
                worst[key] = max(worst.get(key, 0.0), e)
                assert e <= TOL[dt], "rank %d %s error %.3g > %.3g" % (r, key, e, TOL[dt])
    for dt in dtypes:
        assert any(k.startswith(dt) for k in worst), "no %s result" % dt
    print("worst errors:", json.dumps({k: float("%.3g" % v) for k, v in worst.items()}))
    return worst


# ---- loading, version, ABI ------------------------------------------------

def test_library_loads_and_reports_version():
    nspcomm.lib()
    assert nspcomm.library_version().startswith("0.1.")
    assert os.path.exists(nspcomm.library_path())


def run_py(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120)


def test_abi_mismatch_is_a_clear_error():
    code = """
import ctypes, nspcomm._lib as L
class Bigger(ctypes.Structure):
    _fields_ = L.PlanC._fields_ + [("extra", ctypes.c_int)]
L.MIRRORS["nsp_plan_t"] = Bigger
try:
    L.lib()
except L.NspLibraryError as e:
    print("ERR", e)
"""
    out = run_py(code).stdout
    assert "ERR" in out and "nsp_plan_t" in out and "does not match" in out, out


def test_bad_nspcomm_lib_path_is_a_clear_error():
    out = run_py("import nspcomm\ntry:\n    nspcomm.lib()\nexcept nspcomm.NspLibraryError as e:"
                 "\n    print('ERR', e)", {"NSPCOMM_LIB": "/nonexistent/libnspcomm.so"}).stdout
    assert "ERR libnspcomm not found" in out and "/nonexistent/libnspcomm.so" in out, out


def test_errors_carry_the_library_message():
    with pytest.raises(nspcomm.NspError) as e:
        nspcomm.Planner("no-such-model", "h100", 8)
    assert e.value.name == "NSP_ERR_NOT_FOUND" and "no-such-model" in str(e.value)
    with pytest.raises(nspcomm.NspError) as e:
        nspcomm.Planner("llama3-8b", "h100", 8).plan([100, 200], kind="bogus")
    assert "unknown planner 'bogus'" in str(e.value) and "nested" in str(e.value)


# ---- planner ------------------------------------------------------------

def test_planner_presets_dicts_files(tmp_path):
    lens = [9000, 3000, 700, 120, 50] * 3
    a = nspcomm.Planner("llama3-8b", "h100", 8)
    b = nspcomm.Planner(plans.MODEL, plans.cluster(8))
    path = write(tmp_path, "m.json", json.dumps(plans.MODEL))
    c = nspcomm.Planner(path, plans.cluster(8))
    assert b.model.q_heads == c.model.q_heads == 8 and a.ranks == b.ranks == 8
    for kind in ("nested", "static", "disjoint"):
        p = b.plan(lens, kind=kind, time_limit_s=0.3)
        assert p.planner == kind and p.nrounds >= 1 and p.predicted["step_s"] > 0
        held = sorted(s for rnd in p.rounds for g in rnd for s in g.seqs)
        assert held == list(range(len(lens)))
        q = nspcomm.Plan.from_json(p.to_json())
        assert isinstance(p.to_json(), bytes)
        assert [[(g.rank0, g.size, g.seqs, g.recompute) for g in r] for r in q.rounds] == \
               [[(g.rank0, g.size, g.seqs, g.recompute) for g in r] for r in p.rounds]
        assert q.predicted["step_s"] == pytest.approx(p.predicted["step_s"], rel=1e-12)
        q.validate()


def test_infeasible_batch_names_the_sequence():
    with pytest.raises(nspcomm.NspError) as e:
        nspcomm.Planner(plans.MODEL, dict(plans.cluster(2), mem_bytes=1e6)).plan([10 ** 7])
    assert e.value.name in ("NSP_ERR_INFEASIBLE", "NSP_ERR_INVALID_ARG")


# ---- layouts as tensors ---------------------------------------------------

def independent_layout(plan, rnd, rank):
    """token index, position ids and per-level cu_seqlens from the layout
    rules written out again (chunking, zigzag spans, level order)."""
    starts = [0]
    for n in plan.seq_lens:
        starts.append(starts[-1] + n)
    mine = [g for g in plan.rounds[rnd] if g.rank0 <= rank < g.rank0 + g.size]
    degrees = sorted({1} | {g.size for g in mine})
    idx, pos, cus = [], [], []

    def cut(n, d, i):
        return i * (n // d) + min(i, n % d), n // d + (1 if i < n % d else 0)

    for d in degrees:
        full = [0]
        for g in (g for g in mine if g.size == d):
            i = rank - g.rank0
            for s in g.seqs:
                L = plan.seq_lens[s]
                if g.ring == 1:
                    entries = [(0, L, d, i)]
                else:
                    u, R = d // g.ring, g.ring
                    j = i // u
                    entries = [cut(L, 2 * R, c) + (u, i % u) for c in (j, 2 * R - 1 - j)]
                for (s0, sl, u, ui) in entries:
                    c0, cl = cut(sl, u, ui)
                    idx += [starts[s] + s0 + c0 + t for t in range(cl)]
                    pos += [s0 + c0 + t for t in range(cl)]
                    full.append(full[-1] + sl)
        cus.append(full)
    return idx, pos, cus


@pytest.mark.parametrize("seed", range(12))
def test_layout_tensors_match_an_independent_computation(seed):
    ranks = [2, 4, 8][seed % 3]
    plan = nspcomm.Plan.from_json(plans.random_nested(ranks, 100 + seed, ring=seed % 2 == 1,
                                                      nrounds=2))
    for rnd in range(plan.nrounds):
        seen = []
        for rank in range(ranks):
            lay = nspcomm.Layout(plan, rnd, rank)
            idx, pos, cus = independent_layout(plan, rnd, rank)
            assert lay.token_index().tolist() == idx
            assert lay.position_ids().tolist() == pos
            assert [lay.cu_seqlens(lvl).tolist() for lvl in range(len(lay.levels))] == cus
            assert lay.token_index().dtype == torch.long
            seen += idx
        every = sorted(t for g in plan.rounds[rnd] for s in g.seqs
                       for t in range(sum(plan.seq_lens[:s]),
                                      sum(plan.seq_lens[:s]) + plan.seq_lens[s]))
        assert sorted(seen) == every  # every token of the round held exactly once


# ---- multi-process: the op against the reference ---------------------------

def hand_plan(ranks):
    """Degrees above n_kv = 2 (replicated KV), ring and Ulysses x ring
    groups, an empty level (no degree-2 group on some ranks), sequences
    shorter than their degree (empty chunks), two rounds."""
    rng = random.Random(ranks)
    lt = lambda n, hi: plans.long_tailed(rng, n, 1, hi)  # noqa: E731
    if ranks == 2:
        lens = lt(3, 150) + [1] + lt(4, 60) + lt(2, 200)
        rounds = [[(0, 2, [0, 1, 2, 3], 1), (0, 1, [4, 5], 1), (1, 1, [6, 7], 1)],
                  [(0, 2, [8, 9], 2)]]
    elif ranks == 4:
        lens = lt(2, 300) + [3] + lt(3, 80) + lt(2, 60) + lt(2, 300) + lt(3, 50) + lt(2, 50)
        rounds = [[(0, 4, [0, 1, 2], 1), (0, 2, [3, 4], 1), (2, 1, [5], 1), (3, 1, [6, 7], 1)],
                  [(0, 4, [8, 9], 4), (0, 1, [11], 1), (2, 2, [12], 1)],
                  [(0, 4, [10], 2), (1, 1, [13, 14], 1)]]
    else:
        lens = lt(2, 600) + [5] + lt(3, 200) + lt(4, 60) + lt(2, 600) + lt(2, 300) + lt(2, 40) + lt(1, 100)
        rounds = [[(0, 8, [0, 1, 2], 1), (0, 4, [3, 4], 1), (4, 2, [5], 1), (6, 1, [6, 7], 1),
                   (7, 1, [8, 9], 1)],
                  [(0, 8, [10, 11], 2), (0, 4, [13], 4), (4, 4, [14], 2), (5, 1, [15], 1)],
                  [(0, 8, [12], 8), (6, 2, [16], 1)]]
    return plans.plan_json(ranks, lens, rounds)


def dkv_plan(ranks):
    """Ulysses only, two rounds whose largest group spans every rank
    (degree 4 or 8 above n_kv = 2: every KV head on 2 or 4 ranks), beside
    level-0 and degree-2 groups."""
    lens = [300, 120, 45, 1, 77, 64, 33, 20, 9]
    rounds = [[(0, ranks, [0, 1, 2, 3], 1), (0, 1, [4], 1), (1, 1, [5], 1)],
              [(0, ranks, [6, 7], 1), (0, 2, [8], 1)]]
    return plans.plan_json(ranks, lens, rounds)


PLANNER_LENS = plans.long_tailed(random.Random(7), 30, 4, 700)
PLANNER_CLUSTER = dict(plans.cluster(4), mem_bytes=2e6, workspace_bytes=0)
PLANNER_MODEL = dict(plans.MODEL, params=1e4)
# NSPCOMM_TIMEOUT of the worlds: above the longest compute while a peer waits
# (the float64 reference of a rank, on a loaded 2-core machine).
KILL_TIMEOUT = 60


@functools.lru_cache(maxsize=None)
def suite(ranks):
    """One multi-process run per world size, every case in one world (each
    process imports torch once: ~3 s of CPU per rank on this machine). The
    2-rank world meets on NSPCOMM_PORT, the others on MASTER_PORT + 1."""
    tmp = tempfile.mkdtemp(prefix="nsp_suite_")
    def plan_file(name, text):  # noqa: E306
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path
    dtypes = ["float32", "bfloat16", "float16"]
    cases = [["hand", "attn", dict(ATTN, plan=plan_file("hand.json", hand_plan(ranks)),
                                   dtypes=dtypes, seed=ranks)]]
    seed, ring = {2: (1, False), 4: (2, True), 8: (3, True)}[ranks]
    cases.append(["random", "attn", dict(ATTN, dtypes=dtypes, seed=seed, slices=2, plan=plan_file(
        "random.json", plans.random_nested(ranks, seed, ring=ring, nrounds=2)))])
    env = None
    if ranks == 2:
        hp = plan_file("bad.json", hand_plan(2))
        cases += [["bad", "bad", dict(ATTN, plan=hp, bad_rank=1)], ["store", "store", {}]]
        env = {"NSPCOMM_PORT": str(mp.free_port())}
    if ranks in (4, 8):
        cases.append(["dkv", "dkv", dict(ATTN, seed=ranks, plan=plan_file(
            "dkv.json", dkv_plan(ranks)))])
    if ranks == 4:
        pl = nspcomm.Planner(PLANNER_MODEL, PLANNER_CLUSTER)
        for kind in ("static", "disjoint", "nested"):
            p = pl.plan(PLANNER_LENS, kind=kind, time_limit_s=0.3)
            cases.append([kind, "attn", dict(ATTN, dtypes=["float32"], seed=1, plan=plan_file(
                kind + ".json", p.to_json().decode()))])
        cases.append(["determinism", "determinism", {
            "model": plans.MODEL, "cluster": plans.cluster(4),
            "lens": plans.long_tailed(random.Random(3), 40, 4, 2000)}])
        cases.append(["kill", "kill", dict(ATTN, plan=plan_file("k.json", hand_plan(4)),
                                           victim=3)])
    t0 = time.time()
    res = mp.run(ranks, cases, timeout=600, env=env, nsp_timeout=KILL_TIMEOUT)
    print("%d ranks: %.1f s" % (ranks, time.time() - t0))
    return res


def part(ranks, name):
    out = []
    for r, res in enumerate(suite(ranks)):
        assert name in res, "rank %d has no result for %s: %s" % (r, name, str(res)[-2000:])
        out.append(res[name])
    return out


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_nested_attention_matches_single_process(ranks):
    """Hand-built plans: degrees above n_kv (replicated KV), ring and
    Ulysses x ring groups, empty levels, sequences shorter than their
    degree; float32, bfloat16 and float16; every rank, every round."""
    res = part(ranks, "hand")
    check_errors(res, ["float32", "bfloat16", "float16"])
    assert any(len(r["levels"]) > 1 for r in res)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_nested_attention_random_plans(ranks):
    check_errors(part(ranks, "random"), ["float32", "bfloat16", "float16"])


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_16_bit_on_the_wire_and_backward_from_the_saved_state(ranks):
    """The hand-built plans (ring and Ulysses x ring groups; degrees above
    n_kv = 2 at 4 and 8 ranks) in bfloat16 and float16: no float32
    fallback, so every round's forward sends at most 0.55 of float32's
    bytes (q, k, v, o in 16 bits, lse float32), and the backward fewer than
    float32's (dout, dq and the ring's KV blocks in 16 bits; replicated
    dK/dV and a ring's travelling dK/dV sums in float32: 0.6 of float32 for
    GQA 8/2 all-to-alls, 5/6 for a pure ring of 2); the two 16-bit dtypes
    send the same bytes; every backward started from the forward's saved
    state (nothing re-exchanged)."""
    for r, x in enumerate(part(ranks, "hand")):
        assert x["bwd_saved"], "rank %d: a backward re-exchanged q, k, v, o, lse" % r
        assert x["bytes"]["float16"] == x["bytes"]["bfloat16"], (r, x["bytes"])
        for rnd, (f32, b16) in enumerate(zip(x["bytes"]["float32"], x["bytes"]["bfloat16"])):
            assert b16[0] <= 0.55 * f32[0], "rank %d round %d forward: bf16 %d B, fp32 %d B" % (
                r, rnd, b16[0], f32[0])
            assert b16[1] < f32[1] or f32[1] == b16[1] == 0, (
                "rank %d round %d backward: bf16 %d B, fp32 %d B" % (r, rnd, b16[1], f32[1]))


@pytest.mark.parametrize("ranks", [4, 8])
def test_replicated_dkv_summed_on_the_wire_in_16_bits(ranks):
    """dK/dV of KV heads replicated on 2 (4 ranks) or 4 (8 ranks) ranks:
    by default a 16-bit backward sends exactly half of float32's bytes
    (every tensor, the replica sums included, 2 bytes wide), bfloat16 and
    float16 the same; with dkv_float32 the replicated dK/dV go in float32,
    more bytes. Both within the tolerance of the float64 reference; with 2
    replicas the two give the same dk and dv bits (one rounding either
    way)."""
    res = part(ranks, "dkv")
    check_errors(res, ["float32", "bfloat16", "float16"])
    for r, x in enumerate(res):
        b = x["bytes"]
        for rnd, (f32, b16, h16, w16) in enumerate(zip(b["float32"], b["bfloat16"],
                                                       b["float16"], b["bfloat16+dkv_f32"])):
            assert b16 == h16, (r, rnd, b16, h16)
            assert 2 * b16[1] == f32[1], (
                "rank %d round %d: bf16 backward %d B is not half of fp32's %d B" % (
                    r, rnd, b16[1], f32[1]))
            assert w16[0] == b16[0] and w16[1] >= b16[1], (r, rnd, w16, b16)
        assert any(w[1] > d[1] for w, d in zip(b["bfloat16+dkv_f32"], b["bfloat16"])), (
            "rank %d: dkv_float32 sent no more bytes in any round: %s" % (r, b))
        if ranks == 4:
            assert x["same_bits"] == {"bfloat16": True, "float16": True}, (r, x["same_bits"])
    total = {k: [sum(v[j] for x in res for v in x["bytes"][k]) for j in (0, 1)]
             for k in res[0]["bytes"]}
    print("bytes (fwd, bwd) summed over ranks and rounds:", json.dumps(total))


@pytest.mark.parametrize("kind", ["static", "disjoint", "nested"])
def test_nested_attention_planner_plans(kind):
    """Plans of the three planners on one long-tailed batch, 4 ranks, fp32."""
    check_errors(part(4, kind), ["float32"])


def test_bad_inputs_raise_on_every_rank_and_lose_nothing():
    res = part(2, "bad")
    want = {"shape": "ValueError", "dtype": "TypeError", "noncontig": "ValueError",
            "count": "ValueError", "float64": "TypeError", "other_plan": "NspError"}
    for r, out in enumerate(res):
        assert "raised" not in out, out
        for kind, cls in want.items():
            assert out[kind].startswith(cls), "rank %d, %s: %s" % (r, kind, out[kind])
            if r != 1 and kind != "other_plan":
                assert "rank 1" in out[kind], out[kind]
        assert out["after"] is True
    assert "[T_local" in res[1]["shape"] and "contiguous" in res[1]["noncontig"]
    assert "NSP_ERR_MISMATCH" in res[0]["other_plan"]


def test_killed_rank_raises_on_the_others_within_the_timeout():
    res = suite(4)
    assert res[3].get("exit") == 3, res[3]
    for r in range(3):
        out = res[r]["kill"]
        assert out["raised"] in ("NspTimeoutError", "NspError"), out
        assert "PEER_FAILED" in out["message"] or "TIMEOUT" in out["message"], out
        assert out["elapsed"] < KILL_TIMEOUT, out
    print("killed rank detected after %.2f s" % max(res[r]["kill"]["elapsed"] for r in range(3)))


def test_init_through_a_torch_store():
    for r, out in enumerate(part(2, "store")):
        assert out.get("rank") == r and out["size"] == 2, out
        assert out["gathered"] == [[0] * 3, [1] * 3]


def test_which_planners_are_deterministic_on_every_rank():
    for out in part(4, "determinism"):
        assert "raised" not in out, out
        for kind in ("static", "nested"):
            assert out[kind]["agree"] and out[kind]["deterministic"], (kind, out)
        for kind in ("static", "nested", "disjoint"):
            assert out[kind]["broadcast_agree"], (kind, out)
        assert out["disjoint"]["deterministic"] is False  # broadcast it


def tool(name):
    b = os.environ.get("NSPCOMM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
    path = os.path.join(b, name)
    if not os.path.exists(path):
        pytest.skip("%s not built" % path)
    return path


def test_demo_refuses_a_multi_process_launcher():
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2")
    p = subprocess.run([tool("tools/nsp_demo"), "--ranks", "2"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "started by mpirun as rank 0 of 2" in p.stderr, p.stderr


def test_a2a_perf_refuses_to_fork_under_torchrun():
    env = dict(os.environ, RANK="1", WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    p = subprocess.run([tool("perf/nsp_a2a_perf"), "--ranks", "2"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "started by torchrun as rank 1 of 4" in p.stderr, p.stderr


def test_launcher_detect():
    code = "import nspcomm; print(nspcomm.launcher())"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(env, RANK="2", WORLD_SIZE="8")).stdout
    assert "('torchrun', 2, 8)" in out, out


# ---- mapped host memory (Comm.empty) and the all-to-all ----------------------

def mem_plan():
    """4 ranks, Ulysses groups only (8 heads: 2 or 4 per rank): a degree-4
    level with one sequence (moved as one part) and with several, degree-2
    levels of several small sequences, level-0 sequences, and a round where
    rank 3 holds no token (a 2-token sequence over 4 ranks: its source is
    empty, and still a region)."""
    lens = [300, 40, 25, 3, 90, 7, 120, 64, 33, 5, 2, 50, 4]
    rounds = [[(0, 4, [0], 1), (0, 2, [1, 2, 3], 1), (2, 2, [4], 1), (2, 1, [5], 1)],
              [(0, 4, [6, 7], 1), (0, 2, [8], 1), (2, 1, [9], 1)],
              [(0, 4, [10], 1), (0, 2, [11], 1), (2, 1, [12], 1)]]
    return plans.plan_json(4, lens, rounds)


@functools.lru_cache(maxsize=None)
def mem_suite():
    """One 4-rank world for the mapped-memory cases (cases_mem.py); the
    last case destroys it."""
    tmp = tempfile.mkdtemp(prefix="nsp_mem_")
    path = os.path.join(tmp, "mem.json")
    with open(path, "w") as f:
        f.write(mem_plan())
    cases = [["empty", "mem_empty", {}], ["a2a", "mem_a2a", {"plan": path}],
             ["free", "mem_free", {}]]
    t0 = time.time()
    res = mp.run(4, cases, timeout=300, nsp_timeout=KILL_TIMEOUT)
    print("4 ranks (mapped memory): %.1f s" % (time.time() - t0))
    return res


def mem_part(name):
    out = []
    for r, res in enumerate(mem_suite()):
        assert name in res, "rank %d has no result for %s: %s" % (r, name, str(res)[-2000:])
        assert not (isinstance(res[name], dict) and "trace" in res[name]), (r, res[name])
        out.append(res[name])
    return out


def test_comm_empty_is_a_cpu_tensor_over_its_region():
    """Shape, dtype, CPU, contiguous; its first byte is the region's (page
    aligned, numel * element_size bytes, at least 1): bytes written there
    show in the tensor and the tensor's writes land there; a view is the
    same region, a copy none; free() ends it."""
    import cases_mem
    for r, recs in enumerate(mem_part("empty")):
        specs = cases_mem._specs(r)
        assert len(recs) == len(specs) + 2, recs
        for (shape, dtype), x in zip(specs, recs):
            assert x["shape"] == list(shape) and x["dtype"] == str(dtype), (r, x)
            assert x["device"] == "cpu" and x["contiguous"], (r, x)
            assert x["region"] is not None and x["region"][0] == x["address"], (r, x)
            assert x["region"][0] % 4096 == 0 and x["region"][1] == x["want_bytes"], (r, x)
            if math.prod(shape):
                assert x["data_ptr"] == x["address"], (r, x)
                assert x["reads_region"] and x["writes_region"], (r, x)
        assert recs[-2] == {"view_region": True, "copy_region": None}, recs[-2]
        assert recs[-1] == {"after_free": [None] * len(specs)}, recs[-1]


def test_all_to_all_reads_comm_empty_sources_in_place():
    """Every round, float32 and bfloat16, both directions: Comm.empty sources
    give exactly the ordinary exchange's result and the independent
    head-sharded reference, and every level of degree > 1 read the peers'
    sources in place (the library's counters; none fell back), the rank
    holding no token included; plain sources, and mapped=False on a region,
    take the ordinary path (counters unchanged)."""
    res = mem_part("a2a")
    seen_empty = False
    for r, recs in enumerate(res):
        for x in recs[:-1]:
            where = "rank %d round %d %s" % (r, x["round"], x["dtype"])
            for key in ("s2h_equal", "s2h_ref", "h2s_equal", "h2s_plain_equal", "off_equal"):
                assert x[key] is True, (where, key, x)
            assert x["levels"] >= 1, (where, x)
            assert x["s2h_counts"] == [x["levels"], 0], (where, x)
            assert x["h2s_counts"] == [x["levels"], 0], (where, x)
            assert x["plain_counts"] == [0, 0] and x["off_counts"] == [0, 0], (where, x)
            seen_empty = seen_empty or x["tokens"] == 0
    assert seen_empty, "no rank of the plan held zero tokens"


def test_all_to_all_mapped_true_and_mixed_sources():
    """mapped=True with a plain tensor is a ValueError before C (the world
    goes on); ranks whose automatic choice differs get NSP_ERR_MISMATCH on
    every rank; neither moves the counters."""
    for r, recs in enumerate(mem_part("a2a")):
        x = recs[-1]
        assert x["forced"].startswith("ValueError") and "Comm.empty" in x["forced"], (r, x)
        assert x["mixed"].startswith("NspError") and "NSP_ERR_MISMATCH" in x["mixed"], (r, x)
        assert x["after_counts"] == [0, 0] and x["after_works"] is True, (r, x)


def test_comm_free_errors_and_destroy_with_regions_left():
    """free() of a foreign tensor, of a copy, twice, of a non-tensor: clear
    errors; one rank's foreign tensor raises on every rank and frees
    nothing (the others' NspError names it), and so does one rank's bad
    empty() shape; destroy() with a region left is fine (the library frees
    it), and free() afterwards says the world is gone."""
    for r, x in enumerate(mem_part("free")):
        assert x["foreign"].startswith("ValueError") and "not a region" in x["foreign"], x
        assert x["copy"].startswith("ValueError") and "not a region" in x["copy"], x
        assert x["double"].startswith("ValueError") and "already freed" in x["double"], x
        assert x["not_a_tensor"].startswith("TypeError"), x
        assert x["kept"] is True, (r, x)
        if r == 1:
            assert x["one_foreign"].startswith("ValueError"), x
            assert x["bad_shape"].startswith("ValueError") and "negative" in x["bad_shape"], x
        else:
            for key in ("one_foreign", "bad_shape"):
                assert x[key].startswith("NspError") and "NSP_ERR_INVALID_ARG" in x[key], (r, x)
                assert "rank 1" in x[key], (r, key, x[key])
        assert x["destroy"] == "no exception", (r, x)
        assert x["free_after_destroy"].startswith("ValueError") and "destroyed" in \
            x["free_after_destroy"], (r, x)
