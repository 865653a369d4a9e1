"""BLOCKTUNE_SUBMIT_ON_MISS=1 end to end: @autotune kernels launched in interpret mode against a
live `blocktune serve` on 127.0.0.1. A lookup miss submits one tuning job per key and process,
with the launch's spec; the job runs on the tuner and its winner then serves the kernel's next
launch; a grid that cannot be expressed, or a service that refuses, costs one warning and no job;
the launch never waits for the submission."""
from __future__ import annotations

import json
import math
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest

import compiler as triton
import compiler.language as tl
from client import lookup
from client.compiler_plugin import forget, wait_for_submissions
from jobspec.device import INTERPRETER_MODEL

CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=2)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scaled_on_miss(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned_on_miss(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) - 2, mask=offs < n)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def odd_grid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def run_scaled(n: int) -> np.ndarray:
    """How a user launches it: the grid is a lambda over a local copy of the size."""
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    scaled_on_miss[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
    np.testing.assert_allclose(out, x * 3)
    return out


def run_tuned(n: int) -> None:
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    tuned_on_miss[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
    np.testing.assert_allclose(out, x - 2)


def run_odd(n: int) -> None:
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    odd_grid_kernel[lambda META: (math.ceil(n / META["BLOCK"]),)](x, out, n)   # not safe-evaluable
    np.testing.assert_allclose(out, x + 1)


def jobs_of(base: str, kernel: str) -> list[dict]:
    page = httpx.get(f"{base}/api/v1/jobs", params={"kernel": kernel, "limit": 500}).json()
    return [httpx.get(f"{base}/api/v1/jobs/{j['id']}").json() for j in page["items"]]


def fresh(kernel) -> None:
    """As a new process would see the kernel: no per-key caches."""
    kernel.cache.clear()
    forget(kernel)


@pytest.fixture
def env(monkeypatch, tmp_path, live):
    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", live["url"])
    monkeypatch.setenv("BLOCKTUNE_TOKEN", live["token"])
    monkeypatch.setenv("BLOCKTUNE_SUBMIT_ON_MISS", "1")
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    lookup.reset()
    for k in (scaled_on_miss, tuned_on_miss, odd_grid_kernel):
        fresh(k)
    yield live
    assert wait_for_submissions(30)
    lookup.reset()


def test_a_miss_submits_one_job_per_key_with_the_launch_spec(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # no warning on this path
        run_scaled(100)
        assert wait_for_submissions(30)
    jobs = jobs_of(env["url"], "scaled_on_miss")
    assert len(jobs) == 1
    job = jobs[0]
    assert job["state"] == "queued" and job["gpu_model"] == INTERPRETER_MODEL
    assert job["kernel_fingerprint"] == scaled_on_miss.fingerprint   # its results reach our lookups
    spec = job["spec"]
    assert spec["kernel"]["name"] == "scaled_on_miss"
    assert "def scaled_on_miss(x_ptr, out_ptr, n, BLOCK: tl.constexpr):" in spec["kernel"]["source"]
    assert "numpy" not in spec["kernel"]["source"] and "run_scaled" not in spec["kernel"]["source"]
    assert spec["key"] == ["n"]
    assert spec["grid"] == ["cdiv(n, BLOCK)"]
    assert spec["space"] == {"BLOCK": [16, 64], "num_warps": [2, 4], "num_stages": [3]}
    assert spec["configs"][:2] == [{"BLOCK": 16, "num_warps": 4, "num_stages": 3},
                                   {"BLOCK": 64, "num_warps": 2, "num_stages": 3}]
    assert spec["check"]["outputs"] == ["out_ptr"]
    args = {a["name"]: a for a in spec["args"]}
    assert args["x_ptr"]["tensor"]["shape"] == [100] and args["x_ptr"]["tensor"]["init"] == "randn"
    assert args["out_ptr"]["tensor"]["init"] == "zeros" and args["n"]["value"] == 100

    for _ in range(50):                                   # the same key again: nothing new
        run_scaled(100)
    assert wait_for_submissions(30)
    assert len(jobs_of(env["url"], "scaled_on_miss")) == 1
    run_scaled(200)                                       # a new key: one more job
    assert wait_for_submissions(30)
    jobs = jobs_of(env["url"], "scaled_on_miss")
    assert len(jobs) == 2 and sorted(j["spec"]["args"][2]["value"] for j in jobs) == [100, 200]


def test_the_submitted_job_tunes_and_its_winner_serves_the_next_launch(env):
    """Its own kernel: once the service holds a winner for a kernel, it answers the kernel's other
    keys with the nearest tuned key's winner, which is a hit, not a miss."""
    from tuner.engine import run_job

    run_tuned(300)
    assert wait_for_submissions(30)
    (job,) = jobs_of(env["url"], "tuned_on_miss")
    run_job(env["db"], job["id"], interpret=True)         # what a worker does with it
    done = httpx.get(f"{env['url']}/api/v1/jobs/{job['id']}").json()
    assert done["state"] == "succeeded" and done["trials_done"] == 4, done["error"]
    time.sleep(1.1)                                       # the server re-reads best_configs at most once a second
    lookup.reset()
    fresh(tuned_on_miss)
    run_tuned(300)
    assert lookup.stats["hits"] == 1
    best = done["best_config"]
    assert tuned_on_miss.best_config.kwargs == {"BLOCK": best["BLOCK"]}
    assert tuned_on_miss.best_config.num_warps == best["num_warps"]
    assert wait_for_submissions(30)
    assert len(jobs_of(env["url"], "tuned_on_miss")) == 1


def test_an_inexpressible_grid_warns_once_and_submits_nothing(env):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (10, 20, 30, 10, 20):
            run_odd(n)
        assert wait_for_submissions(30)
    ours = [x for x in w if "not submitting a tuning job" in str(x.message)]
    assert len(ours) == 1 and len(w) == 1, [str(x.message) for x in w]
    msg = str(ours[0].message)
    assert "odd_grid_kernel" in msg and "grid" in msg and "math.ceil" in msg
    launch_line = next(i for i, line in enumerate(open(__file__), 1) if "odd_grid_kernel[lambda" in line)
    assert (ours[0].filename, ours[0].lineno) == (__file__, launch_line)   # points at the user's launch
    assert jobs_of(env["url"], "odd_grid_kernel") == []


def test_a_refused_submission_warns_once(env, monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_TOKEN", "bt_not-a-token")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (400, 401, 402):
            run_scaled(n)
            assert wait_for_submissions(30)
    assert len(w) == 1 and issubclass(w[0].category, lookup.LookupWarning) and "HTTP 401" in str(w[0].message)
    assert not [j for j in jobs_of(env["url"], "scaled_on_miss") if j["spec"]["args"][2]["value"] >= 400]


def test_without_a_token_it_says_so_once(env, monkeypatch):
    monkeypatch.delenv("BLOCKTUNE_TOKEN")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (500, 501):
            run_scaled(n)
    assert len(w) == 1 and "needs BLOCKTUNE_TOKEN" in str(w[0].message)


class _SlowJobsService:
    """Stands in for a service that is slow to accept jobs: lookups miss at once, POST /jobs
    answers after `delay` seconds. Records the submitted bodies."""

    def __init__(self, delay: float):
        outer = self
        self.bodies: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(404, {"detail": "no tuned config"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                time.sleep(delay)
                outer.bodies.append(body)
                self._send(201, {"id": len(outer.bodies)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_launch_does_not_wait_for_the_submission(env, monkeypatch):
    slow = _SlowJobsService(delay=2.0)
    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", slow.url)
    lookup.reset()
    try:
        t0 = time.monotonic()
        run_scaled(600)
        took = time.monotonic() - t0
        assert took < 1.5 and not slow.bodies           # the launch is back; the job is still in flight
        assert wait_for_submissions(30)
        assert len(slow.bodies) == 1 and slow.bodies[0]["kernel"]["name"] == "scaled_on_miss"
    finally:
        slow.close()
