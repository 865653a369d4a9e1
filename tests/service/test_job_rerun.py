"""POST /api/v1/jobs/{id}/rerun: the job's spec submitted again (the dashboard's Re-run button
does the same through the login session)."""
from __future__ import annotations

from svc_helpers import make_token, seed


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def test_rerun_makes_a_new_queued_job_with_the_same_spec(api, db_url, token):
    done = seed(db_url, state="succeeded", gpu_model="NVIDIA A100-SXM4-80GB")
    url = f"/api/v1/jobs/{done['job_id']}/rerun"
    assert api.post(url).status_code == 401
    reader = make_token(db_url, "reader", {"read"})
    r = api.post(url, headers=auth(reader))
    assert r.status_code == 403 and "'submit' scope" in r.json()["detail"]
    r = api.post(url, headers=auth(token))
    assert r.status_code == 201, r.text
    new, old = r.json(), api.get(f"/api/v1/jobs/{done['job_id']}").json()
    assert new["id"] != old["id"] and new["state"] == "queued" and new["trials_done"] == 0
    assert new["best_config"] is None and new["study_name"] == f"job-{new['id']}"
    assert (new["spec"], new["kernel_id"], new["gpu_model"], new["trials_total"]) == \
        (old["spec"], old["kernel_id"], old["gpu_model"], old["trials_total"])
    assert api.get("/api/v1/jobs", params={"state": "queued"}).json()["items"][0]["id"] == new["id"]
    assert api.post("/api/v1/jobs/999999/rerun", headers=auth(token)).status_code == 404
