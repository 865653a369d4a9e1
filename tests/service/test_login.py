"""The dashboard login (reads behind a token) at the HTTP level, on a real SQLite database: pages
redirect to /login with the reason, the form checks the token against the stored hashes and opens a
server-side session whose id (never the token) is an HttpOnly SameSite=Strict cookie (Secure over
https), the cookie opens reads but never writes, logout and revocation end it, and the login is no
open redirect nor cross-site postable."""
from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.repo import revoke_token
from service.app import create_app
from service.core.config import Settings
from svc_helpers import make_token, seed


@pytest.fixture
def locked(sqlite_db):
    """A TestClient on a server whose reads need a token; `.token` is a valid one."""
    seed(sqlite_db, n_trials=4)
    app = create_app(Settings(database_url=sqlite_db, read_requires_token=True), database_url=sqlite_db)
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as c:
        c.token = make_token(sqlite_db)
        c.db = sqlite_db
        yield c


def cookie_of(response) -> SimpleCookie:
    jar = SimpleCookie()
    for h in response.headers.get_list("set-cookie"):
        jar.load(h)
    return jar


def login(c, token: str, next_: str = "/", **headers):
    return c.post("/login", data={"token": token, "next": next_}, headers=headers)


@pytest.mark.parametrize("path", ["/", "/jobs/1", "/winners", "/gpus", "/kernels/1", "/?state=running"])
def test_pages_redirect_to_the_login_with_the_reason(locked, path):
    r = locked.get(path)
    assert r.status_code == 303
    loc = urlsplit(r.headers["location"])
    assert loc.path == "/login" and parse_qs(loc.query) == {"next": [path], "reason": ["missing"]}
    page = locked.get(r.headers["location"])
    assert page.status_code == 200 and "needs an API token" in page.text and 'name="token"' in page.text
    assert page.headers["cache-control"] == "no-store"


def test_a_wrong_token_is_refused_on_the_form(locked):
    r = login(locked, "bt_wrong")
    assert r.status_code == 401 and "not valid" in r.text and "set-cookie" not in r.headers
    assert login(locked, "  ").status_code == 400


def test_the_right_token_sets_a_strict_httponly_cookie_and_opens_reads(locked):
    r = login(locked, locked.token, "/winners")
    assert r.status_code == 303 and r.headers["location"] == "/winners"
    c = cookie_of(r)["blocktune_session"]
    assert c.value and c.value != locked.token and c["httponly"] and c["samesite"].lower() == "strict" and c["path"] == "/"
    assert not c["secure"]                                   # plain http here
    # the TestClient keeps the cookie, as a browser does
    assert locked.get("/winners").status_code == 200
    assert locked.get("/api/v1/jobs").status_code == 200     # API reads take the cookie (live job states)
    # writes never take the cookie: a browser sends it by itself
    assert locked.post("/api/v1/jobs/1/cancel").status_code == 401
    assert locked.post("/api/v1/jobs/1/cancel", headers={"Authorization": f"Bearer {locked.token}"}).status_code \
        in (200, 409)


def test_the_cookie_is_secure_over_https(sqlite_db):
    app = create_app(Settings(database_url=sqlite_db, read_requires_token=True), database_url=sqlite_db)
    tok = make_token(sqlite_db)
    with TestClient(app, base_url="https://dash.example", follow_redirects=False) as c:
        assert cookie_of(login(c, tok))["blocktune_session"]["secure"]
    forced = create_app(Settings(database_url=sqlite_db, read_requires_token=True, secure_cookies=True),
                        database_url=sqlite_db)
    with TestClient(forced, follow_redirects=False) as c:     # behind a proxy that does not say https
        assert cookie_of(login(c, tok))["blocktune_session"]["secure"]


def test_logout_clears_the_cookie(locked):
    login(locked, locked.token)
    assert locked.get("/").status_code == 200
    r = locked.post("/logout")
    assert r.status_code == 303 and r.headers["location"] == "/login?reason=logged_out"
    gone = cookie_of(r)["blocktune_session"]
    assert gone.value == "" and gone["max-age"] == "0"
    assert locked.get("/").status_code == 303
    assert "You are logged out." in locked.get("/login?reason=logged_out").text


def test_a_revoked_token_sends_back_to_the_login(locked):
    login(locked, locked.token)
    engine = make_engine(locked.db)
    with session_factory(engine)() as s:
        revoke_token(s, locked.token[:10])
        s.commit()
    engine.dispose()
    r = locked.get("/gpus")
    assert r.status_code == 303 and "reason=ended" in r.headers["location"]
    assert cookie_of(r)["blocktune_session"]["max-age"] == "0"    # and the stale cookie is dropped
    assert "its token was revoked" in locked.get(r.headers["location"]).text


def test_a_header_token_still_works_without_login(locked):
    assert locked.get("/", headers={"Authorization": f"Bearer {locked.token}"}).status_code == 200
    assert locked.get("/", headers={"Authorization": "Bearer bt_nope"}).status_code == 303


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:1",
                                    "/login", "/logout?x=1"])
def test_no_open_redirect(locked, target):
    assert login(locked, locked.token, target).headers["location"] == "/"
    assert 'name="next" value="/"' in locked.get("/login", params={"next": target}).text


def test_cross_site_posts_are_refused(locked):
    assert login(locked, locked.token, **{"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert login(locked, locked.token, Origin="https://evil.example").status_code == 403
    assert locked.post("/logout", headers={"Origin": "https://evil.example"}).status_code == 403
    assert login(locked, locked.token, Origin="http://testserver", **{"Sec-Fetch-Site": "same-origin"}).status_code \
        == 303


def test_reason_text_comes_from_a_fixed_list(locked):
    page = locked.get("/login", params={"reason": "<script>alert(1)</script>"})
    assert page.status_code == 200 and "<script>alert" not in page.text


def test_open_reads_need_no_login(sqlite_api):
    assert sqlite_api.get("/", follow_redirects=False).status_code == 200
    assert "does not require a token" in sqlite_api.get("/login").text
