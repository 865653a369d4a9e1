"""`blocktune worker` whose child runs no kernel: each config "runs" for a fixed time (bench/fleet.py
--simulate-ms), so that the host side of a fleet — the workers' parents, their database work, the
job's lock, PostgreSQL — can be timed on a machine without a GPU.

    python3 bench/fleet_sim_worker.py worker --interpret ...   (what bench/fleet.py starts)

BLOCKTUNE_SIM_RUN_MS: a run request takes this long in the child (an H100 trial of the fleet's
4096³ matmul: ~160 ms); BLOCKTUNE_SIM_ROUND_MS: one finalist's measurement in a re-measurement
round (~40 ms there). The child is the real one otherwise (its start, the job's inputs in
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
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
