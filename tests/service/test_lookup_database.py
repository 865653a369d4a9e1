"""Lookups never wait on the database (issue 9, item 3): they answer from the in-memory index while
configs are published, while best_configs is locked, and while the database is down; a publish is
visible to the publisher's next lookup; the index catches up when the database is back."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time

import httpx
import pytest
import sqlalchemy as sa

from db.engine import make_engine
from db.migrate import upgrade
from db.models import BestConfig, utcnow
from svc_helpers import LiveServer, make_token

GPU = "NVIDIA L4"


def fill(url: str, kernels: int, keys: int = 20) -> list[dict]:
    """kernels × keys best configs on one GPU model; returns their lookup parameters."""
    engine = make_engine(url)
    rows, params = [], []
    for k in range(kernels):
        for j in range(keys):
            rows.append(dict(kernel_fingerprint=f"{k:064x}", kernel_name=f"kernel_{k}", problem_key=f'{{"n":{1024 << j}}}',
                             gpu_model=GPU, compute_capability="8.9", config={"BLOCK": 64}, median_ms=1.0 + j,
                             default_ms=2.0 + j, updated_at=utcnow()))
            params.append({"kernel": f"{k:064x}", "gpu_model": GPU, "key": json.dumps({"n": 1024 << j})})
    with engine.begin() as c:
        c.execute(sa.insert(BestConfig), rows)
    engine.dispose()
    return params


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


class _Lookups(threading.Thread):
    """Lookups on one keep-alive connection until stopped, with each one's latency and status."""

    def __init__(self, base: str, params: list[dict], headers: dict | None = None):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=base, headers=headers or {}, timeout=30)
        self.params, self.latencies, self.statuses = params, [], {}
        self.stop = threading.Event()

    def run(self):
        rnd = random.Random(0)
        while not self.stop.is_set():
            t0 = time.perf_counter()
            r = self.client.get("/api/v1/configs/best", params=rnd.choice(self.params))
            self.latencies.append(time.perf_counter() - t0)
            self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1

    def finish(self) -> None:
        self.stop.set()
        self.join(60)
        self.client.close()


def test_publishes_do_not_stall_lookups(db_url):
    """Before: each publish made the next lookup reload best_configs on the event loop (46–96 ms
    with a few thousand rows). Now a publish is applied to the index in its own thread."""
    params = fill(db_url, kernels=100)          # 2000 rows
    token = make_token(db_url)
    server = LiveServer(db_url)
    try:
        lookups = _Lookups(server.base, params)
        lookups.start()
        with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            for i in range(40):                   # ~10 publishes a second, each a faster config
                p = params[(i * 37) % len(params)]
                body = {"kernel_fingerprint": p["kernel"], "kernel_name": "k", "problem_key": json.loads(p["key"]),
                        "gpu_model": GPU, "compute_capability": "8.9", "config": {"BLOCK": 128 + i},
                        "median_ms": 0.5 - i * 0.001}
                assert c.post("/api/v1/configs", json=body).status_code == 200
                # the publisher's next lookup sees its write
                assert c.get("/api/v1/configs/best", params=p).json()["config"] == {"BLOCK": 128 + i}
                time.sleep(0.1)
        lookups.finish()
    finally:
        server.stop()
    lat = lookups.latencies
    assert lookups.statuses == {200: len(lat)} and len(lat) > 200
    slow = sum(x > 0.025 for x in lat)
    print(f"{len(lat)} lookups while publishing: p50 {_percentile(lat, 0.5) * 1e3:.2f} ms, "
          f"p99 {_percentile(lat, 0.99) * 1e3:.2f} ms, max {max(lat) * 1e3:.1f} ms, {slow} over 25 ms")
    # before: one lookup stalled 25–380 ms after each of the 40 publishes; allow a few stalls from
    # a loaded machine's scheduling
    assert slow <= 10, f"{slow} lookups over 25 ms"
    assert _percentile(lat, 0.99) < 0.030


def _timed_get(client: httpx.Client, path: str, **kw) -> tuple[httpx.Response, float]:
    t0 = time.perf_counter()
    r = client.get(path, **kw)
    return r, time.perf_counter() - t0


def test_lookups_and_healthz_answer_while_best_configs_is_locked(postgres_url):
    """Before: a table lock stalled every endpoint for the lock's duration (the index's version
    check ran on the event loop). Now the refresh thread waits on the lock, the lookups answer
    from memory, /healthz answers and tells how old the index is, and a publish queued behind the
    lock lands once it is released."""
    upgrade(postgres_url)
    params = fill(postgres_url, kernels=10)
    token = make_token(postgres_url)
    server = LiveServer(postgres_url, env={"BLOCKTUNE_LOOKUP_REFRESH_S": "0.2"})
    locker = make_engine(postgres_url)
    published: list = []
    try:
        c = httpx.Client(base_url=server.base, timeout=30)
        assert c.get("/api/v1/configs/best", params=params[0]).status_code == 200
        with locker.connect() as conn:
            conn.execute(sa.text("LOCK TABLE best_configs IN ACCESS EXCLUSIVE MODE"))   # held until rollback
            body = {"kernel_fingerprint": params[3]["kernel"], "kernel_name": "k", "problem_key": json.loads(params[3]["key"]),
                    "gpu_model": GPU, "compute_capability": "8.9", "config": {"BLOCK": 999}, "median_ms": 0.01}
            publisher = threading.Thread(target=lambda: published.append(httpx.post(
                server.base + "/api/v1/configs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)))
            publisher.start()
            t_end = time.monotonic() + 3.0       # 15 refresh periods, 3 of the old refresh interval
            worst, n, health = 0.0, 0, None
            while time.monotonic() < t_end:
                r, dt = _timed_get(c, "/api/v1/configs/best", params=params[n % len(params)])
                assert r.status_code == 200, r.text
                # a repeated parameter goes through the FastAPI route: memory too
                r2, dt2 = _timed_get(c, "/api/v1/configs/best", params=list(params[1].items()) + [("kernel", params[1]["kernel"])])
                assert r2.status_code == 200 and r2.json()["match"] == "exact"
                health, dt3 = _timed_get(c, "/healthz")
                assert health.status_code == 200
                worst, n = max(worst, dt, dt2, dt3), n + 1
            assert not published, "the publish should wait for the lock"
            index = health.json()["config_index"]
            assert index["checked_seconds_ago"] > 1.0 and index["stale"] is True, index
            conn.rollback()
        publisher.join(60)
        assert published and published[0].status_code == 200, published
        assert c.get("/api/v1/configs/best", params=params[3]).json()["config"] == {"BLOCK": 999}
        deadline = time.monotonic() + 10
        while c.get("/healthz").json()["config_index"]["stale"]:
            assert time.monotonic() < deadline, "the index did not catch up after the lock"
            time.sleep(0.1)
        c.close()
    finally:
        locker.dispose()
        server.stop()
    print(f"{n} rounds of lookup + routed lookup + /healthz under the lock, slowest {worst * 1e3:.1f} ms")
    assert n > 20 and worst < 1.0


class _Cluster:
    """A PostgreSQL cluster of this test's own, to stop and start (the shared one serves others)."""

    def __init__(self):
        from tests.conftest import _as_pg_user, _free_port, _pg_bindir

        self._as_pg_user, bindir = _as_pg_user, _pg_bindir()
        self.pg_ctl = f"{bindir}/pg_ctl"
        self.root = tempfile.mkdtemp(prefix="blocktune-pg-down-")
        self.data = os.path.join(self.root, "data")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = _free_port()
        subprocess.run(_as_pg_user([f"{bindir}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
                       check=True, capture_output=True)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def start(self):
        subprocess.run(self._as_pg_user([self.pg_ctl, "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-o",
                                         f"-h 127.0.0.1 -p {self.port} -k {self.root} -F", "start"]),
                       check=True, capture_output=True)

    def stop(self, mode: str = "fast"):
        subprocess.run(self._as_pg_user([self.pg_ctl, "-D", self.data, "-m", mode, "-w", "stop"]), capture_output=True)

    def remove(self):
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def cluster(postgres_server):    # postgres_server: fails loudly where PostgreSQL is not installed
    c = _Cluster()
    yield c
    c.remove()


def test_lookups_answer_from_memory_while_the_database_is_down(cluster):
    """Before: with the database down every lookup answered 500. Now lookups (fast path, FastAPI
    route, and with reads behind a token) answer from memory, /healthz and /metrics say the index
    is stale, a publish gets 503 — and when the database is back the index catches up."""
    upgrade(cluster.url)
    params = fill(cluster.url, kernels=5)
    token = make_token(cluster.url)
    auth = {"Authorization": f"Bearer {token}"}
    server = LiveServer(cluster.url, "--read-requires-token",
                        env={"BLOCKTUNE_LOOKUP_REFRESH_S": "0.2", "BLOCKTUNE_TOKEN_CACHE_TTL_S": "1"})
    try:
        c = httpx.Client(base_url=server.base, headers=auth, timeout=30)
        assert c.get("/api/v1/configs/best", params=params[0]).status_code == 200   # the token is now known
        cluster.stop()
        t_end = time.monotonic() + 4.0           # past the token cache's TTL
        n = 0
        while time.monotonic() < t_end:
            r, dt = _timed_get(c, "/api/v1/configs/best", params=params[n % len(params)])
            assert r.status_code == 200 and r.json()["match"] == "exact", r.text
            routed, dt2 = _timed_get(c, "/api/v1/configs/best", params=list(params[2].items()) + [("gpu_model", GPU)])
            assert routed.status_code == 200, routed.text
            assert max(dt, dt2) < 1.0
            n += 1
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["database"].startswith("error")
        index = health.json()["config_index"]
        assert index["stale"] is True and index["error"] and index["rows"] == len(params), index
        metrics = c.get("/metrics")
        assert metrics.status_code == 200 and "blocktune_config_index_refresh_failures_total" in metrics.text
        body = {"kernel_fingerprint": params[1]["kernel"], "kernel_name": "k", "problem_key": json.loads(params[1]["key"]),
                "gpu_model": GPU, "compute_capability": "8.9", "config": {"BLOCK": 7}, "median_ms": 0.01}
        down = c.post("/api/v1/configs", json=body)
        assert down.status_code == 503 and "database" in down.json()["detail"], down.text
        # a token never seen before cannot be checked: 503, not 401 and not 500
        unknown = c.get("/api/v1/configs/best", params=params[0], headers={"Authorization": "Bearer bt_unknown"})
        assert unknown.status_code == 503, unknown.text

        cluster.start()
        deadline = time.monotonic() + 20
        while (h := c.get("/healthz")).status_code != 200 or h.json()["config_index"]["stale"]:
            assert time.monotonic() < deadline, h.text
            time.sleep(0.2)
        assert c.post("/api/v1/configs", json=body).status_code == 200
        assert c.get("/api/v1/configs/best", params=params[1]).json()["config"] == {"BLOCK": 7}
        # a write by another process (a worker) reaches the index too: refreshes resumed
        engine = make_engine(cluster.url)
        with engine.begin() as conn:
            conn.execute(sa.update(BestConfig).where(BestConfig.kernel_fingerprint == params[4]["kernel"],
                                                     BestConfig.problem_key == json.dumps(json.loads(params[4]["key"]), separators=(",", ":")))
                         .values(config={"BLOCK": 4242}, updated_at=utcnow()))
        engine.dispose()
        deadline = time.monotonic() + 10
        while c.get("/api/v1/configs/best", params=params[4]).json()["config"] != {"BLOCK": 4242}:
            assert time.monotonic() < deadline, "the index did not pick up a write made after the outage"
            time.sleep(0.1)
        c.close()
    finally:
        out = server.stop()
    assert out.count("config index: cannot read the database") == 1, out   # said once per outage
    assert "config index: the database answers again" in out


def _cluster_pids(data_dir: str) -> list[int]:
    """The postmaster of a cluster (first line of postmaster.pid) and its children."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        main = int(f.readline())
    children = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == main:
                        children.append(int(d))
            except OSError:
                continue
    return [main, *children]


def test_healthz_and_lookups_answer_while_the_database_hangs(cluster):
    """A database that accepts connections and never answers (its processes stopped): lookups
    answer from memory, /healthz within its probe's bound (503, saying so) however often it is
    asked, and all is well again when the database resumes."""
    import signal

    upgrade(cluster.url)
    params = fill(cluster.url, kernels=3)
    server = LiveServer(cluster.url, env={"BLOCKTUNE_LOOKUP_REFRESH_S": "0.2"})
    pids: list[int] = []
    try:
        c = httpx.Client(base_url=server.base, timeout=30)
        assert c.get("/healthz").status_code == 200
        # the postmaster first (then no new backend can start), then every backend alive now: a
        # list taken earlier misses the connections the server opened since (they kept answering)
        pids = _cluster_pids(cluster.data)[:1]
        os.kill(pids[0], signal.SIGSTOP)
        pids += _cluster_pids(cluster.data)[1:]
        for pid in pids[1:]:
            os.kill(pid, signal.SIGSTOP)
        try:
            t_end, worst_lookup, worst_health, n = time.monotonic() + 6.0, 0.0, 0.0, 0
            while time.monotonic() < t_end:
                r, dt = _timed_get(c, "/api/v1/configs/best", params=params[n % len(params)])
                assert r.status_code == 200
                worst_lookup = max(worst_lookup, dt)
                if n % 20 == 0:
                    h, dh = _timed_get(c, "/healthz")
                    worst_health = max(worst_health, dh)
                    assert h.status_code in (200, 503)
                n += 1
            h = c.get("/healthz")
            assert h.status_code == 503 and "no answer within" in h.json()["database"], h.text
            assert h.json()["config_index"]["stale"] is True
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while (h := c.get("/healthz")).status_code != 200 or h.json()["config_index"]["stale"]:
            assert time.monotonic() < deadline, h.text
            time.sleep(0.2)
        c.close()
    finally:
        server.stop()
    print(f"{n} lookups while the database hung: slowest {worst_lookup * 1e3:.1f} ms; slowest /healthz "
          f"{worst_health:.2f} s")
    assert worst_lookup < 1.0 and worst_health < 3.0
