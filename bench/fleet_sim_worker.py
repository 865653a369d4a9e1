"""`blocktune worker` whose child runs no kernel: each config "runs" for a fixed time (bench/fleet.py
--simulate-ms), so that the host side of a fleet — the workers' parents, their database work, the
job's lock, PostgreSQL — can be timed on a machine without a GPU.

    python3 bench/fleet_sim_worker.py worker --interpret ...   (what bench/fleet.py starts)

BLOCKTUNE_SIM_RUN_MS: a run request takes this long in the child (an H100 trial of the fleet's
4096³ matmul: ~160 ms); BLOCKTUNE_SIM_ROUND_MS: one finalist's measurement in a re-measurement
round (~40 ms there); BLOCKTUNE_SIM_COMPILE=1: each compile in the pool takes at least what the
matmul config's compile took on the 2 x H100 host (`_h100_compile_s`: 0.2-0.3 s for a wgmma tile, up
to 2 s for a 2-warp mma.sync one), so that the compile pool's queueing and its slow configs are
there too. The child is the real one otherwise (its start, the job's inputs in
interpret mode, the protocol, the timing it reports); its "samples" are a fixed function of the
config, so that the search, its finalists and its winner are deterministic. Numbers from it are
not GPU numbers: they show the parents' pace against a child of a given speed.
"""
from __future__ import annotations

import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _ms(config: dict[str, Any]) -> float:
    """A config's pretend time: 0.20-0.30 ms, fixed per config."""
    return 0.2 + (zlib.crc32(repr(sorted(config.items())).encode()) % 1000) / 10_000


def _handle(self, req: dict[str, Any]) -> dict[str, Any]:
    run_s = float(os.environ.get("BLOCKTUNE_SIM_RUN_MS", "160")) / 1000
    round_s = float(os.environ.get("BLOCKTUNE_SIM_ROUND_MS", "40")) / 1000
    if req["op"] == "run":
        time.sleep(run_s)
        ms = _ms(req["config"])
        return {"status": "ok", "samples_ms": [ms] * 5, "error": None, "reference": False}
    if req["op"] == "remeasure":
        items = req["items"]
        rounds = req.get("rounds", 5)
        time.sleep(round_s * len(items) * rounds)
        return {"samples_ms": [[_ms(i["config"])] * rounds for i in items], "errors": [None] * len(items)}
    if req["op"] == "ping":
        return {"pong": True}
    raise ValueError(f"unknown op {req['op']!r}")


def _h100_compile_s(constexprs: dict[str, Any], num_warps: int) -> float:
    """A matmul config's compile time on the 2 x H100 host, roughly fitted to the fleet's timelines
    of 2026-11-27 (submission to result, the pool's queue included): it grows with the tile each
    thread holds, three times as fast on 2 warps (mma.sync, unrolled) as on 4-8 (wgmma)."""
    from tuner.space import compile_cost_hint

    per_thread = compile_cost_hint({**constexprs, "num_warps": num_warps}) / 1024
    return 0.1 + per_thread * (0.06 if num_warps < 4 else 0.02)


def _slow_compile(compile_fn, *args):
    """`compile_fn(*args)` in the pool process, taking at least `_h100_compile_s`."""
    t0 = time.perf_counter()
    out = compile_fn(*args)
    left = _h100_compile_s(args[3], args[4]) - (time.perf_counter() - t0)
    if left > 0:
        time.sleep(left)
    return out


def _simulate_compile_times() -> None:
    import functools

    from tuner import isolation
    from tuner.compile_step import compile_config

    submit = isolation.CompilePool.submit

    def slow_submit(self, fn, *args):
        if fn is compile_config:
            fn = functools.partial(_slow_compile, fn)
        return submit(self, fn, *args)

    isolation.CompilePool.submit = slow_submit


def sim_child_main(conn, init: dict[str, Any]) -> None:
    from tuner import child

    child.Bench.handle = _handle
    child.child_main(conn, init)


def main() -> int:
    import tuner.measurement
    import tuner.standby
    from service.cli import main as cli_main

    tuner.measurement.child_main = sim_child_main
    tuner.standby.child_main = sim_child_main
    if os.environ.get("BLOCKTUNE_SIM_COMPILE") == "1":
        _simulate_compile_times()
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
