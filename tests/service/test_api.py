"""The REST API on SQLite and on PostgreSQL (real databases, real rows)."""
from __future__ import annotations

import json

import pytest

from svc_helpers import add_worker, make_token, seed


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def test_health_and_openapi(api):
    r = api.get("/healthz")
    assert r.status_code == 200 and r.json()["database"] == "ok"
    spec = api.get("/api/v1/openapi.json").json()
    assert "/api/v1/jobs" in spec["paths"] and "/api/v1/configs/best" in spec["paths"]
    assert api.get("/docs").status_code == 200


def test_jobs_list_get_filters_pagination(api, db_url):
    a = seed(db_url, n_trials=10)
    b = seed(db_url, n_trials=5, state="running", kernel_name="mm", fingerprint="a" * 64, gpu_model="NVIDIA A100",
             cc="8.0")
    r = api.get("/api/v1/jobs")
    assert r.status_code == 200
    page = r.json()
    assert page["total"] == 2 and [j["id"] for j in page["items"]] == [b["job_id"], a["job_id"]]
    assert api.get("/api/v1/jobs", params={"state": "running"}).json()["items"][0]["id"] == b["job_id"]
    assert api.get("/api/v1/jobs", params={"kernel": "mm"}).json()["total"] == 1
    assert api.get("/api/v1/jobs", params={"kernel": "f" * 64}).json()["items"][0]["id"] == a["job_id"]
    assert api.get("/api/v1/jobs", params={"gpu_model": "NVIDIA A100"}).json()["total"] == 1
    assert api.get("/api/v1/jobs", params={"state": "queued"}).json()["total"] == 0
    p = api.get("/api/v1/jobs", params={"limit": 1, "offset": 1}).json()
    assert p["total"] == 2 and len(p["items"]) == 1 and p["items"][0]["id"] == a["job_id"]
    job = api.get(f"/api/v1/jobs/{a['job_id']}").json()
    assert job["progress"] == 1.0 and job["trials_done"] == 10
    assert job["best_time_ms"] == pytest.approx(a["best"][0]) and job["best_config"] == a["best"][1]
    assert job["kernel_name"] == "add_kernel"
    assert api.get("/api/v1/jobs/999999").status_code == 404


def test_trials_of_a_job(api, db_url):
    a = seed(db_url, n_trials=10)
    trials = api.get(f"/api/v1/jobs/{a['job_id']}/trials").json()
    assert [t["number"] for t in trials] == list(range(10))
    assert {t["status"] for t in trials} == {"ok", "compile-error"}
    ok = api.get(f"/api/v1/jobs/{a['job_id']}/trials", params={"status": "ok"}).json()
    assert len(ok) == 8 and all(t["median_ms"] > 0 for t in ok)


def test_cancel_needs_token_and_works(api, db_url, token):
    a = seed(db_url, state="running")
    url = f"/api/v1/jobs/{a['job_id']}/cancel"
    assert api.post(url).status_code == 401
    assert api.post(url, headers=auth("bt_not-a-real-token")).status_code == 401
    r = api.post(url, headers=auth(token))
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and r.json()["finished_at"]
    done = seed(db_url, state="succeeded", fingerprint="b" * 64)
    r = api.post(f"/api/v1/jobs/{done['job_id']}/cancel", headers=auth(token))
    assert r.status_code == 409 and "succeeded" in r.json()["detail"]


def test_tokens_are_hashed_and_revocable(api, db_url, token):
    import sqlalchemy as sa

    from db.engine import make_engine
    from db.models import ApiToken

    eng = make_engine(db_url)
    with eng.connect() as c:
        rows = c.execute(sa.select(ApiToken.token_hash, ApiToken.prefix)).all()
    eng.dispose()
    assert len(rows) == 1 and rows[0][0] != token and len(rows[0][0]) == 64 and token.startswith(rows[0][1])
    listed = api.get("/api/v1/tokens", headers=auth(token)).json()
    assert listed[0]["token"] is None and listed[0]["last_used_at"] is not None
    r = api.post("/api/v1/tokens", json={"name": "ci"}, headers=auth(token))
    assert r.status_code == 201
    second = r.json()["token"]
    assert second and second != token
    r = api.delete(f"/api/v1/tokens/{r.json()['id']}", headers=auth(token))
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert api.get("/api/v1/tokens", headers=auth(second)).status_code == 401
    assert api.get("/api/v1/tokens").status_code == 401


def test_reads_need_a_token_when_configured(db_url):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.core.config import Settings

    tok = make_token(db_url)
    app = create_app(Settings(database_url=db_url, read_requires_token=True), database_url=db_url)
    with TestClient(app) as c:
        for path in ("/api/v1/jobs", "/api/v1/configs/best?kernel=k&gpu_model=g", "/api/v1/gpus"):
            assert c.get(path).status_code == 401, path
        page = c.get("/", follow_redirects=False)       # a dashboard page sends the browser to log in
        assert page.status_code == 303 and page.headers["location"].startswith("/login?")
        assert c.get("/api/v1/jobs", headers=auth(tok)).status_code == 200
        assert c.get("/api/v1/configs/best?kernel=k&gpu_model=g", headers=auth(tok)).status_code == 404
        assert c.get("/healthz").status_code == 200


def test_config_lookup_match_levels(api, db_url):
    seed(db_url, key={"n_elements": 4096}, gpu_model="NVIDIA H100 80GB HBM3", cc="9.0")
    seed(db_url, key={"n_elements": 1 << 20}, gpu_model="NVIDIA H100 80GB HBM3", cc="9.0")
    seed(db_url, key={"n_elements": 4096}, gpu_model="NVIDIA A100-SXM4-80GB", cc="8.0")
    api.app.state.config_index.refresh()      # rows written by another connection: reload now

    def look(**params):
        params = {"kernel": "f" * 64, **params}
        params["key"] = json.dumps(params.get("key", {}))
        return api.get("/api/v1/configs/best", params=params)

    r = look(key={"n_elements": 4096}, gpu_model="NVIDIA H100 80GB HBM3")
    assert r.status_code == 200
    body = r.json()
    assert body["match"] == "exact" and body["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert body["default_ms"] == pytest.approx(body["median_ms"] * 1.5) and body["speedup"] == pytest.approx(1.5)
    assert set(body["config"]) == {"BLOCK_SIZE", "num_warps", "num_stages"}
    # by name too
    assert api.get("/api/v1/configs/best", params={"kernel": "add_kernel", "gpu_model": "NVIDIA A100-SXM4-80GB",
                                                   "key": '{"n_elements": 4096}'}).json()["match"] == "exact"
    # another model of the same compute capability (H100 PCIe is 9.0, like the SXM)
    r = look(key={"n_elements": 4096}, gpu_model="NVIDIA H100 PCIe", compute_capability="9.0")
    assert r.json()["match"] == "compute_capability" and r.json()["gpu_model"] == "NVIDIA H100 80GB HBM3"
    # the nearest tuned key on this model: 3000 is nearer 4096 than 1M; 900k nearer 1M
    r = look(key={"n_elements": 3000}, gpu_model="NVIDIA H100 80GB HBM3")
    assert r.json()["match"] == "nearest_key" and r.json()["problem_key"] == {"n_elements": 4096}
    r = look(key={"n_elements": 900_000}, gpu_model="NVIDIA H100 80GB HBM3")
    assert r.json()["problem_key"] == {"n_elements": 1 << 20}
    # nothing fits: unknown kernel, unknown GPU without a capability, other key names
    assert look(kernel="nope", key={"n_elements": 4096}, gpu_model="NVIDIA H100 80GB HBM3").status_code == 404
    assert look(key={"n_elements": 4096}, gpu_model="Some GPU").status_code == 404
    assert look(key={"m": 4096}, gpu_model="NVIDIA H100 80GB HBM3").status_code == 404


def test_publish_keeps_the_faster_config(api, db_url, token):
    body = {"kernel_fingerprint": "c" * 64, "kernel_name": "softmax", "problem_key": {"n": 1024},
            "gpu_model": "NVIDIA L4", "compute_capability": "8.9", "config": {"BLOCK": 128, "num_warps": 4},
            "median_ms": 0.5, "default_ms": 0.9}
    assert api.post("/api/v1/configs", json=body).status_code == 401
    assert api.post("/api/v1/configs", json=body, headers=auth(token)).status_code == 200
    q = {"kernel": "c" * 64, "gpu_model": "NVIDIA L4", "key": '{"n":1024}'}
    assert api.get("/api/v1/configs/best", params=q).json()["median_ms"] == 0.5   # now memoized
    slower = {**body, "config": {"BLOCK": 64, "num_warps": 2}, "median_ms": 0.7}
    assert api.post("/api/v1/configs", json=slower, headers=auth(token)).json()["config"] == {"BLOCK": 128, "num_warps": 4}
    faster = {**body, "config": {"BLOCK": 256, "num_warps": 8}, "median_ms": 0.3}
    api.post("/api/v1/configs", json=faster, headers=auth(token))
    r = api.get("/api/v1/configs/best", params=q)      # the write replaced the index and its memo
    assert r.json()["config"] == {"BLOCK": 256, "num_warps": 8} and r.json()["median_ms"] == 0.3
    assert [c["kernel_name"] for c in api.get("/api/v1/configs", params={"gpu_model": "NVIDIA L4"}).json()] == ["softmax"]


def test_kernels_gpus_and_live_workers(api, db_url):
    a = seed(db_url)
    add_worker(db_url, a["gpu_id"], "host:gpu0", heartbeat_age_s=1)
    add_worker(db_url, a["gpu_id"], "host:gpu1", heartbeat_age_s=3600)
    ks = api.get("/api/v1/kernels").json()
    assert ks[0]["name"] == "add_kernel" and ks[0]["jobs"] == 1
    k = api.get(f"/api/v1/kernels/{'f' * 64}").json()
    assert "def add_kernel" in k["source"]
    assert api.get("/api/v1/kernels/add_kernel").json()["id"] == k["id"]
    assert api.get("/api/v1/kernels/nope").status_code == 404
    gpus = api.get("/api/v1/gpus").json()
    assert gpus[0]["model"] == "NVIDIA H100 80GB HBM3" and gpus[0]["alive_workers"] == 1
    ws = {w["name"]: w["alive"] for w in api.get("/api/v1/workers").json()}
    assert ws == {"host:gpu0": True, "host:gpu1": False}


def test_metrics(api, db_url):
    seed(db_url)
    seed(db_url, state="queued", fingerprint="d" * 64)
    api.get("/api/v1/jobs")
    api.get("/api/v1/jobs/1")
    text = api.get("/metrics").text
    assert 'blocktune_jobs{state="succeeded"} 1.0' in text and 'blocktune_jobs{state="queued"} 1.0' in text
    assert 'blocktune_http_requests_total{method="GET",route="/api/v1/jobs",status="200"} 1.0' in text
    assert 'route="/api/v1/jobs/{job_id}"' in text
    assert "blocktune_http_request_duration_seconds_bucket" in text
    assert "blocktune_trials_per_second" in text and "blocktune_trials_total 24.0" in text
    assert "blocktune_trials_per_second 0.4" in text


def test_lookups_are_counted_once_whoever_answers(api):
    """The lookup's fast path sits in front of the app with metrics of its own: a lookup it answers
    (here: nothing tuned, 404) and one it leaves to the route (a malformed key: 422) are each
    counted once, under the route."""
    best = "/api/v1/configs/best"
    question = {"kernel": "f" * 64, "gpu_model": "NVIDIA H100 80GB HBM3"}
    assert api.get(best, params={**question, "key": '{"n_elements": 4096}'}).status_code == 404   # the fast path
    assert api.get(best, params={**question, "key": "[1, 2]"}).status_code == 422                  # the route
    assert api.get(best, params={**question, "key": "[1, 2]"}).status_code == 422
    text = api.get("/metrics").text
    assert f'blocktune_http_requests_total{{method="GET",route="{best}",status="404"}} 1.0' in text
    assert f'blocktune_http_requests_total{{method="GET",route="{best}",status="422"}} 2.0' in text
    assert f'blocktune_http_request_duration_seconds_count{{method="GET",route="{best}"}} 3.0' in text


def test_validation_errors_name_the_field(api, token):
    r = api.get("/api/v1/jobs", params={"limit": 0})
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["field"] == "query.limit" and "greater than or equal to 1" in d["reason"]
    r = api.get("/api/v1/configs/best", params={"kernel": "k", "gpu_model": "g", "key": "[1, 2]"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.key"
    r = api.post("/api/v1/jobs", content=b"{not json", headers={**auth(token), "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("body")
    r = api.post("/api/v1/tokens", json={"name": "", "extra": 1}, headers=auth(token))
    assert r.status_code == 422 and {d["field"] for d in r.json()["detail"]} == {"body.name", "body.extra"}


def test_request_body_size_limit(api, token):
    big = {"kernel": {"name": "k", "source": "x" * 100_000}}
    r = api.post("/api/v1/jobs", json=big, headers=auth(token))
    assert r.status_code == 413 and "limit" in r.json()["detail"]


HOSTILE_INPUTS = [
    ("GET", "/api/v1/jobs/0", None),
    ("GET", "/api/v1/jobs/-1", None),
    ("GET", "/api/v1/jobs/1e400", None),
    ("GET", "/api/v1/jobs/99999999999999999999999", None),
    ("GET", "/api/v1/jobs?kernel=%00", None),
    ("GET", "/api/v1/jobs?gpu_model=a%00b", None),
    ("GET", "/api/v1/jobs?offset=99999999999999999999", None),
    ("GET", "/api/v1/configs/best?kernel=%00&gpu_model=x", None),
    ("GET", "/api/v1/configs/best?kernel=k&gpu_model=x&key=" + "%5B" * 5000, None),
    ("GET", "/api/v1/configs/best?kernel=k&gpu_model=x&key=%7B%22a%22%3A%7B%7D%7D", None),
    ("GET", "/api/v1/configs/best?kernel=k&gpu_model=x&key=1e999", None),
    ("GET", "/api/v1/kernels/%00", None),
    ("GET", "/api/v1/kernels/" + "9" * 40, None),
    ("GET", "/jobs/abc", None),
    ("GET", "/?state=%00&page=-3", None),
    ("POST", "/api/v1/jobs", b"[]"),
    ("POST", "/api/v1/jobs", b"null"),
    ("POST", "/api/v1/jobs", b'{"kernel": 5}'),
    ("POST", "/api/v1/jobs", b'{"kernel": {"name": "k\\u0000", "source": "\\u0000"}}'),
    ("POST", "/api/v1/jobs", b"\xff\xfe\x00garbage"),
    ("POST", "/api/v1/configs", b'{"kernel_fingerprint": "\\u0000"}'),
    ("POST", "/api/v1/configs", json.dumps({"kernel_fingerprint": "x", "kernel_name": "k", "problem_key": {"n": 1},
                                            "gpu_model": "g\u0000", "compute_capability": "9.0", "config": {},
                                            "median_ms": 1}).encode()),
    ("POST", "/api/v1/configs", json.dumps({"kernel_fingerprint": "x", "kernel_name": "k", "problem_key": {"n": 1},
                                            "gpu_model": "g", "compute_capability": "9.0", "config": {},
                                            "median_ms": 1e308 * 10}).encode()),
    ("POST", "/api/v1/tokens", b'{"name": "' + b"n" * 5000 + b'"}'),
    ("DELETE", "/api/v1/tokens/99999999999", None),
    ("POST", "/api/v1/jobs/1/cancel", b"junk"),
]


@pytest.mark.parametrize("method,path,body", HOSTILE_INPUTS)
def test_nothing_a_client_sends_gives_a_500(api, token, method, path, body):
    r = api.request(method, path, content=body, headers={**auth(token), "content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:500])
    assert r.status_code in (400, 401, 404, 405, 409, 413, 422), (r.status_code, r.text[:500])


def test_lookup_fast_path_and_route_agree(api, db_url):
    seed(db_url, key={"n_elements": 4096})
    api.app.state.config_index.refresh()
    q = {"kernel": "f" * 64, "gpu_model": "NVIDIA H100 80GB HBM3", "key": '{"n_elements": 3000}'}
    fast = api.get("/api/v1/configs/best", params=q)
    # a repeated parameter is not for the fast path: FastAPI's route answers (it takes the last)
    routed = api.get("/api/v1/configs/best", params=list(q.items()) + [("gpu_model", q["gpu_model"])])
    assert fast.status_code == routed.status_code == 200
    assert fast.json() == routed.json() and fast.json()["match"] == "nearest_key"
    miss = {**q, "gpu_model": "nope"}
    assert api.get("/api/v1/configs/best", params=miss).json() == \
        api.get("/api/v1/configs/best", params=list(miss.items()) + [("kernel", q["kernel"])]).json()
