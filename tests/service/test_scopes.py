"""Token scopes over HTTP, on SQLite and on PostgreSQL: every /api/v1 operation answers 403 naming
the scope to a token without it and succeeds with a token that has only that scope; no token or a
bad one is still 401; a token grants only scopes it holds, and a publishing token manages no
tokens."""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.models import TOKEN_SCOPES, ApiToken
from service.app import create_app
from service.core.config import Settings
from service.core.security import hash_token
from svc_helpers import make_token, seed

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "add.yaml").read_text())
H100 = "NVIDIA H100 80GB HBM3"


def auth(tok: str) -> dict:
    return {"Authorization": f"Bearer {tok}"}


@pytest.fixture
def locked(db_url):
    """A server whose reads need a token, with seeded rows; `.tokens[scope]` holds a token that has
    only that scope."""
    data = seed(db_url, n_trials=4)
    app = create_app(Settings(database_url=db_url, read_requires_token=True), database_url=db_url)
    with TestClient(app, raise_server_exceptions=False) as c:
        c.db, c.data = db_url, data
        c.tokens = {s: make_token(db_url, f"only-{s}", {s}) for s in TOKEN_SCOPES}
        yield c


def _publish_body(n: int) -> dict:
    return {"kernel_fingerprint": "c" * 64, "kernel_name": "k", "problem_key": {"n": n}, "gpu_model": H100,
            "compute_capability": "9.0", "config": {"BLOCK": 64}, "median_ms": 1.0}


# each operation: the scope it needs, and how to call it (a fresh target for writes that use one up)
_keys = itertools.count()


def _running_job(url: str) -> int:
    return seed(url, state="running", fingerprint="d" * 64, key={"n": next(_keys)})["job_id"]


def _cancel(c):
    return "POST", f"/api/v1/jobs/{_running_job(c.db)}/cancel", None


@contextmanager
def db_session(url: str):
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            yield s
    finally:
        engine.dispose()


def _revoke(c):
    victim = make_token(c.db, "victim", {"read"})
    with db_session(c.db) as s:
        tid = s.scalar(sa.select(ApiToken.id).where(ApiToken.token_hash == hash_token(victim)))
    return "DELETE", f"/api/v1/tokens/{tid}", None


OPERATIONS = {
    "list jobs": ("read", 200, lambda c: ("GET", "/api/v1/jobs", None)),
    "get job": ("read", 200, lambda c: ("GET", f"/api/v1/jobs/{c.data['job_id']}", None)),
    "job trials": ("read", 200, lambda c: ("GET", f"/api/v1/jobs/{c.data['job_id']}/trials", None)),
    "list configs": ("read", 200, lambda c: ("GET", "/api/v1/configs", None)),
    "lookup": ("read", 200, lambda c: ("GET", f"/api/v1/configs/best?kernel={'f' * 64}&gpu_model={H100}"
                                              "&key=%7B%22n_elements%22%3A98432%7D", None)),
    "list kernels": ("read", 200, lambda c: ("GET", "/api/v1/kernels", None)),
    "get kernel": ("read", 200, lambda c: ("GET", f"/api/v1/kernels/{c.data['kernel_id']}", None)),
    "list gpus": ("read", 200, lambda c: ("GET", "/api/v1/gpus", None)),
    "list workers": ("read", 200, lambda c: ("GET", "/api/v1/workers", None)),
    "publish": ("publish", 200, lambda c: ("POST", "/api/v1/configs", _publish_body(len(c.tokens)))),
    "submit": ("submit", 201, lambda c: ("POST", "/api/v1/jobs", SPEC)),
    "cancel": ("submit", 200, _cancel),
    "list tokens": ("admin", 200, lambda c: ("GET", "/api/v1/tokens", None)),
    "create token": ("admin", 201, lambda c: ("POST", "/api/v1/tokens", {"name": "new", "scopes": ["admin"]})),
    "revoke token": ("admin", 200, _revoke),
}


@pytest.mark.parametrize("op", OPERATIONS)
def test_each_operation_needs_its_scope(locked, op):
    needed, ok_status, call = OPERATIONS[op]
    method, path, body = call(locked)
    assert locked.request(method, path, json=body).status_code == 401
    assert locked.request(method, path, json=body, headers=auth("bt_not-a-token")).status_code == 401
    for scope, tok in locked.tokens.items():
        if scope == needed:
            continue
        r = locked.request(method, path, json=body, headers=auth(tok))
        assert r.status_code == 403, (scope, r.status_code, r.text)
        assert f"lacks the '{needed}' scope" in r.json()["detail"] and f"it has: {scope}" in r.json()["detail"]
        assert r.headers["www-authenticate"] == f'Bearer error="insufficient_scope", scope="{needed}"'
    method, path, body = call(locked)           # a fresh target: the refused calls changed nothing
    r = locked.request(method, path, json=body, headers=auth(locked.tokens[needed]))
    assert r.status_code == ok_status, r.text


def test_refused_writes_change_nothing(locked):
    r = locked.post("/api/v1/configs", json=_publish_body(5), headers=auth(locked.tokens["submit"]))
    assert r.status_code == 403
    r = locked.get("/api/v1/configs", params={"kernel": "c" * 64}, headers=auth(locked.tokens["read"]))
    assert r.json() == []
    running = _running_job(locked.db)
    r = locked.post(f"/api/v1/jobs/{running}/cancel", headers=auth(locked.tokens["publish"]))
    assert r.status_code == 403
    r = locked.get(f"/api/v1/jobs/{running}", headers=auth(locked.tokens["read"]))
    assert r.json()["state"] == "running"


def test_open_reads_need_no_token_and_ignore_scopes(db_url):
    seed(db_url)
    tok = make_token(db_url, "pub", {"publish"})
    with TestClient(create_app(Settings(database_url=db_url), database_url=db_url)) as c:
        assert c.get("/api/v1/jobs").status_code == 200
        assert c.get("/api/v1/jobs", headers=auth(tok)).status_code == 200
        assert c.get("/api/v1/tokens", headers=auth(tok)).status_code == 403     # but tokens stay admin's


def test_a_publish_token_cannot_mint_or_revoke(locked):
    pub = locked.tokens["publish"]
    for scopes in (["publish"], ["read"], ["admin"]):
        r = locked.post("/api/v1/tokens", json={"name": "mine", "scopes": scopes}, headers=auth(pub))
        assert r.status_code == 403 and "lacks the 'admin' scope" in r.json()["detail"]
    assert locked.get("/api/v1/tokens", headers=auth(pub)).status_code == 403
    for tid in range(1, 7):
        assert locked.delete(f"/api/v1/tokens/{tid}", headers=auth(pub)).status_code == 403
    with db_session(locked.db) as s:
        rows = s.scalars(sa.select(ApiToken)).all()
    assert len(rows) == len(TOKEN_SCOPES) and all(t.revoked_at is None for t in rows)


def test_a_token_grants_only_scopes_it_holds(locked):
    admin_only = locked.tokens["admin"]
    r = locked.post("/api/v1/tokens", json={"name": "pub", "scopes": ["publish"]}, headers=auth(admin_only))
    assert r.status_code == 403 and "lacks publish" in r.json()["detail"]
    r = locked.post("/api/v1/tokens", json={"name": "pub"}, headers=auth(admin_only))     # the default set
    assert r.status_code == 403 and "lacks read,publish,submit" in r.json()["detail"]
    both = make_token(locked.db, "ops", {"admin", "publish"})
    r = locked.post("/api/v1/tokens", json={"name": "pub", "scopes": ["publish"]}, headers=auth(both))
    assert r.status_code == 201 and r.json()["scopes"] == ["publish"]
    minted = r.json()["token"]
    assert locked.post("/api/v1/configs", json=_publish_body(9), headers=auth(minted)).status_code == 200
    assert locked.post("/api/v1/jobs", json=SPEC, headers=auth(minted)).status_code == 403
    assert locked.get("/api/v1/jobs", headers=auth(minted)).status_code == 403
    listed = {t["name"]: t["scopes"] for t in locked.get("/api/v1/tokens", headers=auth(both)).json()}
    assert listed["pub"] == ["publish"] and listed["ops"] == ["publish", "admin"]


def test_scopes_are_validated(locked):
    admin = make_token(locked.db, "root")
    # a repeated scope too: the document says the items are unique, so it is refused, not merged
    for bad in ([], ["root"], "read", ["read", "nope"], ["read", "read", "submit"]):
        r = locked.post("/api/v1/tokens", json={"name": "x", "scopes": bad}, headers=auth(admin))
        assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("body.scopes"), (bad, r.text)
    r = locked.post("/api/v1/tokens", json={"name": "x", "scopes": ["submit", "read"]}, headers=auth(admin))
    assert r.status_code == 201 and r.json()["scopes"] == ["read", "submit"]


def test_the_database_refuses_an_unknown_scope(db_url):
    from service.core.security import create_token

    with db_session(db_url) as s:
        with pytest.raises(ValueError, match="unknown scope"):
            create_token(s, "x", {"read", "root"})
        with pytest.raises(ValueError, match="at least one scope"):
            create_token(s, "x", set())
        s.add(ApiToken(name="raw", token_hash="0" * 64, prefix="bt_raw", scopes=frozenset({"root"})))
        with pytest.raises(sa.exc.StatementError, match="unknown token scope"):
            s.flush()


def test_openapi_declares_401_and_403_on_every_api_operation(locked):
    spec = locked.get("/api/v1/openapi.json").json()
    ops = [(path, m, op) for path, item in spec["paths"].items() if path.startswith("/api/v1/")
           for m, op in item.items()]
    assert len(ops) >= len(OPERATIONS)
    for path, method, op in ops:
        for code in ("401", "403"):
            assert code in op["responses"], (method, path, code)
            schema = op["responses"][code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorOut"}
    token_in = spec["components"]["schemas"]["TokenIn"]["properties"]["scopes"]
    assert token_in["items"]["enum"] == list(TOKEN_SCOPES) and token_in["minItems"] == 1
