"""Token checks are cheap (issue 9, item 3): a verified token is remembered by its hash for
`token_cache_ttl_s`, so reads and writes with a token cost no database query for it, and the
lookup's fast path answers token-authenticated lookups itself. Revocation: at once through this
server, within the TTL when revoked elsewhere (the CLI, another server process)."""
from __future__ import annotations

import time

import sqlalchemy as sa
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.repo import revoke_token
from service.app import create_app
from service.core.config import Settings
from svc_helpers import make_token, seed

H100 = "NVIDIA H100 80GB HBM3"
LOOKUP = {"kernel": "f" * 64, "gpu_model": H100, "key": '{"n_elements": 98432}'}


def _client(url: str, **settings) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, read_requires_token=True, **settings), database_url=url),
                      raise_server_exceptions=False)


def _count_token_queries(engine) -> list[str]:
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _count(conn, cursor, statement, parameters, context, executemany):
        if "api_tokens" in statement:
            seen.append(statement.split()[0])
    return seen


def test_a_token_is_checked_against_the_database_once_per_ttl(db_url):
    seed(db_url)
    token = make_token(db_url)
    auth = {"Authorization": f"Bearer {token}"}
    with _client(db_url, token_cache_ttl_s=300) as c:
        queries = _count_token_queries(c.app.state.engine)
        for _ in range(300):
            r = c.get("/api/v1/configs/best", params=LOOKUP, headers=auth)
            assert r.status_code == 200 and r.json()["match"] == "exact"
        for _ in range(30):
            assert c.get("/api/v1/jobs", headers=auth).status_code == 200
            assert c.get("/api/v1/configs/best", params=LOOKUP, headers={"X-API-Token": token}).status_code == 200
        for i in range(10):
            body = {"kernel_fingerprint": "c" * 64, "kernel_name": "k", "problem_key": {"n": i}, "gpu_model": "G",
                    "compute_capability": "9.0", "config": {"B": 1}, "median_ms": 1.0}
            assert c.post("/api/v1/configs", json=body, headers=auth).status_code == 200
        # one look-up of the token and one write of its last_used_at, for 370 requests
        assert sorted(queries) == ["SELECT", "UPDATE"], queries


def test_bad_or_missing_tokens_still_get_401(db_url):
    token = make_token(db_url)
    with _client(db_url) as c:
        assert c.get("/api/v1/configs/best", params=LOOKUP, headers={"Authorization": f"Bearer {token}"}).status_code == 404
        for headers in ({}, {"Authorization": "Bearer bt_not-a-token"}, {"X-API-Token": token + "x"},
                        {"Authorization": f"Basic {token}"}):
            r = c.get("/api/v1/configs/best", params=LOOKUP, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", headers
            assert "token" in r.json()["detail"]


def test_revocation_takes_effect_within_the_ttl(db_url):
    seed(db_url)
    keeper, revoked = make_token(db_url, "keeper"), make_token(db_url, "revoked")
    ttl = 1.0
    with _client(db_url, token_cache_ttl_s=ttl) as c:
        for tok in (keeper, revoked):
            assert c.get("/api/v1/configs/best", params=LOOKUP, headers={"Authorization": f"Bearer {tok}"}).status_code == 200
        # revoked elsewhere (as `blocktune token revoke` does): this server sees it within the TTL
        engine = make_engine(db_url)
        with session_factory(engine)() as s:
            revoke_token(s, revoked[:10])
            s.commit()
        engine.dispose()
        t0 = time.monotonic()
        while c.get("/api/v1/configs/best", params=LOOKUP,
                    headers={"Authorization": f"Bearer {revoked}"}).status_code == 200:
            assert time.monotonic() - t0 < ttl + 5, "a revoked token still works well past the TTL"
            time.sleep(0.05)
        assert c.get("/api/v1/jobs", headers={"Authorization": f"Bearer {revoked}"}).status_code == 401
        # revoked through this server: at once
        third = c.post("/api/v1/tokens", json={"name": "third"}, headers={"Authorization": f"Bearer {keeper}"}).json()
        assert c.get("/api/v1/jobs", headers={"Authorization": f"Bearer {third['token']}"}).status_code == 200
        assert c.delete(f"/api/v1/tokens/{third['id']}", headers={"Authorization": f"Bearer {keeper}"}).status_code == 200
        assert c.get("/api/v1/configs/best", params=LOOKUP,
                     headers={"Authorization": f"Bearer {third['token']}"}).status_code == 401
        assert c.get("/api/v1/configs/best", params=LOOKUP, headers={"Authorization": f"Bearer {keeper}"}).status_code == 200


def test_a_zero_ttl_checks_every_request(sqlite_db):
    token = make_token(sqlite_db)
    with _client(sqlite_db, token_cache_ttl_s=0) as c:
        queries = _count_token_queries(c.app.state.engine)
        for _ in range(5):
            assert c.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert queries.count("SELECT") == 5
