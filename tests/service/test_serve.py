"""`blocktune serve` as a user runs it: migrations on an empty database, the README's command on a
machine without a GPU (a CPU worker takes the job to the end, charts and all), --no-worker, and
what a job that no live worker can take says (the API, the dashboard, `Client.wait`)."""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from client import Client
from service.devices import INTERPRETER_MODEL
from svc_helpers import LiveServer, make_token

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}     # the driver sees no device: a machine without a GPU

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "add.yaml").read_text())


def test_serve_migrates_an_empty_database_and_says_jobs_wait(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    server = LiveServer(url)
    try:
        assert httpx.get(server.base + "/healthz").json()["database"] == "ok"
        assert httpx.get(server.base + "/api/v1/jobs").json()["total"] == 0
        assert httpx.get(server.base + "/").status_code == 200
    finally:
        out = server.stop()
    assert "applying migrations" in out
    assert "no worker in this process (--no-worker): jobs wait for a worker" in out


def test_the_readme_command_without_a_gpu_runs_a_job_to_the_end_on_a_cpu_worker(tmp_path):
    """`blocktune serve` with no flag, where there is no GPU: a CPU worker (the interpreter) runs in
    the process, registered as what it is, and a submitted job goes from queued to succeeded with
    its charts; the kernel checkers were started with the server (the first submission is fast)."""
    url = f"sqlite:///{tmp_path / 'readme.db'}"
    server = LiveServer(url, worker=None, env=NO_GPU)
    try:
        c = Client(server.base, make_token(url))
        assert c.health()["in_process_worker"] is True
        deadline = time.monotonic() + 60
        while "blocktune_kernel_checkers 2.0" not in httpx.get(server.base + "/metrics").text:
            assert time.monotonic() < deadline, "the kernel checkers were not started with the server"
            time.sleep(0.2)
        # the worker registers once its thread has started (seconds on a busy machine); until then a
        # job rightly says that it waits for one
        while not any(w["alive"] for w in httpx.get(server.base + "/api/v1/workers").json()):
            assert time.monotonic() < deadline, "the CPU worker did not register"
            time.sleep(0.2)
        t = time.monotonic()
        job = c.submit_job(SPEC)
        assert time.monotonic() - t < 5          # a warm checker answers (a cold one imports the compiler)
        assert job.state in ("queued", "running") and job.waiting_reason is None
        final = c.wait(job.id, poll=0.3, timeout=180, progress=False)
        assert final.state == "succeeded" and final.trials_done == 6 and final.best_config
        assert final.gpu_model == INTERPRETER_MODEL
        (w,) = httpx.get(server.base + "/api/v1/workers").json()
        assert w["alive"] and w["kind"] == "cpu" and w["gpu_model"] == INTERPRETER_MODEL
        assert re.fullmatch(r".+-cpu0", w["name"])
        (g,) = httpx.get(server.base + "/api/v1/gpus").json()
        assert g["kind"] == "cpu" and g["alive_workers"] == 1
        assert g["compute_capability"] is None and g["sm_count"] is None and g["total_memory"] is None
        page = httpx.get(f"{server.base}/jobs/{job.id}").text
        assert page.count('class="trial-point"') == 6 and 'class="best-line"' in page
        assert "CPU interpreter" in page and 'data-field="waiting_reason" hidden' in page
        gpus = httpx.get(server.base + "/gpus").text
        assert "cpu-row" in gpus and "no GPU: the CPU interpreter runs the kernels" in gpus
        assert "132" not in gpus and "0.0" not in gpus
    finally:
        out = server.stop()
    assert "no CUDA GPU found: running a CPU (interpreter) worker" in out and "`--no-worker` turns it off" in out


def test_a_job_no_live_worker_can_take_says_what_it_waits_for(tmp_path, caplog, capsys):
    url = f"sqlite:///{tmp_path / 'waiting.db'}"
    server = LiveServer(url, worker=False)
    try:
        c = Client(server.base, make_token(url))
        job = c.submit_job(SPEC)
        no_one = ("waiting for a worker (the job names no GPU model: any worker takes it); no worker is alive: "
                  "start one with `blocktune worker --device N` on a GPU machine, or `blocktune worker --interpret` "
                  "on the CPU")
        assert job.waiting_reason == no_one
        assert c.get_job(job.id).waiting_reason == no_one
        (listed,) = c.list_jobs().items
        assert listed.waiting_reason == no_one
        page = httpx.get(f"{server.base}/jobs/{job.id}").text
        assert f'<p class="waiting" data-field="waiting_reason">{no_one}</p>' in page
        with caplog.at_level(logging.WARNING, logger="blocktune.client"):
            with pytest.raises(TimeoutError) as exc:
                c.wait(job.id, poll=0.2, timeout=0.5, progress=False)
        assert str(exc.value) == f"job {job.id} still queued after 0.5s: {no_one}"
        assert [r.getMessage() for r in caplog.records] == [f"job {job.id}: {no_one}"]
        with pytest.raises(TimeoutError):
            c.wait(job.id, poll=0.2, timeout=0.5, progress=True)
        assert "waiting for a worker" in capsys.readouterr().out
        c.cancel(job.id)

        # a CPU worker is alive, but the job is for a GPU model: the CPU worker does not take it, and
        # the job says who is alive
        from service.worker import Worker

        worker = Worker(url, interpret=True, name="laptop:cpu0", poll_seconds=0.2, heartbeat_seconds=0.5)
        worker.start_thread()
        try:
            pinned = c.submit_job(SPEC, gpu_model="NVIDIA H100 80GB HBM3")
            expected = ("waiting for a worker with GPU model NVIDIA H100 80GB HBM3; 1 worker alive: "
                        "laptop:cpu0 (CPU (interpreter)), none of them for this job's GPU model")
            deadline = time.monotonic() + 30
            while c.get_job(pinned.id).waiting_reason != expected:
                assert time.monotonic() < deadline, c.get_job(pinned.id).waiting_reason
                time.sleep(0.2)
            time.sleep(1.0)              # several claim rounds of the CPU worker
            assert c.get_job(pinned.id).state == "queued"
            # a job for the interpreter is taken and says nothing
            cpu_job = c.submit_job(SPEC, gpu_model=INTERPRETER_MODEL)
            assert cpu_job.waiting_reason is None
            assert c.wait(cpu_job.id, poll=0.3, timeout=180, progress=False).state == "succeeded"
        finally:
            worker.stop()
            worker.join(30)
        # the worker stopped: nobody is alive any more
        assert c.get_job(pinned.id).waiting_reason == (
            "waiting for a worker with GPU model NVIDIA H100 80GB HBM3; no worker is alive: start one with "
            "`blocktune worker --device N` on a machine with a NVIDIA H100 80GB HBM3")
    finally:
        server.stop()


def test_serve_with_in_process_worker(tmp_path):
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    server = LiveServer(url, "--interpret", worker=True)
    try:
        c = Client(server.base, make_token(url))
        assert c.health()["in_process_worker"] is True
        job = c.submit_job(SPEC)
        final = c.wait(job.id, poll=0.3, timeout=180, progress=False)
        assert final.state == "succeeded" and final.trials_done == 6
        ws = httpx.get(server.base + "/api/v1/workers").json()
        assert len(ws) == 1 and ws[0]["alive"] and ws[0]["gpu_model"] == "blocktune interpreter (CPU)"
    finally:
        out = server.stop()
    assert "running a CPU (interpreter) worker in this process" in out


def test_serve_runs_on_uvloop_and_httptools(tmp_path):
    """uvicorn[standard] is a dependency, and `blocktune serve` runs on what it brings."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from service.commands import server_config, server_implementation
    from service.core.config import Settings

    config = server_config(lambda scope, receive, send: None, Settings())
    assert config.http_protocol_class is HttpToolsProtocol and server_implementation(config) == "uvloop, httptools"
    server = LiveServer(f"sqlite:///{tmp_path / 'loop.db'}")
    try:
        assert httpx.get(server.base + "/healthz").json()["event_loop"] == "uvloop"   # what the process runs on
    finally:
        out = server.stop()
    assert "uvloop, httptools)" in out
