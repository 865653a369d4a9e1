"""A real worker process (service.worker.Worker, interpret mode, the real tuner) whose tuner pauses
once it has recorded N counted trials of a job, until a file appears.

Tests use it to make "the worker is in the middle of the job" a fact rather than a timing guess:
they wait for `--paused-file`, do what they test (kill the worker, stop the database, freeze
it), then create `--resume-file` (or never do).

    python tests/service/pausable_worker.py --db URL --name NAME --pause-after 3 \
        --paused-file P --resume-file R [--lease S] [--heartbeat S] [--poll S] [--no-join]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
import weakref
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--pause-after", type=int, required=True)
    p.add_argument("--paused-file", required=True)
    p.add_argument("--resume-file", required=True)
    p.add_argument("--lease", type=float, default=60.0)
    p.add_argument("--heartbeat", type=float, default=10.0)
    p.add_argument("--poll", type=float, default=0.2)
    p.add_argument("--no-join", dest="join", action="store_false")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from service.worker import Worker
    from tuner import write_behind
    from tuner.engine import run_job as tune

    # The pause is where tests freeze (SIGSTOP) or kill the worker: no write may be in flight then.
    # Optuna's tell and the job's progress of the trial just recorded are written behind on their
    # own thread; a worker frozen inside one of those SQLite transactions would hold the database's
    # one write lock for as long as it stays frozen, and no other worker could even register.
    runs_writing_behind: weakref.WeakSet = weakref.WeakSet()
    started = write_behind.WriteBehind.__init__

    def remembered(self, *a, **kw):
        started(self, *a, **kw)
        runs_writing_behind.add(self)

    write_behind.WriteBehind.__init__ = remembered

    def run_job(*a, **kw):
        paused = False

        def on_event(kind: str, data: dict) -> None:
            nonlocal paused
            if kind == "trial" and not paused and data["done"] >= args.pause_after:
                paused = True
                for writer in list(runs_writing_behind):
                    writer.drain()
                Path(args.paused_file).write_text(str(data["done"]))
                print(f"paused after {data['done']} trials", flush=True)
                while not os.path.exists(args.resume_file):
                    time.sleep(0.05)
                print("resumed", flush=True)

        tune(*a, on_event=on_event, **kw)

    w = Worker(args.db, interpret=True, name=args.name, lease_seconds=args.lease, heartbeat_seconds=args.heartbeat,
               poll_seconds=args.poll, join=args.join, run_job=run_job)
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    w.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
