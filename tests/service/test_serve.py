"""`blocktune serve` as a user runs it: migrations on an empty database, the no-GPU message, and
the in-process worker (interpret mode here) completing a job submitted through the client."""
from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from client import Client
from svc_helpers import LiveServer, make_token

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
    assert "jobs will wait for a worker" in out


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
    assert "running a worker on device 0 (interpret mode)" in out


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
