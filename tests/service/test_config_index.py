"""The lookup's in-memory index (service/lookup.py) with a real database: memoized answers that
follow every change, a publish that spares the refresh thread a table scan, other writers'
changes picked up by the refresh."""
from __future__ import annotations

import json

import sqlalchemy as sa
from fastapi.testclient import TestClient

from db.engine import make_engine
from db.models import BestConfig, utcnow
from service.app import create_app
from service.core.config import Settings
from svc_helpers import make_token, seed

H100, PCIE = "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"
SCAN = "SELECT id, updated_at, median_ms FROM best_configs"


def _publish(c, token, fp, name, key, gpu, cc, config, ms):
    r = c.post("/api/v1/configs", headers={"Authorization": f"Bearer {token}"},
               json={"kernel_fingerprint": fp, "kernel_name": name, "problem_key": key, "gpu_model": gpu,
                     "compute_capability": cc, "config": config, "median_ms": ms})
    assert r.status_code == 200, r.text


def test_memoized_answers_follow_every_change(db_url):
    seed(db_url, key={"n": 4096})                     # kernel "add_kernel", fingerprint f…f, on the H100
    token = make_token(db_url)
    with TestClient(create_app(Settings(database_url=db_url), database_url=db_url)) as c:
        def look(kernel, gpu, key='{"n": 4096}'):
            r = c.get("/api/v1/configs/best", params={"kernel": kernel, "gpu_model": gpu, "key": key})
            return r.status_code, r.json()
        by_name = look("add_kernel", H100)
        assert by_name[0] == 200 and look("f" * 64, H100) == by_name
        assert look("f" * 64, PCIE)[0] == 404           # the PCIe card's compute capability is unknown yet
        other = look("e" * 64, H100)
        assert other[0] == 404
        # a faster config under the fingerprint: the answers by name and by fingerprint both change
        _publish(c, token, "f" * 64, "add_kernel", {"n": 4096}, H100, "9.0", {"BLOCK": 7}, 0.001)
        assert look("add_kernel", H100)[1]["config"] == {"BLOCK": 7} == look("f" * 64, H100)[1]["config"]
        # another kernel tuned on the PCIe card makes its compute capability known: answers about
        # every kernel on that card change (the first now matches by compute capability)
        _publish(c, token, "d" * 64, "other", {"n": 1}, PCIE, "9.0", {"BLOCK": 1}, 1.0)
        status, body = look("f" * 64, PCIE)
        assert status == 200 and body["match"] == "compute_capability" and body["config"] == {"BLOCK": 7}
        # a new kernel: its earlier miss is not served from the memo
        _publish(c, token, "e" * 64, "third", {"n": 4096}, H100, "9.0", {"BLOCK": 3}, 1.0)
        assert look("e" * 64, H100)[1]["config"] == {"BLOCK": 3}
        # a nearest-key answer changes when a nearer key is tuned
        assert look("f" * 64, H100, '{"n": 5000}')[1]["problem_key"] == {"n": 4096}
        _publish(c, token, "f" * 64, "add_kernel", {"n": 5120}, H100, "9.0", {"BLOCK": 5}, 1.0)
        assert look("f" * 64, H100, '{"n": 5000}')[1]["problem_key"] == {"n": 5120}


def test_a_publish_spares_the_refresh_a_scan_and_other_writers_are_picked_up(db_url):
    seed(db_url, key={"n": 4096})
    token = make_token(db_url)
    with TestClient(create_app(Settings(database_url=db_url, lookup_refresh_s=3600), database_url=db_url)) as c:
        index = c.app.state.config_index
        scans: list[str] = []
        sa.event.listen(c.app.state.engine, "before_cursor_execute",
                        lambda conn, cur, stmt, *a: scans.append(stmt) if stmt.startswith(SCAN) else None)
        for i in range(5):
            _publish(c, token, "a" * 64, "k", {"n": i}, H100, "9.0", {"BLOCK": i}, 1.0)
        assert index.refresh() is False and scans == []      # in step: nothing to read again
        # a write by another process (a worker's job winner): the refresh reads the table and fetches it
        engine = make_engine(db_url)
        with engine.begin() as conn:
            conn.execute(sa.update(BestConfig).where(BestConfig.kernel_fingerprint == "f" * 64)
                         .values(config={"BLOCK": 99}, median_ms=0.5, updated_at=utcnow()))
        engine.dispose()
        assert index.refresh() is True and len(scans) == 1
        r = c.get("/api/v1/configs/best", params={"kernel": "f" * 64, "gpu_model": H100, "key": json.dumps({"n": 4096})})
        assert r.json()["config"] == {"BLOCK": 99}
        # a publish after another writer's change: not in step, so the refresh reads the table
        engine = make_engine(db_url)
        with engine.begin() as conn:
            conn.execute(sa.update(BestConfig).where(BestConfig.kernel_fingerprint == "f" * 64)
                         .values(median_ms=0.4, updated_at=utcnow()))
        engine.dispose()
        _publish(c, token, "a" * 64, "k", {"n": 99}, H100, "9.0", {"BLOCK": 1}, 1.0)
        assert index.refresh() is True and len(scans) == 2
        assert c.get("/api/v1/configs/best", params={"kernel": "f" * 64, "gpu_model": H100,
                                                     "key": '{"n": 4096}'}).json()["median_ms"] == 0.4
