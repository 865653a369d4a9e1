"""Dashboard sessions at the HTTP level, on SQLite and on PostgreSQL: the login cookie is a random
session id, never the token, stored only as a hash with an expiry and its token; logout,
revocation and expiry end it; a token without `read` opens no session; the session never writes."""
from __future__ import annotations

import datetime as dt
from contextlib import contextmanager
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.models import ApiToken, DashboardSession, utcnow
from service.app import create_app
from service.core.config import Settings
from service.core.security import hash_token
from svc_helpers import make_token, seed

COOKIE = "blocktune_session"
LIFETIME_S = 3600


@contextmanager
def db_session(url: str):
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            yield s
    finally:
        engine.dispose()


def sessions(url: str) -> list[DashboardSession]:
    with db_session(url) as s:
        return list(s.scalars(sa.select(DashboardSession).order_by(DashboardSession.id)))


@pytest.fixture
def dash(db_url):
    """A server whose reads need a token; `.token` has every scope."""
    seed(db_url, n_trials=4)
    app = create_app(Settings(database_url=db_url, read_requires_token=True, session_seconds=LIFETIME_S),
                     database_url=db_url)
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as c:
        c.db, c.token = db_url, make_token(db_url)
        yield c


def set_cookies(response) -> SimpleCookie:
    jar = SimpleCookie()
    for h in response.headers.get_list("set-cookie"):
        jar.load(h)
    return jar


def login(c, token: str):
    """Log in in a fresh cookie jar (a new browser); returns the session id."""
    c.cookies.clear()
    r = c.post("/login", data={"token": token, "next": "/"})
    assert r.status_code == 303, r.text
    return set_cookies(r)[COOKIE].value


def reason(r) -> str:
    assert r.status_code == 303, r.status_code
    loc = urlsplit(r.headers["location"])
    assert loc.path == "/login"
    return parse_qs(loc.query)["reason"][0]


def use(c, sid: str) -> None:
    c.cookies.clear()
    c.cookies.set(COOKIE, sid)


def test_the_cookie_is_a_session_id_stored_hashed(dash):
    before = utcnow()
    r = dash.post("/login", data={"token": dash.token, "next": "/winners"})
    assert r.status_code == 303 and r.headers["location"] == "/winners"
    assert dash.token not in " ".join(r.headers.get_list("set-cookie"))
    cookie = set_cookies(r)[COOKIE]
    sid = cookie.value
    assert len(sid) >= 40 and sid != dash.token
    assert cookie["httponly"] and cookie["samesite"].lower() == "strict" and cookie["max-age"] == str(LIFETIME_S)
    (row,) = sessions(dash.db)
    with db_session(dash.db) as s:
        token_row = s.scalar(sa.select(ApiToken).where(ApiToken.token_hash == hash_token(dash.token)))
    assert row.session_hash == hash_token(sid) and row.token_id == token_row.id
    assert sid not in (row.session_hash, token_row.token_hash)
    expected = before + dt.timedelta(seconds=LIFETIME_S)
    assert expected - dt.timedelta(seconds=5) <= row.expires_at <= expected + dt.timedelta(seconds=60)
    assert dash.get("/winners").status_code == 200 and dash.get("/api/v1/jobs").status_code == 200
    # the session id is no API token
    assert dash.get("/api/v1/jobs", headers={"Authorization": f"Bearer {sid}"}).status_code == 401


def test_logout_deletes_the_session(dash):
    sid = login(dash, dash.token)
    other = login(dash, dash.token)               # the same token in another browser
    assert len(sessions(dash.db)) == 2
    use(dash, sid)
    assert dash.get("/").status_code == 200
    r = dash.post("/logout")
    assert r.status_code == 303 and set_cookies(r)[COOKIE]["max-age"] == "0"
    assert [s.session_hash for s in sessions(dash.db)] == [hash_token(other)]
    use(dash, sid)                                # a copy of the cookie, replayed, is worth nothing
    assert reason(dash.get("/")) == "ended"
    r = dash.get("/api/v1/jobs")
    assert r.status_code == 401 and "session has ended" in r.json()["detail"]
    use(dash, other)
    assert dash.get("/").status_code == 200


def test_an_expired_session_sends_back_to_the_login(dash):
    sid = login(dash, dash.token)
    with db_session(dash.db) as s:
        s.execute(sa.update(DashboardSession).values(expires_at=utcnow() - dt.timedelta(seconds=1)))
        s.commit()
    use(dash, sid)
    r = dash.get("/gpus")
    assert reason(r) == "ended" and set_cookies(r)[COOKIE]["max-age"] == "0"
    assert "session has ended" in dash.get(r.headers["location"]).text
    assert dash.get("/api/v1/jobs").status_code == 401
    login(dash, dash.token)                       # a new login clears the sessions that ran out
    assert [s.session_hash for s in sessions(dash.db)] != [hash_token(sid)] and len(sessions(dash.db)) == 1


def test_revoking_a_token_ends_its_sessions(dash):
    doomed = make_token(dash.db, "doomed", {"read"})
    a, b = login(dash, doomed), login(dash, doomed)
    kept = login(dash, dash.token)
    assert len(sessions(dash.db)) == 3
    with db_session(dash.db) as s:
        doomed_id = s.scalar(sa.select(ApiToken.id).where(ApiToken.name == "doomed"))
    dash.cookies.clear()
    r = dash.delete(f"/api/v1/tokens/{doomed_id}", headers={"Authorization": f"Bearer {dash.token}"})
    assert r.status_code == 200
    assert [s.session_hash for s in sessions(dash.db)] == [hash_token(kept)]
    for sid in (a, b):
        use(dash, sid)
        assert reason(dash.get("/")) == "ended"
    use(dash, kept)
    assert dash.get("/").status_code == 200


def test_a_revoked_token_session_counts_no_more_even_if_its_row_stayed(dash):
    """Defence in depth: a session is looked up together with its token's state."""
    sid = login(dash, dash.token)
    with db_session(dash.db) as s:
        s.execute(sa.update(ApiToken).values(revoked_at=utcnow()))      # not through revoke_token
        s.commit()
    assert len(sessions(dash.db)) == 1
    use(dash, sid)
    assert reason(dash.get("/")) == "ended"


def test_a_token_without_read_opens_no_session(dash):
    pub = make_token(dash.db, "publisher", {"publish", "submit"})
    dash.cookies.clear()
    r = dash.post("/login", data={"token": pub, "next": "/"})
    assert r.status_code == 403 and "lacks the read scope" in r.text and "set-cookie" not in r.headers
    assert sessions(dash.db) == []
    r = dash.get("/", headers={"Authorization": f"Bearer {pub}"})
    assert reason(r) == "scope"
    assert "lacks the read scope" in dash.get(r.headers["location"]).text
    assert dash.get("/api/v1/jobs", headers={"Authorization": f"Bearer {pub}"}).status_code == 403


def test_a_session_never_writes(dash):
    login(dash, dash.token)
    assert dash.get("/api/v1/jobs").status_code == 200
    assert dash.post("/api/v1/jobs/1/cancel").status_code == 401
    assert dash.get("/api/v1/tokens").status_code == 401
    assert dash.post("/api/v1/tokens", json={"name": "x"}).status_code == 401
    body = {"kernel_fingerprint": "c" * 64, "kernel_name": "k", "problem_key": {}, "gpu_model": "g",
            "compute_capability": "9.0", "config": {}, "median_ms": 1.0}
    assert dash.post("/api/v1/configs", json=body).status_code == 401


def test_forged_and_legacy_cookies_open_nothing(dash):
    use(dash, "x" * 43)
    assert reason(dash.get("/")) == "ended"
    # before sessions the cookie held the raw token: it is no credential now, and it is dropped
    dash.cookies.clear()
    dash.cookies.set("blocktune_token", dash.token)
    r = dash.get("/")
    assert reason(r) == "missing" and set_cookies(r)["blocktune_token"]["max-age"] == "0"
    assert dash.get("/api/v1/jobs").status_code == 401
    r = dash.post("/login", data={"token": dash.token, "next": "/"})
    assert set_cookies(r)["blocktune_token"]["max-age"] == "0" and set_cookies(r)[COOKIE].value
