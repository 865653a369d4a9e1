"""Real data for service tests: rows written through the ORM, and a live uvicorn server."""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from db.engine import make_engine, session_factory
from db.models import TOKEN_SCOPES, BestConfig, Gpu, Job, Kernel, Trial, Worker, utcnow

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed(url: str, *, n_trials: int = 12, state: str = "succeeded", kernel_name: str = "add_kernel",
         fingerprint: str = "f" * 64, gpu_model: str = "NVIDIA H100 80GB HBM3", cc: str = "9.0",
         key: dict | None = None) -> dict:
    """A kernel, a GPU, a worker, a job with trials (some failed), and its best config."""
    key = key if key is not None else {"n_elements": 98432}
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            k = s.query(Kernel).filter_by(fingerprint=fingerprint).one_or_none()
            if k is None:
                k = Kernel(fingerprint=fingerprint, name=kernel_name, source="@triton.jit\ndef add_kernel(x): pass\n",
                           compiler_version="0.1.0")
                s.add(k)
            g = s.query(Gpu).filter_by(model=gpu_model).one_or_none()
            if g is None:
                g = Gpu(model=gpu_model, compute_capability=cc, sm_count=132, total_memory=80 * 2**30,
                        driver_version="560.35", cuda_version="12.6")
                s.add(g)
            s.flush()
            now = utcnow()
            job = Job(kernel_id=k.id, gpu_model=gpu_model, spec={"kernel": {"name": kernel_name}, "key": list(key)},
                      state=state, study_name="job-x", trials_total=n_trials, trials_done=n_trials,
                      progress=1.0 if state == "succeeded" else 0.5, created_at=now, updated_at=now)
            s.add(job)
            s.flush()
            job.study_name = f"job-{job.id}"
            best = None
            for i in range(n_trials):
                cfg = {"BLOCK_SIZE": 2 ** (7 + i % 5), "num_warps": 2 ** (i % 3 + 1), "num_stages": 1 + i % 3}
                if i % 5 == 3:
                    s.add(Trial(job_id=job.id, number=i, config=cfg, status="compile-error", samples_ms=[],
                                error="out of shared memory", worker="w0"))
                    continue
                ms = 1.0 + ((i * 7) % 11) / 10.0
                s.add(Trial(job_id=job.id, number=i, config=cfg, status="ok", samples_ms=[ms, ms * 1.01],
                            median_ms=ms, spread={"p20": ms * 0.99, "p80": ms * 1.02, "min": ms * 0.98, "max": ms * 1.05},
                            worker="w0"))
                if best is None or ms < best[0]:
                    best = (ms, cfg)
            if state == "succeeded":
                job.finished_at = now
            if best is not None:
                job.best_time_ms, job.best_config = best
                s.add(BestConfig(kernel_fingerprint=fingerprint, kernel_name=kernel_name,
                                 problem_key=json.dumps(key, sort_keys=True, separators=(",", ":")),
                                 gpu_model=gpu_model, compute_capability=cc, config=best[1], median_ms=best[0],
                                 default_ms=best[0] * 1.5, job_id=job.id))
            s.commit()
            return {"job_id": job.id, "kernel_id": k.id, "gpu_id": g.id, "best": best, "n_ok": n_trials - n_trials // 5
                    - (1 if n_trials % 5 > 3 else 0)}
    finally:
        engine.dispose()


def make_token(url: str, name: str = "test", scopes=TOKEN_SCOPES) -> str:
    """A new token (every scope unless `scopes` says which)."""
    from service.core.security import create_token

    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            _, clear = create_token(s, name, scopes)
            s.commit()
            return clear
    finally:
        engine.dispose()


def add_worker(url: str, gpu_id: int, name: str, heartbeat_age_s: float) -> None:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            s.add(Worker(name=name, gpu_id=gpu_id, device_index=0, state="idle",
                         last_heartbeat_at=utcnow() - dt.timedelta(seconds=heartbeat_age_s)))
            s.commit()
    finally:
        engine.dispose()


class LiveServer:
    """`blocktune serve` in a subprocess on 127.0.0.1, as a user runs it."""

    def __init__(self, url: str, *extra: str, env: dict | None = None, worker: bool | None = False):
        """worker: --with-worker, --no-worker, or (None) neither: `blocktune serve` as the README runs it."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        e = dict(os.environ)
        e.update(env or {})
        e["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(self.port),
                                      "--database-url", url,
                                      *({True: ["--with-worker"], False: ["--no-worker"], None: []}[worker]),
                                      "--log-level", "warning", *extra],
                                     cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # drained as it comes: a server that logs a lot (a traceback per request) must not block
        # on a full pipe
        self._output: list[str] = []
        self._reader = threading.Thread(target=lambda: self._output.extend(self.proc.stdout), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise RuntimeError(f"server exited: {self.output}")
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not come up")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        return self.output

    @property
    def output(self) -> str:
        """What the server printed so far."""
        return "".join(self._output)
