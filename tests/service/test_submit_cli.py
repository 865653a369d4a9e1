"""`blocktune submit spec.yaml --service URL --token T [--wait]` as a user runs it, against `blocktune
serve` with its in-process worker on the CPU interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from svc_helpers import ROOT, LiveServer, make_token

ADD = Path(__file__).parent / "data" / "add.yaml"


def submit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("BLOCKTUNE_SERVICE_URL", "BLOCKTUNE_TOKEN")}
    e.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "service.cli", "submit", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=300)


def _spec_file(tmp_path: Path, name: str, change) -> str:
    spec = yaml.safe_load(ADD.read_text())
    change(spec)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec) if name.endswith(".yaml") else json.dumps(spec))
    return str(path)


def test_submit_validates_submits_and_waits(tmp_path):
    url = f"sqlite:///{tmp_path / 'submit.db'}"
    server = LiveServer(url, "--interpret", worker=True)
    try:
        token = make_token(url, scopes=("read", "submit"))

        # a mistake in the spec is shown with its place, and nothing is sent
        bad = _spec_file(tmp_path, "bad.yaml", lambda s: s.update(grid=["cdiv(n_elements, BLOCK)"]))
        r = submit(bad, "--service", server.base, "--token", token)
        assert r.returncode == 2 and "invalid job spec" in r.stderr and "grid" in r.stderr
        assert "unknown name(s) BLOCK" in r.stderr
        # what only the service can check (the kernel's own arguments): its 422, field by field
        extra = _spec_file(tmp_path, "extra.json", lambda s: s["args"].insert(
            3, {"name": "alpha", "value": 2.0}))
        r = submit(extra, "--service", server.base, "--token", token)
        assert r.returncode == 3 and "HTTP 422" in r.stderr and "body.args: not arguments of kernel add_kernel: alpha" \
            in r.stderr
        # no token: the service says so
        r = submit(str(ADD), "--service", server.base)
        assert r.returncode == 3 and "HTTP 401" in r.stderr and "API token is required" in r.stderr
        assert httpx.get(server.base + "/api/v1/jobs").json()["total"] == 0

        # the service's URL and the token from the environment, and the job followed to its end
        r = submit(str(ADD), "--wait", "--poll", "0.3", "--json",
                   env={"BLOCKTUNE_SERVICE_URL": server.base + "/", "BLOCKTUNE_TOKEN": token})
        assert r.returncode == 0, r.stdout + r.stderr
        final = json.loads(r.stdout.strip().splitlines()[-1])
        assert final["state"] == "succeeded" and final["trials_done"] == 6
        assert final["url"] == f"{server.base}/jobs/{final['id']}"
        assert "succeeded: best BLOCK_SIZE=" in r.stderr
        assert httpx.get(final["url"]).status_code == 200            # the job's dashboard page

        # without --wait: the job's id and page, at once
        r = submit(str(ADD), "--service", server.base, "--token", token, "--idempotency-key", "again")
        assert r.returncode == 0, r.stderr
        second = int(r.stdout.split()[1])
        # the state the service answered with: the serve's own worker, woken by the job's creation
        # (db/job_wakeups.py), may have claimed it before the answer was written
        assert r.stdout.strip() in (f"job {second} (add_kernel) {state}: {server.base}/jobs/{second}"
                                    for state in ("queued", "running"))
        r = submit(str(ADD), "--service", server.base, "--token", token, "--idempotency-key", "again")
        assert r.returncode == 0 and int(r.stdout.split()[1]) == second      # the same key: the same job
    finally:
        server.stop()


def test_submit_needs_a_service():
    r = submit(str(ADD))
    assert r.returncode == 2 and "--service" in r.stderr
