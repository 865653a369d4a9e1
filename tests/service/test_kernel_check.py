"""Submission checks run in checker processes with CPU-time, memory and wall-clock limits: a hostile
kernel is a 422 naming what it hit, in bounded time, and the next submission is checked as usual
(the checker was replaced); a full queue is a 503 with Retry-After."""
from __future__ import annotations

import contextlib
import time

import pytest
from fastapi.testclient import TestClient
from hostile import CPU_BURNER, ISSUE_SOURCES, MEMORY_HOG, SPEC
from svc_helpers import make_token

from service.app import create_app
from service.core.config import Settings
from service.kernel_check import CheckerBusy, CheckLimits, CheckRejected, KernelChecker


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


@pytest.mark.parametrize("case", sorted(ISSUE_SOURCES))
def test_issue_hostile_sources_are_422_with_a_clear_message_in_bounded_time(sqlite_api, case):
    spec, reason = ISSUE_SOURCES[case]
    t = time.monotonic()
    r = sqlite_api.post("/api/v1/jobs", json=spec, headers=auth(sqlite_api.token))
    took = time.monotonic() - t
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["field"] == "body.kernel.source" and reason in d["reason"], d
    assert "<submitted>:" in d["reason"]           # file:line:col of the compiler's diagnostic
    assert took < 30, f"answered after {took:.1f} s"   # a checker's start (~1 s) + the check (ms)


@contextlib.contextmanager
def _client(db_url: str, **settings):
    app = create_app(Settings(database_url=db_url, **settings), database_url=db_url)
    with TestClient(app, raise_server_exceptions=False) as c:
        c.token = make_token(db_url)
        yield c


@pytest.mark.parametrize("settings,hostile,reason", [
    ({"kernel_check_cpu_seconds": 1}, CPU_BURNER, "kernel check exceeded its CPU-time limit of 1 s"),
    ({"kernel_check_memory_mb": 400}, MEMORY_HOG, "kernel check exceeded its memory limit of 400 MiB"),
    ({"kernel_check_cpu_seconds": 600, "kernel_check_timeout_seconds": 1.5}, CPU_BURNER,
     "kernel check exceeded its time limit of 1.5 s"),
], ids=["cpu", "memory", "wall-clock"])
def test_a_check_over_a_limit_is_a_422_and_the_next_check_works(sqlite_db, settings, hostile, reason):
    with _client(sqlite_db, kernel_check_workers=1, **settings) as c:
        assert c.post("/api/v1/jobs", json=SPEC, headers=auth(c.token)).status_code == 201
        t = time.monotonic()
        r = c.post("/api/v1/jobs", json=hostile, headers=auth(c.token))
        took = time.monotonic() - t
        assert r.status_code == 422, r.text
        d = r.json()["detail"][0]
        assert d["field"] == "body.kernel.source" and d["reason"] == reason, d
        assert took < 60, f"answered after {took:.1f} s"
        # the checker that hit the limit is gone; a fresh one checks the next submission
        assert c.post("/api/v1/jobs", json=SPEC, headers=auth(c.token)).status_code == 201
        assert c.get("/api/v1/jobs").json()["total"] == 2


def test_the_api_process_never_compiles(sqlite_db):
    """The check runs in a checker process: a kernel that would take the API down there is refused
    while the API process's own memory stays small."""
    import resource

    with _client(sqlite_db, kernel_check_workers=1, kernel_check_memory_mb=400) as c:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = c.post("/api/v1/jobs", json=MEMORY_HOG, headers=auth(c.token))
        assert r.status_code == 422
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000    # KiB: not its 800 MB


def test_a_full_queue_is_refused_at_once_and_a_long_wait_is_refused_too():
    limits = CheckLimits(cpu_seconds=3, memory_mb=1024, timeout_seconds=60)
    kc = KernelChecker(workers=1, queue=1, limits=limits, queue_wait_seconds=0.5)
    try:
        burning = kc.submit(CPU_BURNER)          # runs (≥ 3 s of CPU: its limit)
        waiting = kc.submit(SPEC)                # waits behind it
        with pytest.raises(CheckerBusy) as info:  # nothing else fits: refused at once
            kc.submit(SPEC)
        assert info.value.retry_after == 60 and "busy" in str(info.value)
        with pytest.raises(CheckRejected, match="CPU-time limit of 3 s"):
            burning.result(timeout=120)
        with pytest.raises(CheckerBusy, match="no kernel checker was free for"):
            waiting.result(timeout=120)          # it waited longer than 0.5 s
        assert kc.submit(SPEC).result(timeout=120).kernel_name == "add_kernel"   # free again
    finally:
        kc.close()
