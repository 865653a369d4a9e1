"""Benchmark of the launch-time config lookup (GET /api/v1/configs/best) under load.

    .venv/bin/python bench/service.py [--seconds 10] [--connections 16] [--backend sqlite|postgres|both]
                                      [--scenario NAME ...] [--skip-launches]

Starts `blocktune serve` (one uvicorn process, as a user runs it) on a fresh database filled with
best configs, then drives it from a separate process: an asyncio load generator on raw keep-alive
HTTP/1.1 connections (so the client's own cost stays small on a 2-core machine), cycling over hits,
nearest-key matches and misses. Prints requests per second and p50 / p99 latency per backend and
scenario:

  lookups        the lookups alone
  publishing     while configs are published (POST /api/v1/configs, ~5 a second, each a faster
                 config for an entry the lookups ask for)
  token          with reads behind a token (`read_requires_token`): every lookup carries one
  db-locked      PostgreSQL only: another connection holds LOCK TABLE best_configs IN ACCESS
                 EXCLUSIVE MODE for the whole run
  db-down        PostgreSQL only: the server is stopped for the whole run (SQLite is embedded: there
                 is no server to stop, and a writer's lock does not block WAL readers)

Then checks the launch path: with BLOCKTUNE_SERVICE_URL set, one process launches an @autotune
kernel (interpret mode) 10 000 times over two key values and the server's /metrics must show
exactly one lookup request per key.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPUS = [("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA L4", "8.9")]


# -- databases -------------------------------------------------------------------------------------
from postgres import Postgres, free_port  # noqa: E402  (bench/postgres.py)


def fill(url: str, kernels: int = 50, keys: int = 20) -> list[tuple[str, dict, str]]:
    """kernels × keys × GPU models best configs; returns the (fingerprint, key, gpu) of each."""
    from db.engine import make_engine, session_factory
    from db.migrate import upgrade
    from db.models import BestConfig

    upgrade(url)
    eng = make_engine(url)
    rows = []
    with session_factory(eng)() as s:
        for k in range(kernels):
            fp = f"{k:064x}"
            for j in range(keys):
                key = {"n": 1024 << j}
                for model, cc in GPUS:
                    s.add(BestConfig(kernel_fingerprint=fp, kernel_name=f"kernel_{k}",
                                     problem_key=json.dumps(key, sort_keys=True, separators=(",", ":")),
                                     gpu_model=model, compute_capability=cc,
                                     config={"BLOCK_SIZE": 128 << (j % 4), "num_warps": 4, "num_stages": 3},
                                     median_ms=0.1 + j * 0.01, default_ms=0.2 + j * 0.01))
                    rows.append((fp, key, model))
        s.commit()
    eng.dispose()
    return rows


# -- the load generator (a separate process) --------------------------------------------------------
def _requests(rows, n=4000, seed=0, token: str | None = None) -> list[bytes]:
    from urllib.parse import urlencode

    rnd = random.Random(seed)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    out = []
    for i in range(n):
        fp, key, model = rnd.choice(rows)
        r = rnd.random()
        if r < 0.1:      # nearest key
            key = {"n": key["n"] + 100}
        elif r < 0.15:   # miss: unknown GPU
            model = "Unknown GPU"
        q = urlencode({"kernel": fp, "key": json.dumps(key), "gpu_model": model})
        out.append(f"GET /api/v1/configs/best?{q} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n".encode())
    return out


async def _conn(port, reqs, deadline, lat, status, offset):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = offset
    try:
        while time.perf_counter() < deadline:
            req = reqs[i % len(reqs)]
            i += 1
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"content-length: *(\d+)", head, re.I)
            await reader.readexactly(int(m.group(1)))
            lat.append(time.perf_counter() - t0)
            code = int(head[9:12])
            status[code] = status.get(code, 0) + 1
    finally:
        writer.close()


def _loadgen(port, reqs, seconds, connections, q):
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def main():
        lat, status, warm = [], {}, []
        # warm-up
        await asyncio.gather(*[_conn(port, reqs, time.perf_counter() + 1.0, warm, {}, i * 97) for i in range(connections)])
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*[_conn(port, reqs, deadline, lat, status, i * 131) for i in range(connections)])
        return lat, status, time.perf_counter() - t0, len(warm)

    lat, status, elapsed, warm = asyncio.run(main())
    lat.sort()
    q.put({"requests": len(lat), "rps": len(lat) / elapsed, "p50_ms": lat[len(lat) // 2] * 1e3,
           "p99_ms": lat[int(len(lat) * 0.99)] * 1e3, "max_ms": lat[-1] * 1e3, "status": status,
           "all_requests": warm + len(lat)})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(url: str, port: int, env: dict | None = None) -> subprocess.Popen:
    import httpx

    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    p = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--database-url", url,
                          "--no-worker", "--log-level", "warning"], cwd=ROOT, env=e,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            # `serve` starts its kernel checkers in the background (prewarm): the load starts once
            # they are up, so their imports do not share the 2 cores with the measured lookups
            if "blocktune_kernel_checkers 2.0" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text:
                return p
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("server did not start (or its kernel checkers did not)")


SCENARIOS = ("lookups", "publishing", "token", "db-locked", "db-down")
POSTGRES_ONLY = ("db-locked", "db-down")


class Publisher(threading.Thread):
    """POST /api/v1/configs about `per_second` times a second, each a faster config for a random
    entry of `rows` (so that every publish changes what the lookups are answered)."""

    def __init__(self, port: int, token: str, rows, per_second: float = 5.0):
        super().__init__(daemon=True)
        self.port, self.token, self.rows, self.period = port, token, rows, 1.0 / per_second
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.status: dict[int, int] = {}

    def run(self):
        import httpx

        rnd = random.Random(1)
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30,
                          headers={"Authorization": f"Bearer {self.token}"}) as c:
            n = 0
            next_at = time.perf_counter()
            while not self.stop.is_set():
                fp, key, model = rnd.choice(self.rows)
                n += 1
                body = {"kernel_fingerprint": fp, "kernel_name": "bench", "problem_key": key, "gpu_model": model,
                        "compute_capability": dict(GPUS)[model], "config": {"BLOCK_SIZE": 64, "num_warps": 2},
                        "median_ms": 0.05 / n}
                t0 = time.perf_counter()
                r = c.post("/api/v1/configs", json=body)
                self.latencies.append(time.perf_counter() - t0)
                self.status[r.status_code] = self.status.get(r.status_code, 0) + 1
                next_at += self.period
                self.stop.wait(max(0.0, next_at - time.perf_counter()))


def make_token(url: str) -> str:
    from db.engine import make_engine, session_factory
    from service.core.security import create_token

    eng = make_engine(url)
    with session_factory(eng)() as s:
        _, clear = create_token(s, "bench")
        s.commit()
    eng.dispose()
    return clear


def run_scenario(url: str, rows, scenario: str, seconds: float, connections: int, pg: "Postgres | None" = None) -> dict:
    """One server, set up for `scenario`; the load generator in a process of its own."""
    import sqlalchemy as sa

    token = make_token(url)
    env = {"BLOCKTUNE_READ_REQUIRES_TOKEN": "1"} if scenario == "token" else {}
    port = free_port()
    server = start_server(url, port, env)
    publisher = locker = None
    try:
        if scenario == "publishing":
            publisher = Publisher(port, token, rows)
            publisher.start()
        elif scenario == "db-locked":
            locker = sa.create_engine(url).connect()
            locker.execute(sa.text("LOCK TABLE best_configs IN ACCESS EXCLUSIVE MODE"))
        elif scenario == "db-down":
            pg.pause()
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        reqs = _requests(rows, token=token if scenario == "token" else None)
        proc = ctx.Process(target=_loadgen, args=(port, reqs, seconds, connections, q))
        cpu0 = cpu_seconds(server.pid)
        proc.start()
        res = q.get(timeout=seconds + 120)
        proc.join()
        # the server's CPU per request (warm-up included): what its throughput would be on a core of
        # its own, whatever else the machine runs
        res["cpu_us"] = (cpu_seconds(server.pid) - cpu0) / res["all_requests"] * 1e6
    finally:
        if publisher is not None:
            publisher.stop.set()
            publisher.join(30)
        if locker is not None:
            locker.rollback()
            locker.close()
        if scenario == "db-down":
            pg.start()
        server.terminate()
        server.wait(10)
    res["rows"] = len(rows)
    if publisher is not None:
        lat = sorted(publisher.latencies)
        res["publishes"] = {"count": len(lat), "status": publisher.status,
                            "p50_ms": lat[len(lat) // 2] * 1e3 if lat else None,
                            "max_ms": lat[-1] * 1e3 if lat else None}
    return res


def bench_backend(url: str, seconds: float, connections: int, scenarios, pg: "Postgres | None" = None) -> dict:
    rows = fill(url)
    out = {}
    for scenario in scenarios:
        if scenario in POSTGRES_ONLY and pg is None:
            continue
        out[scenario] = run_scenario(url, rows, scenario, seconds, connections, pg)
        r = out[scenario]
        print(f"  {url.split(':')[0]:<10} {scenario:<11} {r['rps']:>8.0f} req/s  p50 {r['p50_ms']:.2f} ms  "
              f"p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.1f} ms  server CPU {r['cpu_us']:.0f} µs/request  "
              f"{r['status']}", flush=True)
    return out


# -- one lookup per key from a kernel launched 10 000 times ---------------------------------------
KERNEL_SRC = """import compiler as triton
import compiler.language as tl


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)
"""

LAUNCH_SCRIPT = r'''
import os, sys, numpy as np
sys.path.insert(0, os.environ["ROOT"])
import compiler as triton
from client.compiler_plugin import service_lookup
from client import lookup
from kernel_mod import scale

tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(scale)
xs = {n: (np.arange(n, dtype=np.float32), np.zeros(n, dtype=np.float32)) for n in (256, 512)}
found = {}
for i in range(10_000):
    n = 256 if i % 2 else 512
    x, out = xs[n]
    # what the plug-in's before_tuning listener does at a launch on a GPU (a fresh per-call cache
    # here, so that only the client's own per-process cache can keep the service from being asked again)
    found[n] = service_lookup(scale, {"n": n}, {})
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert np.allclose(out, x * 2)
print("FOUND", found, flush=True)
print("STATS", lookup.stats, flush=True)
'''


def bench_launches(url: str) -> dict:
    """10 000 launches of an @autotune kernel (interpret mode), each preceded by the service lookup
    the Autotuner makes on a GPU, with BLOCKTUNE_SERVICE_URL set: one key is tuned on the service,
    the other is not. The server's /metrics counts the lookups it answered."""
    import httpx

    from db.engine import make_engine, session_factory
    from db.migrate import upgrade
    from db.models import BestConfig

    work = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    (work / "kernel_mod.py").write_text(KERNEL_SRC)
    (work / "launch_10k.py").write_text(LAUNCH_SCRIPT)
    sys.path.insert(0, str(work))
    from kernel_mod import scale   # the same fingerprint the script's kernel has

    upgrade(url)
    eng = make_engine(url)
    with session_factory(eng)() as s:
        s.add(BestConfig(kernel_fingerprint=scale.fingerprint, kernel_name="scale", problem_key='{"n":512}',
                         gpu_model="blocktune interpreter (CPU)", compute_capability="0.0",
                         config={"BLOCK": 128, "num_warps": 4, "num_stages": 3}, median_ms=0.01, default_ms=0.02))
        s.commit()
    eng.dispose()
    port = free_port()
    server = start_server(url, port)
    try:
        env = {**os.environ, "ROOT": str(ROOT), "PYTHONPATH": f"{work}:{ROOT}",
               "BLOCKTUNE_SERVICE_URL": f"http://127.0.0.1:{port}", "BLOCKTUNE_INTERPRET": "1",
               "BLOCKTUNE_CACHE_DIR": str(work / "cache")}
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(work / "launch_10k.py")], env=env, capture_output=True, text=True,
                           timeout=1800)
        elapsed = time.perf_counter() - t0
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        served = sum(float(m.group(1)) for m in re.finditer(
            r'blocktune_http_requests_total\{method="GET",route="/api/v1/configs/best",status="\d+"\} ([0-9.e+]+)', text))
        return {"ok": r.returncode == 0, "launches": 10_000, "keys": 2, "lookup_requests": served,
                "seconds": elapsed, "stdout": r.stdout[-800:], "stderr": r.stderr[-2000:]}
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--scenario", choices=SCENARIOS, action="append",
                    help="run only these (repeatable); default: all")
    ap.add_argument("--skip-launches", action="store_true")
    args = ap.parse_args()
    scenarios = args.scenario or SCENARIOS
    results = {}
    tmp = tempfile.mkdtemp(prefix="bench-service-")
    if args.backend in ("sqlite", "both"):
        results["sqlite"] = bench_backend(f"sqlite:///{tmp}/bench.db", args.seconds, args.connections, scenarios)
    if args.backend in ("postgres", "both"):
        pg = Postgres()
        try:
            results["postgres"] = bench_backend(pg.url, args.seconds, args.connections, scenarios, pg)
        finally:
            pg.stop()
    print(f"\nconfig lookup under load: {args.connections} keep-alive connections from a separate process, "
          f"{args.seconds:.0f} s per scenario, {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'backend':<10} {'scenario':<11} {'rows':>6} {'requests':>9} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'max ms':>7} {'CPU µs':>7}  status")
    for name, by_scenario in results.items():
        for scenario, r in by_scenario.items():
            print(f"{name:<10} {scenario:<11} {r['rows']:>6} {r['requests']:>9} {r['rps']:>8.0f} {r['p50_ms']:>7.2f} "
                  f"{r['p99_ms']:>7.2f} {r['max_ms']:>7.1f} {r['cpu_us']:>7.0f}  {r['status']}")
            if "publishes" in r:
                p = r["publishes"]
                print(f"{'':<10} {'':<11} publishes: {p['count']} ({p['status']}), p50 {p['p50_ms']:.1f} ms, "
                      f"max {p['max_ms']:.1f} ms")
    if not args.skip_launches:
        r = bench_launches(f"sqlite:///{tmp}/launch.db")
        print(r["stdout"].strip())
        print(f"\nlaunches with BLOCKTUNE_SERVICE_URL set: {r['launches']} launches over {r['keys']} key values -> "
              f"{r['lookup_requests']:.0f} lookup requests ({r['seconds']:.1f} s, {'ok' if r['ok'] else 'FAILED'})")
        if not r["ok"]:
            print(r["stderr"])
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
