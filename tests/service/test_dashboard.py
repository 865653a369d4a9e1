"""The dashboard in real headless Chromium (Playwright) against a live server with real rows."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from db.engine import make_engine
from db.migrate import upgrade
from db.models import Job, utcnow
from svc_helpers import LiveServer, add_worker, seed

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


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


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


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
    assert page.locator("link[rel=stylesheet]").count() == 1
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
    assert "def add_kernel" in page.locator("pre.source").inner_text()


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
    page.goto(site["base"] + "/gpus")
    assert page.locator("table#gpus tr.gpu-row").count() == 2
    assert page.locator("table#workers tr.worker-row.alive").all_inner_texts()[0].startswith("gpuhost:gpu0")
    assert page.locator("table#workers tr.worker-row.dead").count() == 1


def test_job_state_updates_live(page, site):
    r = site["running"]
    page.goto(site["base"] + "/")
    cell = page.locator(f"tr.job-row[data-job-id='{r['job_id']}'] [data-field=state]")
    assert cell.inner_text() == "running"
    eng = make_engine(site["db"])
    with eng.begin() as c:
        c.execute(sa.update(Job).where(Job.id == r["job_id"]).values(state="succeeded", trials_done=4, progress=1.0,
                                                                     finished_at=utcnow()))
    eng.dispose()
    page.wait_for_function(
        f"document.querySelector(\"tr.job-row[data-job-id='{r['job_id']}'] [data-field=state]\").textContent"
        " === 'succeeded'", timeout=10_000)
