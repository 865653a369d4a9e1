"""The database stopped for 15 s under a worker in the middle of a job and under config lookups.

A PostgreSQL cluster of the test's own (the session's shared one must not be stopped), a real
worker process (service.worker.Worker in interpret mode, paused after 3 trials so that the
outage lands mid-job), a real uvicorn serving the API; `pg_ctl stop -m fast`, 15 s, start again
on the same port. The worker must survive and finish the job with exactly its budget, no trial
lost or counted twice, its lease kept; lookups must answer 200 from memory throughout.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import optuna
import pytest
import sqlalchemy as sa

from db.migrate import upgrade
from svc_helpers import LiveServer, make_token, seed
from tests.conftest import _as_pg_user, _free_port, _pg_bindir
from worker_helpers import bigger_spec, counted, start_pausable_worker, study_trials, trials_of, wait_exit, \
    wait_paused

OUTAGE_S = 15
BUDGET = 12


class PgCluster:
    """A PostgreSQL cluster of one test: initdb, start, stop (-m fast), start again on its port."""

    def __init__(self):
        self.bindir = _pg_bindir()
        self.root = tempfile.mkdtemp(prefix="blocktune-pg-fault-")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self.port = _free_port()
        self.base_url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"
        self._pg(["initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"])

    def _pg(self, cmd: list[str]) -> None:
        cmd = [f"{self.bindir}/{cmd[0]}", *cmd[1:]]
        r = subprocess.run(_as_pg_user(cmd), capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}: {r.stdout}{r.stderr}"

    def start(self) -> None:
        self._pg(["pg_ctl", "-D", self.data, "-l", self.log, "-w", "-o",
                  f"-h 127.0.0.1 -p {self.port} -k {self.root} -F", "start"])

    def stop(self, mode: str = "fast") -> None:
        self._pg(["pg_ctl", "-D", self.data, "-m", mode, "-w", "stop"])

    def remove(self) -> None:
        subprocess.run(_as_pg_user([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def own_postgres():
    cluster = PgCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.remove()


class Lookups(threading.Thread):
    """GET /api/v1/configs/best in a loop (an exact match and a nearest-key one, in turn); every
    answer is kept with its time: (monotonic start, seconds, status or exception name, body)."""

    def __init__(self, base: str, queries: list[dict]):
        super().__init__(daemon=True)
        self.base, self.queries = base, queries
        self.answers: list[tuple[float, float, int | str, dict | None]] = []
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=2.0) as c:
            i = 0
            while not self.done.is_set():
                q = self.queries[i % len(self.queries)]
                i += 1
                t0 = time.monotonic()
                try:
                    r = c.get("/api/v1/configs/best", params=q)
                    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
                    self.answers.append((t0, time.monotonic() - t0, r.status_code, body))
                except (httpx.HTTPError, ValueError) as exc:
                    self.answers.append((t0, time.monotonic() - t0, type(exc).__name__, None))
                self.done.wait(0.05)


def test_database_down_for_15_s_under_a_worker_and_lookups(own_postgres, tmp_path):
    admin = sa.create_engine(f"{own_postgres.base_url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text('CREATE DATABASE "blocktune"'))
    admin.dispose()
    url = f"{own_postgres.base_url}/blocktune"
    upgrade(url)
    seeded = seed(url)     # a tuned config to look up: answered from the server's memory
    fp, gpu = "f" * 64, "NVIDIA H100 80GB HBM3"
    queries = [{"kernel": fp, "key": json.dumps({"n_elements": 98432}), "gpu_model": gpu},
               {"kernel": "add_kernel", "key": json.dumps({"n_elements": 50000}), "gpu_model": gpu}]
    server = LiveServer(url)
    worker = lookups = None
    try:
        for q in queries:   # answered before the outage (the index is loaded)
            r = httpx.get(server.base + "/api/v1/configs/best", params=q)
            assert r.status_code == 200 and r.json()["config"] == seeded["best"][1], r.text
        r = httpx.post(server.base + "/api/v1/jobs", json=bigger_spec(BUDGET),
                       headers={"Authorization": f"Bearer {make_token(url)}"})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        worker, paused, resume = start_pausable_worker(url, "survivor", 3, tmp_path, "--lease", "30",
                                                       "--heartbeat", "1")
        wait_paused(worker, paused)
        lookups = Lookups(server.base, queries)
        lookups.start()
        time.sleep(1.0)

        own_postgres.stop("fast")                         # the database goes away mid-job
        down_at, down_wall = time.monotonic(), time.time()
        resume.write_text("go")                           # the worker goes on into the outage
        time.sleep(OUTAGE_S)
        assert worker.poll() is None, worker.stdout.read()[-3000:]   # alive through the outage
        up_at = time.monotonic()
        own_postgres.start()                              # same port, same data
        back_at, back_wall = time.monotonic(), time.time()

        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and trials_of(url, job_id)[0]["state"] == "running":
            assert worker.poll() is None, worker.stdout.read()[-3000:]
            time.sleep(0.3)
        time.sleep(1.0)
        lookups.done.set()
        lookups.join(10)
        assert worker.poll() is None                      # still a worker: it goes back to polling
        worker.send_signal(signal.SIGTERM)
        out = wait_exit(worker, 60)
    finally:
        if lookups is not None:
            lookups.done.set()
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        server.stop()
        server_log = server.output

    # the worker rode the outage out and said so
    assert worker.returncode == 0 and "survivor stopped" in out, out[-3000:]
    assert "database unavailable" in out and "database reachable again" in out, out[-3000:]
    # the job: exactly its budget, every trial once, the lease never lost
    job, rows = trials_of(url, job_id)
    assert job["state"] == "succeeded", (job["error"], out[-3000:])
    assert job["claimed_by"] == "survivor"
    mine = counted(rows)
    assert len(mine) == job["trials_done"] == BUDGET, [(r.number, r.status) for r in rows]
    assert len({r.number for r in rows}) == len(rows)
    assert len({json.dumps(r.config, sort_keys=True) for r in mine}) == BUDGET     # none measured twice
    assert sum(r.worker == "survivor" for r in mine) == BUDGET
    assert len([r for r in mine if r.created_at.timestamp() < down_wall]) >= 3          # mid-job, for real
    assert [r for r in mine if r.created_at.timestamp() > back_wall]
    # nothing lost: every trial Optuna asked was told, and each one measured is in tuning_trials
    recorded = {r.number for r in rows}
    for t in study_trials(url, job_id):
        if "duplicate_of" in t.user_attrs:      # asked while its twin was in flight: pruned, never measured
            assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["duplicate_of"] in recorded, \
                (t.number, t.state, t.user_attrs)
            continue
        assert t.state == optuna.trial.TrialState.COMPLETE, (t.number, t.state, t.user_attrs)
        assert t.number in recorded or "repeat_of" in t.user_attrs, (t.number, t.user_attrs)

    # lookups answered from memory all along: before, during and after the outage
    answers = lookups.answers
    during = [a for a in answers if down_at <= a[0] <= up_at]
    bad = [(round(t - down_at, 2), round(d, 3), status) for t, d, status, body in answers
           if status != 200 or body is None or body.get("config") != seeded["best"][1]]
    assert not bad, (f"{len(bad)} of {len(answers)} lookups failed ({len(during)} asked during the outage, the "
                     f"database back after {back_at - down_at:.1f} s); (s since the stop, s, answer): "
                     f"{bad[:5]} … {bad[-5:]}\n{server_log[-1500:]}")
    assert len(during) >= 100, len(during)            # ~20/s asked: none of them waited on the database
    assert max(d for _, d, _, _ in during) < 1.0


def test_a_worker_started_while_the_database_is_down_waits_for_it(own_postgres):
    """`blocktune worker` checks the database's migrations first: with the database away it waits
    (as a running worker does through an outage) instead of exiting, and registers once it is back."""
    url = f"{own_postgres.base_url}/postgres"
    upgrade(url)
    own_postgres.stop()
    env = {**os.environ, "BLOCKTUNE_DATABASE_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--interpret", "--exit-when-idle", "--poll", "0.2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(4)
        assert proc.poll() is None, proc.communicate()[0]          # still waiting, not exited
        own_postgres.start()
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert "checking the database's migrations" in out, out     # the outage was logged, then ridden out
        engine = sa.create_engine(url)
        try:
            with engine.connect() as c:
                assert c.execute(sa.text("SELECT count(*) FROM workers")).scalar() == 1
        finally:
            engine.dispose()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
