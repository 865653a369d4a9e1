"""The dashboard in real headless Chromium (Playwright) against a live server with real rows."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
import sqlalchemy as sa

from db.engine import make_engine
from db.migrate import upgrade
from db.models import DashboardSession, Job, Worker, utcnow
from service.core.security import hash_token
from dash_browser import browser  # noqa: F401 - a fixture
from svc_helpers import ROOT, LiveServer, add_worker, make_token, seed

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'blocktune.db'}"
    upgrade(url)
    done = seed(url, n_trials=12)
    other_gpu = seed(url, n_trials=6, gpu_model="NVIDIA A100-SXM4-80GB", cc="8.0")
    running = seed(url, n_trials=4, state="running", fingerprint="e" * 64, kernel_name="softmax",
                   key={"n_cols": 1024})
    add_worker(url, done["gpu_id"], "gpuhost:gpu0", heartbeat_age_s=2)
    add_worker(url, done["gpu_id"], "gpuhost:gpu1", heartbeat_age_s=7200)
    server = LiveServer(url)
    try:
        yield {"base": server.base, "db": url, "done": done, "other": other_gpu, "running": running}
    finally:
        server.stop()


@pytest.fixture
def page(browser, site):
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.requests = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    assert all(u.startswith(site["base"]) for u in pg.requests), [u for u in pg.requests if not u.startswith(site["base"])]
    assert not errors, errors
    ctx.close()


def test_jobs_page_and_links(page, site):
    page.goto(site["base"] + "/")
    rows = page.locator("table#jobs tr.job-row")
    assert rows.count() == 3
    assert [page.locator("link[rel=stylesheet]").nth(i).get_attribute("href") for i in range(2)] == \
        ["/static/style.css", "/highlight.css"]
    # styles loaded from our own /static (no CDN)
    assert page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor") == "rgb(31, 41, 55)"
    row = page.locator(f"tr.job-row[data-job-id='{site['done']['job_id']}']")
    assert row.locator("[data-field=state]").inner_text() == "succeeded"
    row.locator("a.job-link").click()
    page.wait_for_url(f"**/jobs/{site['done']['job_id']}")
    assert page.locator("h1").inner_text().startswith(f"Job {site['done']['job_id']}")
    # filters
    page.goto(site["base"] + "/?state=running")
    assert page.locator("table#jobs tr.job-row").count() == 1


def test_job_page_charts_contain_the_trials(page, site):
    d = site["done"]
    page.goto(f"{site['base']}/jobs/{d['job_id']}")
    trials = page.locator("table#trials tr.trial-row")
    assert trials.count() == 12
    ok_rows = page.locator("table#trials tr.status-ok")
    points = page.locator("#trials-chart svg circle.trial-point")
    assert points.count() == ok_rows.count() == d["n_ok"]
    # every ok trial is a point, at its own trial number, with its time
    numbers = sorted(int(points.nth(i).get_attribute("data-number")) for i in range(points.count()))
    ok_numbers = sorted(int(ok_rows.nth(i).get_attribute("data-number")) for i in range(ok_rows.count()))
    assert numbers == ok_numbers
    assert page.locator("#trials-chart svg path.trial-failed").count() == 12 - d["n_ok"]
    # the best-so-far line ends at the best time: its last point has the lowest point's y
    line = page.locator("#trials-chart svg polyline.best-line").get_attribute("points").split()
    ys = [float(points.nth(i).get_attribute("cy")) for i in range(points.count())]
    assert float(line[-1].split(",")[1]) == pytest.approx(max(ys), abs=0.11)  # svg y grows downwards
    # one chart per parameter, each with every ok trial
    figs = page.locator("figure.param")
    assert sorted(figs.nth(i).get_attribute("data-param") for i in range(figs.count())) == \
        ["BLOCK_SIZE", "num_stages", "num_warps"]
    for i in range(figs.count()):
        assert figs.nth(i).locator("circle.param-point").count() == d["n_ok"]
    assert page.locator("tr.trial-row.best").count() == 1
    best_ms = float(page.locator("tr.trial-row.best td").nth(3).inner_text())
    assert best_ms == pytest.approx(d["best"][0], abs=1e-4)
    page.locator("h1 a").click()                           # the kernel link
    page.wait_for_url("**/kernels/*")
    assert "def add_kernel" in page.locator("#kernel-source").inner_text()


def test_winners_matrix(page, site):
    page.goto(site["base"] + "/winners")
    heads = page.locator("table#winners th.gpu")
    assert sorted(heads.all_inner_texts()) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    rows = page.locator("table#winners tr.winner-row")
    assert rows.count() == 2                               # add_kernel n=98432, softmax n_cols=1024
    speedups = page.locator(".speedup")
    assert speedups.count() == 3
    assert all(float(speedups.nth(i).get_attribute("data-speedup")) == pytest.approx(1.5) for i in range(3))
    page.locator("table#winners a.job-link").first.click()
    page.wait_for_url("**/jobs/*")
    assert page.locator("#trials-chart svg").count() == 1


def test_gpus_and_workers(page, site):
    # the live worker beats again now: the module's set-up may have taken longer than a heartbeat's life
    eng = make_engine(site["db"])
    with eng.begin() as c:
        c.execute(sa.update(Worker).where(Worker.name == "gpuhost:gpu0").values(last_heartbeat_at=utcnow()))
    eng.dispose()
    page.goto(site["base"] + "/gpus")
    assert page.locator("table#gpus tr.gpu-row").count() == 2
    assert page.locator("table#workers tr.worker-row.alive").all_inner_texts()[0].startswith("gpuhost:gpu0")
    assert page.locator("table#workers tr.worker-row.dead").count() == 1


def test_job_state_updates_live(page, site):
    r = site["running"]
    page.goto(site["base"] + "/")
    cell = page.locator(f"tr.job-row[data-job-id='{r['job_id']}'] [data-field=state]")
    assert cell.inner_text() == "running"
    _finish_and_wait(page, site["db"], r["job_id"], trials_done=4)


def _finish_and_wait(page, db: str, job_id: int, trials_done: int) -> None:
    """Mark the job succeeded in the database and wait for the open jobs page to show it (the
    dashboard polls /api/v1/jobs/<id>)."""
    eng = make_engine(db)
    with eng.begin() as c:
        c.execute(sa.update(Job).where(Job.id == job_id).values(state="succeeded", trials_done=trials_done,
                                                                progress=1.0, finished_at=utcnow()))
    eng.dispose()
    page.wait_for_function(
        f"document.querySelector(\"tr.job-row[data-job-id='{job_id}'] [data-field=state]\").textContent"
        " === 'succeeded'", timeout=10_000)


# ---------------------------------------------------------------------------------------------
# Reads behind a token (`--read-requires-token`): the login page

@pytest.fixture(scope="module")
def locked_site(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('locked') / 'blocktune.db'}"
    upgrade(url)
    seed(url, n_trials=6)
    running = seed(url, n_trials=2, state="running", fingerprint="e" * 64, kernel_name="softmax",
                   key={"n_cols": 1024})
    token = make_token(url)
    server = LiveServer(url, "--read-requires-token")
    try:
        yield {"base": server.base, "db": url, "token": token, "running": running}
    finally:
        server.stop()


@pytest.fixture
def locked_page(browser, locked_site):
    ctx = browser.new_context()
    pg = ctx.new_page()
    requests = []
    pg.on("request", lambda r: requests.append(r.url))
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    assert all(u.startswith(locked_site["base"]) for u in requests), requests
    assert not errors, errors
    ctx.close()


def test_login_wrong_token_right_token_and_logout(locked_page, locked_site):
    page, base = locked_page, locked_site["base"]
    page.goto(base + "/")
    assert page.url.startswith(base + "/login?")                       # redirected, with a reason
    assert "needs an API token" in page.locator("#login-message").inner_text()
    assert page.locator("table#jobs").count() == 0

    page.fill("#token", "bt_not-a-valid-token")
    page.click("#login")
    page.wait_for_load_state()
    assert "not valid" in page.locator("#login-error").inner_text()
    assert page.context.cookies() == []

    page.fill("#token", locked_site["token"])
    page.click("#login")
    page.wait_for_url(base + "/")
    assert page.locator("table#jobs tr.job-row").count() == 2
    (cookie,) = page.context.cookies()
    assert cookie["name"] == "blocktune_session" and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["value"] != locked_site["token"]                     # a session id, not the token
    assert page.evaluate("document.cookie") == ""                      # scripts never see the token

    page.click("#logout")
    page.wait_for_url("**/login?reason=logged_out")
    assert "logged out" in page.locator("#login-message").inner_text()
    assert page.context.cookies() == []
    page.goto(base + "/winners")
    assert page.url.startswith(base + "/login?")


def test_login_returns_to_the_page_asked_for_and_live_states_use_the_cookie(locked_page, locked_site):
    page, base, r = locked_page, locked_site["base"], locked_site["running"]
    page.goto(f"{base}/jobs/{r['job_id']}")
    assert page.url.startswith(base + "/login?")
    page.fill("#token", locked_site["token"])
    page.click("#login")
    page.wait_for_url(f"{base}/jobs/{r['job_id']}")
    page.goto(base + "/")
    cell = page.locator(f"tr.job-row[data-job-id='{r['job_id']}'] [data-field=state]")
    assert cell.inner_text() == "running"
    # dashboard.js polls /api/v1/jobs/<id>: the API's reads accept the login cookie
    _finish_and_wait(page, locked_site["db"], r["job_id"], trials_done=2)


# ---------------------------------------------------------------------------------------------
# The login is a server-side session: the cookie is no token, and logout, revocation and expiry end it

def _log_in(page, base: str, token: str) -> dict:
    page.goto(base + "/")
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_url(base + "/")
    (cookie,) = page.context.cookies()
    return cookie


def _session_rows(db: str) -> list:
    eng = make_engine(db)
    with eng.connect() as c:
        rows = c.execute(sa.select(DashboardSession.session_hash, DashboardSession.token_id)).all()
    eng.dispose()
    return rows


def _sent_to_login(page, base: str, path: str) -> str:
    page.goto(base + path)
    assert page.url.startswith(base + "/login?"), page.url
    assert page.locator("table#jobs").count() == 0
    return page.locator("#login-message").inner_text()


def test_the_cookie_holds_a_session_id_and_logout_deletes_it(locked_page, locked_site):
    page, base = locked_page, locked_site["base"]
    cookie = _log_in(page, base, locked_site["token"])
    assert cookie["name"] == "blocktune_session" and locked_site["token"] not in cookie["value"]
    assert hash_token(cookie["value"]) in {h for h, _ in _session_rows(locked_site["db"])}
    page.click("#logout")
    page.wait_for_url("**/login?reason=logged_out")
    assert hash_token(cookie["value"]) not in {h for h, _ in _session_rows(locked_site["db"])}
    page.context.add_cookies([cookie])              # a copy of the cookie kept from before the logout
    assert "session has ended" in _sent_to_login(page, base, "/winners")
    assert page.context.cookies() == []              # and the browser is told to drop it


def test_revoking_the_token_ends_the_browser_session(locked_page, locked_site):
    page, base = locked_page, locked_site["base"]
    doomed = make_token(locked_site["db"], "doomed", {"read"})
    _log_in(page, base, doomed)
    assert page.locator("table#jobs tr.job-row").count() == 2
    r = subprocess.run([sys.executable, "-m", "service.cli", "token", "revoke", doomed[:10], "--database-url",
                        locked_site["db"]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "sessions are ended" in r.stderr
    assert "its token was revoked" in _sent_to_login(page, base, "/gpus")
    assert page.context.cookies() == []


def test_an_expired_session_sends_the_browser_to_the_login(locked_page, locked_site):
    page, base = locked_page, locked_site["base"]
    cookie = _log_in(page, base, locked_site["token"])
    eng = make_engine(locked_site["db"])
    with eng.begin() as c:
        c.execute(sa.update(DashboardSession).where(DashboardSession.session_hash == hash_token(cookie["value"]))
                  .values(expires_at=utcnow() - dt.timedelta(seconds=1)))
    eng.dispose()
    page.click("nav a[href='/winners']")
    page.wait_for_url("**/login?**")
    assert "session has ended" in page.locator("#login-message").inner_text()
    assert page.url.endswith("reason=ended") and "next=%2Fwinners" in page.url


def test_a_token_without_read_cannot_log_in(locked_page, locked_site):
    page, base = locked_page, locked_site["base"]
    page.goto(base + "/login")
    page.fill("#token", make_token(locked_site["db"], "publisher", {"publish"}))
    page.click("#login")
    page.wait_for_load_state()
    assert "lacks the read scope" in page.locator("#login-error").inner_text()
    assert page.context.cookies() == []
