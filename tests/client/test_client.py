"""The HTTP client against real servers: a live `blocktune serve`, and raw sockets that misbehave."""
from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from client import Client, ServiceError, ServiceUnavailable
from client.models import BestConfig, Job, Trial


class _ClosingServer:
    """Accepts TCP connections and closes them at once (or keeps them silent): counts attempts."""

    def __init__(self, silent: bool = False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.silent = silent
        self.held = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.silent:
                self.held.append(c)
            else:
                c.close()

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def test_retries_with_backoff_on_connection_errors():
    srv = _ClosingServer()
    try:
        c = Client(f"http://127.0.0.1:{srv.port}", retries=3, backoff=0.05)
        t0 = time.monotonic()
        with pytest.raises(ServiceUnavailable) as e:
            c.list_jobs()
        elapsed = time.monotonic() - t0
        assert srv.accepted == 4                       # 1 try + 3 retries
        assert elapsed >= 0.05 + 0.1 + 0.2 - 0.01      # exponential backoff between them
        assert "4 attempts" in str(e.value)
    finally:
        srv.close()


def test_timeout_on_a_silent_server():
    srv = _ClosingServer(silent=True)
    try:
        c = Client(f"http://127.0.0.1:{srv.port}", timeout=0.2, retries=1, backoff=0.01)
        t0 = time.monotonic()
        with pytest.raises(ServiceUnavailable):
            c.get_job(1)
        assert time.monotonic() - t0 < 2.0 and srv.accepted == 2
    finally:
        srv.close()


def test_retries_a_5xx_then_succeeds():
    calls = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            calls.append(self.path)
            if len(calls) < 3:
                self.send_response(503)
                self.end_headers()
                return
            body = b'{"items": [], "total": 0, "limit": 50, "offset": 0}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        page = Client(f"http://127.0.0.1:{httpd.server_address[1]}", retries=3, backoff=0.01).list_jobs()
        assert page.total == 0 and len(calls) == 3
    finally:
        httpd.shutdown()


def test_client_against_a_live_server(live):
    c = Client(live["url"], live["token"])
    assert c.health()["status"] == "ok"
    page = c.list_jobs()
    assert page.total == 3 and all(isinstance(j, Job) for j in page.items)
    assert c.list_jobs(state="running").items[0].id == live["running"]["job_id"]
    assert c.list_jobs(kernel="softmax").total == 1
    job = c.get_job(live["job_id"])
    assert job.done and job.state == "succeeded" and job.best_config == live["best"][1]
    trials = c.trials(live["job_id"])
    assert len(trials) == 10 and isinstance(trials[0], Trial) and trials[0].number == 0
    assert c.wait(live["job_id"], progress=True, timeout=5).state == "succeeded"
    best = c.best_config("f" * 64, {"n_elements": 98432}, "NVIDIA H100 80GB HBM3")
    assert isinstance(best, BestConfig) and best.match == "exact" and best.config == live["best"][1]
    assert c.best_config("f" * 64, {"n_elements": 98432}, "Other GPU") is None
    assert [k.name for k in c.kernels()] == ["add_kernel", "softmax", "queued_kernel"]
    assert c.gpus()[0].model == "NVIDIA H100 80GB HBM3"
    with pytest.raises(ServiceError) as e:
        c.get_job(10**6)
    assert e.value.status_code == 404
    with pytest.raises(ServiceError) as e:
        Client(live["url"]).cancel(live["running"]["job_id"])  # no token
    assert e.value.status_code == 401
    assert c.cancel(live["running"]["job_id"]).state == "cancelled"
    with pytest.raises(TimeoutError):
        c.wait(live["queued"]["job_id"], timeout=0.3, poll=0.05, progress=False)


def test_a_token_without_the_scope_gets_a_403_naming_it(live):
    from svc_helpers import make_token

    publisher = Client(live["url"], make_token(live["db"], "publisher", {"publish"}))
    with pytest.raises(ServiceError) as e:
        publisher.cancel(live["queued"]["job_id"])
    assert e.value.status_code == 403 and "lacks the 'submit' scope" in e.value.detail
    assert publisher.get_job(live["queued"]["job_id"]).state == "queued"       # reads are open here
