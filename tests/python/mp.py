"""Run a function on N real processes with a torchrun-style environment on
loopback (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), as torchrun would start them; each rank's result comes back
as JSON (or its exception text)."""

import json
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """A port p with p and p + 1 free (nspcomm meets on MASTER_PORT + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def run(n, cases, timeout=120, env=None, nsp_timeout=None):
    """Start `n` ranks of workers.py running `cases` ([name, case, args]) in
    one world; returns [{name: result} per rank] where a result is the case's
    JSON value or {"raised": type, "message": text}; a rank that died has
    "exit" (its code) and "log" besides the results it wrote before."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="nsp_py_")
    procs = []
    for r in range(n):
        e = dict(os.environ)
        e.update({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r),
                  "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port), "UCX_LOG_FILE": "stderr", "UCX_MEM_EVENTS": "no",
                  "UCX_WARN_UNUSED_ENV_VARS": "n", "OMP_NUM_THREADS": "1",
                  "NSPCOMM_LOG_LEVEL": e.get("NSPCOMM_LOG_LEVEL", "ERROR")})
        e.pop("NSPCOMM_ROOT", None)
        if env:
            e.update(env)
        out = os.path.join(tmp, "rank%d.json" % r)
        procs.append((subprocess.Popen(
            [sys.executable, os.path.join(HERE, "workers.py"), out,
             json.dumps({"cases": cases, "timeout": nsp_timeout})],
            env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out))
    results = []
    for p, out in procs:
        try:
            log = p.communicate(timeout=timeout)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise AssertionError("rank did not finish within %d s (hang)" % timeout)
        res = {}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        if p.returncode != 0 or not res:
            res.update({"exit": p.returncode, "log": log[-3000:]})
        results.append(res)
    return results
