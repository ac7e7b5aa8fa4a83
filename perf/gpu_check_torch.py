#!/usr/bin/env python3
"""The Python op on CUDA tensors, against its CPU path: one command.

    .venv/bin/python perf/gpu_check_torch.py [--ranks N] [--out DIR]

Starts N ranks (default: 2, or 1 on a machine with one GPU: NCCL refuses two
ranks of one communicator on one device), each on its own GPU, with a
torchrun environment on loopback, and on every rank, for float32, bfloat16
and float16, forward and backward of nspcomm.torch.nested_attention on
CUDA tensors:

  - on a world nspcomm creates on the NCCL backend through the torch Store
    (nspcomm.init(store=..., backend="nccl")), and on one borrowed from the
    job's ProcessGroupNCCL (nspcomm.from_process_group());
  - with the default kernel (flash-attn's varlen kernels when installed,
    else torch's), and with MathKernel on the device as a cross-check;
  - on torch's current stream and on a side stream;
  - the op alone under torch.compile(fullgraph=True) (inductor);
against the same calls on CPU tensors over a UCX world in the same
processes (the CPU path the tests check against a float64 reference):
relative error max |cuda - cpu| / max(0.1, max |cpu|) per tensor (lse: /
max(1, ...)) at most 1e-4 in float32, 2e-2 in bfloat16, 4e-3 in float16
(inputs rounded to the dtype for both; the kernels differ, so each adds
its own rounding). With 2+ ranks the plan has a degree-N group that
replicates KV heads (n_kv = 1), two rounds, and a plan whose one group of
every rank is a ring (float32 and bfloat16) must match the CPU path too.

Prints one PASS/FAIL line per check and a summary, writes
DIR/gpu_check_torch.json (default out/), and exits 0 when every check
passed, 1 when one failed, 77 without a usable GPU (or without torch).
--cpu-rehearsal runs the same script with CPU tensors on a UCX world in
place of the device (to check the script itself on a machine without a GPU;
it proves nothing about the device path).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(TOP, "python"))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))

TOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}
SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_json(ranks, ring=False):
    """Two rounds: a group of every rank (KV replicated above n_kv = 1) with
    a one-token sequence, level-0 sequences on each rank; ring=True: one
    group of every rank as a ring."""
    import plans
    lens = [61, 24, 1, 17, 33, 8, 45, 12, 29, 5]
    if ranks == 1:
        rounds = [[(0, 1, [0, 1, 2, 3, 4], 1)], [(0, 1, [5, 6, 7, 8, 9], 1)]]
    elif ring:
        rounds = [[(0, ranks, [0, 1], ranks)]]
        lens = lens[:2]
    else:
        extra = [(r, 1, [3 + r % 3], 1) for r in range(ranks)][:3]
        rounds = [[(0, ranks, [0, 1, 2], 1)] + extra,
                  [(0, ranks, [6], 1)] + [(r, 1, [7 + r % 3], 1) for r in range(ranks)][:3]]
        used = sorted({s for rnd in rounds for g in rnd for s in g[2]})
        keep = {s: i for i, s in enumerate(used)}
        lens = [lens[s] for s in used]
        rounds = [[(a, b, [keep[s] for s in c], d) for a, b, c, d in rnd] for rnd in rounds]
    return plans.plan_json(ranks, lens, rounds)


# ---- one rank ------------------------------------------------------------------

def _batch(plan, nq, nkv, D, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    T = sum(plan.seq_lens)
    return (torch.rand(T, nq, D, generator=g) * 4 - 2, torch.rand(T, nkv, D, generator=g) * 4 - 2,
            torch.rand(T, nkv, D, generator=g) * 2 - 1, torch.rand(T, nq, D, generator=g) * 2 - 1)


def _run(nt, tree, lay, heads, dtype, device, batch, kernel=None, stream=None):
    """o, lse, dq, dk, dv (on the CPU, float64) of one forward + backward."""
    import torch
    nq, nkv, D = heads
    idx = lay.token_index()
    a = nt.NestedAttention(tree, lay, nq, nkv, D, kernel=kernel)
    q, k, v = (t.index_select(0, idx).to(dtype).to(device).requires_grad_()
               for t in batch[:3])
    do = batch[3].index_select(0, idx).to(dtype).to(device)
    ctx = torch.cuda.stream(stream) if stream is not None else _null()
    with ctx:
        o, lse = nt.nested_attention(q, k, v, a, return_lse=True)
        o.backward(do)
    if device != "cpu":
        torch.cuda.synchronize()
    out = {"o": o.detach(), "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    saved = a.last_bwd_saved
    a.destroy()
    return {key: t.double().cpu() for key, t in out.items()}, saved


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _err(got, ref):
    e = {}
    for key in got:
        r = ref[key]
        if r.numel() == 0:
            e[key] = 0.0
            continue
        scale = max(1.0 if key == "lse" else 0.1, r.abs().max().item())
        e[key] = (got[key] - r).abs().max().item() / scale
    return max(e.values()) if e else 0.0, e


def _compile_check(nt, tree, lay, heads, device, batch):
    import torch
    nq, nkv, D = heads
    a = nt.NestedAttention(tree, lay, nq, nkv, D)
    idx = lay.token_index()
    q, k, v = (t.index_select(0, idx).to(device).requires_grad_() for t in batch[:3])
    do = batch[3].index_select(0, idx).to(device)

    def op(q, k, v, attn):
        return nt.nested_attention(q, k, v, attn)
    oe = op(q, k, v, a)
    ge = torch.autograd.grad(oe, (q, k, v), do)
    oc = torch.compile(op, fullgraph=True)(q, k, v, a)
    gc = torch.autograd.grad(oc, (q, k, v), do)
    a.destroy()
    return max([(oe - oc).abs().max().item()] +
               [(x - y).abs().max().item() for x, y in zip(ge, gc)])


def rank_main(out_path, args):
    import datetime
    import torch
    import torch.distributed as dist
    import nspcomm
    import nspcomm.torch as nt
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cpu_only = args["cpu_rehearsal"]
    device = "cpu" if cpu_only else "cuda:%d" % rank
    if not cpu_only:
        torch.cuda.set_device(rank)
    results = []

    def record(name, ok, **info):
        results.append(dict(info, name=name, ok=bool(ok)))
        with open(out_path, "w") as f:
            json.dump(results, f)

    dist.init_process_group("gloo" if cpu_only else "nccl", rank=rank, world_size=n,
                            **({} if cpu_only else {"device_id": torch.device(device)}))
    store = dist.TCPStore("127.0.0.1", int(args["store_port"]), n, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    host = nspcomm.init(store=store, rank=rank, world_size=n, backend="ucx", prefix="cpu")
    worlds = {}
    try:
        worlds["store"] = nspcomm.init(store=store, rank=rank, world_size=n,
                                       backend="ucx" if cpu_only else "nccl",
                                       cuda_device=None if cpu_only else rank, prefix="nccl")
        record("%s world through the torch Store" % worlds["store"].backend,
               worlds["store"].backend == ("ucx" if cpu_only else "nccl"))
    except Exception as e:  # noqa: BLE001
        record("world through the torch Store", False, error=repr(e))
    if not cpu_only:
        try:
            worlds["process group"] = nspcomm.from_process_group()
            record("world borrowed from ProcessGroupNCCL", True)
        except Exception as e:  # noqa: BLE001
            record("world borrowed from ProcessGroupNCCL", False, error=repr(e),
                   torch=torch.__version__)
    plan = nspcomm.Plan.from_json(plan_json(n))
    htree = host.tree()
    side = None if cpu_only else torch.cuda.Stream()
    for wname, w in worlds.items():
        tree = w.tree()
        for heads in ((8, 2, 16), (4, 1, 32)):
            for dt in (torch.float32, torch.bfloat16, torch.float16):
                dname = str(dt).split(".")[1]
                for rnd in range(plan.nrounds):
                    lay = nspcomm.Layout(plan, rnd, rank)
                    batch = _batch(plan, *heads, seed=rnd)
                    cpu, _ = _run(nt, htree, lay, heads, dt, "cpu", batch)
                    variants = [("default kernel", None, None), ("MathKernel", nt.MathKernel(),
                                                                 None)]
                    if side is not None:
                        variants.append(("side stream", None, side))
                    for vname, kern, stream in variants:
                        name = "%s world, heads %d/%d, %s, round %d, %s" % (
                            wname, heads[0], heads[1], dname, rnd, vname)
                        try:
                            got, saved = _run(nt, tree, lay, heads, dt, device, batch, kern,
                                              stream)
                            worst, errs = _err(got, cpu)
                            record(name, worst <= TOL[dname] and saved, error=worst,
                                   errors=errs, tolerance=TOL[dname], bwd_saved=saved)
                        except Exception as e:  # noqa: BLE001
                            record(name, False, error=repr(e)[:800])
        lay = nspcomm.Layout(plan, 0, rank)
        try:
            diff = _compile_check(nt, tree, lay, (8, 2, 16), device, _batch(plan, 8, 2, 16, 0))
            record("%s world: torch.compile(fullgraph=True) of the op" % wname, diff == 0,
                   error=diff)
        except Exception as e:  # noqa: BLE001
            record("%s world: torch.compile(fullgraph=True) of the op" % wname, False,
                   error=repr(e)[:800])
        if n > 1:
            ring = nspcomm.Plan.from_json(plan_json(n, ring=True))
            rl = nspcomm.Layout(ring, 0, rank)
            for dt in (torch.float32, torch.bfloat16):
                dname = str(dt).split(".")[1]
                name = "%s world: a ring group of %d, %s, against the CPU path" % (wname, n, dname)
                try:
                    rb = _batch(ring, 8, 2, 16, 0)
                    cpu, _ = _run(nt, htree, rl, (8, 2, 16), dt, "cpu", rb)
                    got, saved = _run(nt, tree, rl, (8, 2, 16), dt, device, rb)
                    worst, errs = _err(got, cpu)
                    record(name, worst <= TOL[dname] and saved, error=worst, errors=errs,
                           tolerance=TOL[dname])
                except Exception as e:  # noqa: BLE001
                    record(name, False, error=repr(e)[:800])
        tree.destroy()
    for w in worlds.values():
        w.destroy()
    htree.destroy()
    host.destroy()
    dist.destroy_process_group()


# ---- the launcher ---------------------------------------------------------------

def environment_problem(cpu_rehearsal):
    """Why this machine cannot run the check (None if it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (bash scripts/setup-python.sh)"
    if cpu_rehearsal:
        return None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "no usable CUDA device (torch.cuda.is_available() is False)"
    return None


def launch(ranks, cpu_rehearsal, timeout):
    port, store_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="nsp_gpu_torch_")
    procs = []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   UCX_LOG_FILE="stderr", UCX_MEM_EVENTS="no", UCX_WARN_UNUSED_ENV_VARS="n",
                   OMP_NUM_THREADS="1", NSPCOMM_TIMEOUT=str(min(timeout, 120)))
        out = os.path.join(tmp, "rank%d.json" % r)
        a = json.dumps({"store_port": store_port, "cpu_rehearsal": cpu_rehearsal})
        log = open(os.path.join(tmp, "rank%d.log" % r), "w")
        procs.append((subprocess.Popen([sys.executable, __file__, "--rank-main", out, a],
                                       env=env, stdout=log, stderr=subprocess.STDOUT), out, log))
    results, t0 = [], time.time()
    for r, (p, out, log) in enumerate(procs):
        try:
            p.wait(timeout=max(1, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            for q, _, _ in procs:
                q.kill()
            results.append({"name": "rank %d finished in %d s" % (r, timeout), "ok": False,
                            "rank": r})
        log.close()
        got = json.load(open(out)) if os.path.exists(out) else []
        for x in got:
            x["rank"] = r
        results += got
        if p.returncode != 0:
            tail = open(os.path.join(tmp, "rank%d.log" % r)).read()[-2000:]
            results.append({"name": "rank %d exited 0" % r, "ok": False, "rank": r,
                            "exit": p.returncode, "log": tail})
    return results


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-main":
        rank_main(sys.argv[2], json.loads(sys.argv[3]))
        sys.stdout.flush()
        os._exit(0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(TOP, "out"))
    ap.add_argument("--timeout", type=int, default=540)
    ap.add_argument("--cpu-rehearsal", action="store_true")
    args = ap.parse_args()
    why = environment_problem(args.cpu_rehearsal)
    if why:
        print("gpu_check_torch.py: SKIP: %s" % why)
        sys.exit(SKIP)
    import torch
    gpus = 0 if args.cpu_rehearsal else torch.cuda.device_count()
    ranks = args.ranks or (2 if args.cpu_rehearsal else min(2, gpus))
    if not args.cpu_rehearsal and ranks > gpus:
        print("gpu_check_torch.py: %d ranks need %d GPUs, this machine has %d" % (ranks, ranks,
                                                                                gpus))
        sys.exit(1)
    print("== %d rank(s)%s, torch %s" % (ranks, " (CPU rehearsal: no device)" if
                                         args.cpu_rehearsal else " on %d GPU(s)" % gpus,
                                         torch.__version__))
    if ranks == 1 and not args.cpu_rehearsal:
        print("   one GPU: one rank, so no group above degree 1 and no exchange between ranks")
    t0 = time.time()
    results = launch(ranks, args.cpu_rehearsal, args.timeout)
    bad = [x for x in results if not x["ok"]]
    for x in results:
        err = x.get("error")
        err = "" if err is None else ("  (%s)" % ("%.2e" % err if isinstance(err, float) else err))
        print("%s  rank %d  %s%s" % ("PASS" if x["ok"] else "FAIL", x["rank"], x["name"], err))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_check_torch.json")
    with open(path, "w") as f:
        json.dump({"ranks": ranks, "gpus": gpus, "cpu_rehearsal": args.cpu_rehearsal,
                   "tolerance": TOL, "seconds": time.time() - t0, "results": results}, f,
                  indent=1)
    print("== %d checks, %d failed, %.0f s; wrote %s" % (len(results), len(bad),
                                                        time.time() - t0, path))
    print("gpu_check_torch.py: %s" % ("FAIL" if bad or not results else "PASS"))
    sys.exit(1 if bad or not results else 0)


if __name__ == "__main__":
    main()
