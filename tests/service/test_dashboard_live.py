"""The dashboard as people use it, in real Chromium against a live server: filters, new jobs and
charts arriving without a reload, the kernels page, the spec shown readably, missing trial numbers
and early stops explained, honest speed-ups, and the Cancel / Re-run buttons."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from dash_browser import PageWatch, browser  # noqa: F401 - a fixture
from dash_data import SPEC, story_job
from db.engine import make_engine
from db.migrate import upgrade
from db.models import Job, Trial, utcnow
from svc_helpers import LiveServer, make_token, seed

pytestmark = pytest.mark.browser

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'blocktune.db'}"
    upgrade(url)
    done = seed(url, n_trials=12)
    on_a100 = seed(url, n_trials=6, gpu_model=A100, cc="8.0")
    running = seed(url, n_trials=4, state="running", fingerprint="e" * 64, kernel_name="softmax", key={"n_cols": 1024})
    story = story_job(url)
    server = LiveServer(url)
    try:
        yield {"base": server.base, "db": url, "done": done, "a100": on_a100, "running": running, "story": story,
               "tokens": {"submit": make_token(url, "submitter", {"read", "submit"}),
                          "read": make_token(url, "reader", {"read"})}}
    finally:
        server.stop()


@pytest.fixture
def page(browser, site):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    watch = PageWatch(pg)
    yield pg
    watch.check(site["base"])
    ctx.close()


def _write(db: str, stmt) -> None:
    eng = make_engine(db)
    with eng.begin() as c:
        c.execute(stmt)
    eng.dispose()


def _rows(page) -> list[int]:
    return [int(x) for x in page.locator("table#jobs tr.job-row").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-job-id'))")]


def _mark_no_reload(page) -> None:
    page.evaluate("window.__still_this_page = true")


def _was_not_reloaded(page) -> bool:
    return page.evaluate("window.__still_this_page === true")


def test_filters_by_kernel_gpu_model_and_state(page, site):
    page.goto(site["base"] + "/")
    assert len(_rows(page)) == 4
    page.select_option("#filter-kernel", "softmax")
    page.click("#job-filters button[type=submit]")
    page.wait_for_url("**/?*kernel=softmax*")
    assert _rows(page) == [site["running"]["job_id"]]
    page.goto(site["base"] + "/")
    page.select_option("#filter-gpu", A100)
    page.click("#job-filters button[type=submit]")
    page.wait_for_load_state()
    assert _rows(page) == [site["a100"]["job_id"]]
    assert page.locator("#filter-gpu").input_value() == A100          # the form shows what is applied
    page.goto(site["base"] + "/?state=succeeded&kernel=add_kernel")
    assert sorted(_rows(page)) == sorted([site["done"]["job_id"], site["a100"]["job_id"]])
    # the state counts are those of the other filters: 2 succeeded add_kernel jobs, none running
    assert "succeeded (2)" in page.locator("#filter-state option[value=succeeded]").inner_text()
    assert "running (0)" in page.locator("#filter-state option[value=running]").inner_text()
    page.goto(site["base"] + "/?kernel=no-such-kernel")                 # an unknown name filters nothing
    assert len(_rows(page)) == 4


def test_a_new_job_appears_without_a_reload(page, site):
    page.goto(site["base"] + "/?kernel=softmax")
    _mark_no_reload(page)
    before = _rows(page)
    new = seed(site["db"], n_trials=0, state="queued", fingerprint="e" * 64, kernel_name="softmax",
               key={"n_cols": 2048})
    other = seed(site["db"], n_trials=0, state="queued")               # add_kernel: filtered out
    row = page.locator(f"tr.job-row[data-job-id='{new['job_id']}']")
    row.wait_for(timeout=15_000)
    assert _rows(page) == [new["job_id"], *before]                      # on top, newest first
    assert row.locator("[data-field=state]").inner_text() == "queued"
    assert row.locator("[data-field=kernel]").inner_text() == "softmax"
    assert row.locator("a.job-link").get_attribute("href") == f"/jobs/{new['job_id']}"
    assert page.locator(f"tr.job-row[data-job-id='{other['job_id']}']").count() == 0
    assert _was_not_reloaded(page)
    _write(site["db"], sa.update(Job).where(Job.id.in_([new["job_id"], other["job_id"]])).values(state="cancelled"))


def test_the_job_page_charts_grow_while_it_runs(page, site):
    r = site["running"]
    page.goto(f"{site['base']}/jobs/{r['job_id']}")
    _mark_no_reload(page)
    points = page.locator("#trials-chart svg circle.trial-point")
    n0 = points.count()
    assert n0 == page.locator("table#trials tr.status-ok").count() > 0
    eng = make_engine(site["db"])
    with eng.begin() as c:
        for i, ms in ((4, 0.25), (5, 0.3)):
            c.execute(sa.insert(Trial).values(job_id=r["job_id"], number=i, status="ok", samples_ms=[ms], median_ms=ms,
                                              config={"BLOCK_SIZE": 4096, "num_warps": 8, "num_stages": i - 2},
                                              worker="w0", created_at=utcnow()))
        c.execute(sa.update(Job).where(Job.id == r["job_id"]).values(trials_done=6, best_time_ms=0.25))
    eng.dispose()
    page.wait_for_function(f"document.querySelectorAll('#trials-chart svg circle.trial-point').length === {n0 + 2}",
                           timeout=15_000)
    assert page.locator("table#trials tr.trial-row[data-number='4']").count() == 1
    assert page.locator("tr.trial-row.best").get_attribute("data-number") == "4"          # the new best
    assert page.locator(".summary [data-field=best_time_ms]").inner_text() == "0.2500 ms"
    _write(site["db"], sa.update(Job).where(Job.id == r["job_id"]).values(state="succeeded", finished_at=utcnow()))
    page.wait_for_function("document.querySelector('#job-ending') !== null", timeout=15_000)
    assert page.locator(".summary [data-field=state]").inner_text() == "succeeded"
    assert _was_not_reloaded(page)


def test_the_kernels_page(page, site):
    page.goto(site["base"] + "/kernels")
    rows = page.locator("table#kernels tr.kernel-row")
    assert sorted(rows.locator("a.kernel-link").all_inner_texts()) == ["add_kernel", "scale_kernel", "softmax"]
    add = rows.filter(has_text="add_kernel")
    assert sorted(add.locator("td").nth(4).inner_text().split(", ")) == [A100, "NVIDIA H100 80GB HBM3"]
    add.locator("a.kernel-link").click()
    page.wait_for_url("**/kernels/*")
    assert page.locator("table#kernel-winners tr.winner-row").count() == 2
    page.goto(site["base"] + "/kernels")
    page.locator("table#kernels tr.kernel-row", has_text="softmax").locator("td").nth(2).locator("a").click()
    page.wait_for_url("**/?kernel=softmax")
    assert all(k == "softmax" for k in page.locator("table#jobs [data-field=kernel]").all_inner_texts())


def test_the_spec_is_readable_and_the_source_highlighted(page, site):
    page.goto(f"{site['base']}/jobs/{site['story']['job_id']}")
    source = page.locator("#kernel-source")
    text = source.inner_text()
    assert "def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):" in text
    assert '"""out = 2 * x"""' in text and "\\n" not in text                   # real lines, not an escaped string
    # highlighted: `def` is a keyword token, coloured unlike plain text; line numbers beside it
    keyword = source.locator(".highlight .k", has_text="def").first
    plain = source.locator(".highlight .n", has_text="pid").first
    colour = "e => getComputedStyle(e).color"
    assert keyword.evaluate(colour) != plain.evaluate(colour)
    assert source.locator(".linenos").inner_text().split()[:3] == ["1", "2", "3"]
    spec = page.locator("#spec-yaml").inner_text()
    assert "space:" in spec and "BLOCK_SIZE: [1024, 2048, 4096]" in spec and "patience: 3" in spec
    assert "source" not in spec and '{"' not in spec                              # not a JSON dump
    assert spec.index("sizes:") < spec.index("space:") < spec.index("budget:")    # the spec's own order


def test_missing_trial_numbers_and_the_early_stop_are_explained(page, site):
    page.goto(f"{site['base']}/jobs/{site['story']['job_id']}")
    assert page.locator("table#trials tr.trial-row").evaluate_all(
        "rows => rows.map(r => r.dataset.number)") == ["0", "4", "5"]
    gaps = {int(page.locator("tr.gap-row").nth(i).get_attribute("data-number")): page.locator("tr.gap-row").nth(i)
            for i in range(page.locator("tr.gap-row").count())}
    assert sorted(gaps) == [1, 2, 3]                                   # exactly the numbers not in the table
    assert "gap-repeat" in gaps[1].get_attribute("class") and "config of trial 0 again" in gaps[1].inner_text()
    assert "gap-duplicate" in gaps[2].get_attribute("class") and "measured as trial 0" in gaps[2].inner_text()
    assert "gap-stopped" in gaps[3].get_attribute("class") and "queued again as trial 4" in gaps[3].inner_text()
    ending = page.locator("#job-ending").inner_text()
    assert "after 2 of 8 trials" in ending and "no improvement in 3 trials" in ending and "patience" in ending
    statuses = page.locator("#trial-statuses").inner_text()
    assert "invalid × 1" in statuses and "not counted in the trial budget" in statuses
    # a job no worker left a study for says so instead of listing nothing
    page.goto(f"{site['base']}/jobs/{site['done']['job_id']}")
    assert page.locator("#no-study").is_visible() and page.locator("tr.gap-row").count() == 0


def test_a_speedup_within_noise_is_not_a_win(page, site):
    page.goto(site["base"] + "/winners")
    even = page.locator(".speedup-even")
    assert even.count() == 1                                            # scale_kernel: 1.001×
    assert "no gain" in even.inner_text() and "1.00×" in even.inner_text() and "faster" not in even.inner_text()
    wins = page.locator(".speedup-win")
    assert wins.count() == 3 and all("1.50× faster" in t for t in wins.all_inner_texts())
    colour = "e => getComputedStyle(e).color"
    assert even.evaluate(colour) != wins.first.evaluate(colour)        # not painted as a win either
    page.goto(f"{site['base']}/jobs/{site['story']['job_id']}")
    assert "no gain over the default config" in page.locator(".summary .speedup").inner_text()


# --- Cancel and Re-run ------------------------------------------------------------------------

def _log_in(page, base: str, token: str, next_: str) -> None:
    page.goto(f"{base}/login?next={next_}")
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_url(base + next_)


def _job(db: str, job_id: int) -> Job | None:
    eng = make_engine(db)
    with eng.connect() as c:
        row = c.execute(sa.select(Job.state, Job.spec, Job.kernel_id, Job.gpu_model).where(Job.id == job_id)).first()
    eng.dispose()
    return row


def test_cancel_and_rerun_need_a_login_with_the_submit_scope(page, site):
    base = site["base"]
    job_id = seed(site["db"], n_trials=0, state="running")["job_id"]
    page.goto(f"{base}/jobs/{job_id}")
    assert page.locator("#cancel-job").count() == 0 and "submit" in page.locator("#actions-note").inner_text()
    _log_in(page, base, site["tokens"]["read"], f"/jobs/{job_id}")
    assert page.locator("#cancel-job").count() == 0 and "lacks it" in page.locator("#actions-note").inner_text()
    # a post made without the page's form (another page's script, a forged form): refused, nothing done
    r = page.request.post(f"{base}/jobs/{job_id}/cancel", form={"csrf": "guess"}, max_redirects=0)
    assert r.status == 303 and "notice=stale-form" in r.headers["location"]
    r = page.request.post(f"{base}/jobs/{job_id}/cancel", headers={"Origin": "https://evil.example"},
                          form={"csrf": "x"}, max_redirects=0)
    assert r.status == 403
    assert _job(site["db"], job_id).state == "running"
    # the API's writes never take the login cookie
    assert page.request.post(f"{base}/api/v1/jobs/{job_id}/cancel").status == 401


def test_cancel_then_rerun_from_the_job_page(page, site):
    base, db = site["base"], site["db"]
    story = site["story"]["job_id"]
    _write(db, sa.update(Job).where(Job.id == story).values(state="running"))
    try:
        _log_in(page, base, site["tokens"]["submit"], f"/jobs/{story}")
        page.click("#cancel-job")
        page.wait_for_url(f"**/jobs/{story}?notice=cancelled")
        assert "Job cancelled" in page.locator("#notice").inner_text()
        assert page.locator(".summary [data-field=state]").inner_text() == "cancelled"
        assert _job(db, story).state == "cancelled"
        assert page.locator("#cancel-job").count() == 0                 # nothing left to cancel
        page.click("#rerun-job")
        page.wait_for_url("**/jobs/*?notice=rerun")
        new_id = int(page.url.split("/jobs/")[1].split("?")[0])
        assert new_id != story and "submitted again" in page.locator("#notice").inner_text()
        old, new = _job(db, story), _job(db, new_id)
        assert new.state == "queued" and new.spec == SPEC == old.spec
        assert (new.kernel_id, new.gpu_model) == (old.kernel_id, old.gpu_model)
        assert page.locator(".summary [data-field=state]").inner_text() == "queued"
        assert "def scale_kernel" in page.locator("#kernel-source").inner_text()
        _write(db, sa.update(Job).where(Job.id == new_id).values(state="cancelled"))
    finally:
        _write(db, sa.update(Job).where(Job.id == story).values(state="succeeded"))


# --- Screenshots: what a person sees --------------------------------------------------------

_PIXELS = """async ([b64, rgb]) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const colours = new Set();
  let ink = 0, near = 0;
  for (let i = 0; i < d.length; i += 4) {
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) ink++;
    if (rgb && Math.abs(d[i] - rgb[0]) + Math.abs(d[i + 1] - rgb[1]) + Math.abs(d[i + 2] - rgb[2]) < 60) near++;
  }
  return {width: c.width, height: c.height, colours: colours.size, ink: ink / (c.width * c.height), near: near};
}"""


@pytest.fixture
def pixels(browser):
    """Decodes a PNG in a blank page of its own (Chromium's decoder; no imaging library needed)."""
    import base64

    blank = browser.new_page()

    def measure(png: bytes, rgb: tuple[int, int, int] | None = None) -> dict:
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        stats = blank.evaluate(_PIXELS, [base64.b64encode(png).decode(), list(rgb) if rgb else None])
        # the header's size is the decoded image's
        assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (stats["width"], stats["height"])
        return stats

    yield measure
    blank.close()


def _inside(box: dict, width: float, height: float) -> bool:
    return box["width"] > 0 and box["height"] > 0 and box["x"] >= 0 and box["y"] >= 0 and \
        box["x"] + box["width"] <= width + 0.5 and box["y"] + box["height"] <= height + 0.5


def test_screenshot_of_the_jobs_page(page, site, pixels, tmp_path):
    page.goto(site["base"] + "/")
    shot = page.screenshot(path=str(tmp_path / "jobs.png"))
    stats = pixels(shot)
    assert (stats["width"], stats["height"]) == (1280, 900)
    assert stats["colours"] > 40 and 0.03 < stats["ink"] < 0.9, stats        # drawn: neither blank nor a smear
    for selector in ("header", "h1", "#job-filters", "table#jobs", "table#jobs tr.job-row >> nth=0"):
        box = page.locator(selector).bounding_box()
        assert box and _inside(box, 1280, 900), (selector, box)             # on screen, not pushed off it
    # the running job's state badge is painted in its colour (#dbeafe), its text legible on it
    badge = page.locator(f"tr.job-row[data-job-id='{site['running']['job_id']}'] .state")
    badge_stats = pixels(badge.screenshot(), rgb=(0xdb, 0xea, 0xfe))
    assert badge_stats["near"] > 0.3 * badge_stats["width"] * badge_stats["height"], badge_stats
    assert badge_stats["colours"] > 5                                       # the word is drawn on it


def test_screenshot_of_a_job_page(page, site, pixels, tmp_path):
    d = site["done"]
    page.goto(f"{site['base']}/jobs/{d['job_id']}")
    shot = page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    stats = pixels(shot)
    height = page.evaluate("document.documentElement.scrollHeight")
    assert (stats["width"], stats["height"]) == (1280, height) and height > 900
    assert stats["colours"] > 80 and 0.03 < stats["ink"] < 0.9, stats
    scroll = page.evaluate("window.scrollY")
    for selector in ("h1", ".summary", "#trials-chart svg", "figure.param >> nth=0", "table#trials", "#spec-yaml"):
        box = page.locator(selector).bounding_box()
        box = {**box, "y": box["y"] + scroll}
        assert _inside(box, 1280, height), (selector, box)
    # the chart, as drawn: its size is the SVG's box, with the blue trial points and the red best line
    chart = page.locator("#trials-chart svg")
    box = chart.bounding_box()
    chart_png = chart.screenshot(path=str(tmp_path / "trials-chart.png"))
    blue = pixels(chart_png, rgb=tuple(round(0.8 * c + 0.2 * 255) for c in (0x1f, 0x77, 0xb4)))   # 80% opaque on white
    assert abs(blue["width"] - box["width"]) <= 1 and abs(blue["height"] - box["height"]) <= 1, (blue, box)
    assert box["width"] >= 600 and box["height"] >= 280
    assert blue["near"] >= 20 * d["n_ok"], blue                            # ~50 px per point of radius 4
    assert pixels(chart_png, rgb=(0xd6, 0x27, 0x28))["near"] > 100         # the best-so-far line
    # the highlighted source is coloured text, not one flat colour
    page.goto(f"{site['base']}/jobs/{site['story']['job_id']}")
    source = pixels(page.locator("#kernel-source").screenshot(path=str(tmp_path / "source.png")))
    assert source["colours"] > 20


def test_screenshot_of_the_winners_page(page, site, pixels, tmp_path):
    page.goto(site["base"] + "/winners")
    stats = pixels(page.screenshot(path=str(tmp_path / "winners.png")))
    assert (stats["width"], stats["height"]) == (1280, 900) and stats["colours"] > 40
    even, win = page.locator(".speedup-even"), page.locator(".speedup-win").first
    assert _inside(even.bounding_box(), 1280, 900) and _inside(win.bounding_box(), 1280, 900)
    # a win is painted green (#15803d); "no gain" has no green in it
    green = (0x15, 0x80, 0x3d)
    assert pixels(win.screenshot(), rgb=green)["near"] > 20
    assert pixels(even.screenshot(), rgb=green)["near"] == 0
