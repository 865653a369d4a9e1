"""`blocktune migrate` and `blocktune token create | list | revoke` as a user runs them."""
from __future__ import annotations

import subprocess
import sys
import time

from fastapi.testclient import TestClient

from service.app import create_app
from service.core.config import Settings
from svc_helpers import ROOT


def blocktune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_migrate_and_token_lifecycle(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    r = blocktune("migrate", "--database-url", url)
    assert r.returncode == 0 and "database at revision" in r.stderr
    r = blocktune("token", "create", "--name", "ci", "--scope", "read,admin", "--database-url", url)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith("bt_") and "shown only once" in r.stderr
    r = blocktune("token", "--database-url", url, "list")
    assert r.returncode == 0 and "\tci\tactive\tread,admin\t" in r.stdout and token not in r.stdout
    prefix = r.stdout.split("\t")[1]
    assert token.startswith(prefix)
    # a server trusts a verified token for token_cache_ttl_s: a revocation by the CLI (another
    # process) takes effect within it
    settings = Settings(database_url=url, token_cache_ttl_s=0.5)
    with TestClient(create_app(settings, database_url=url)) as c:
        ok = c.get("/api/v1/tokens", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.json()[0]["name"] == "ci"
        r = blocktune("token", "revoke", prefix, "--database-url", url)
        assert r.returncode == 0 and "revoked" in r.stderr
        deadline = time.monotonic() + settings.token_cache_ttl_s + 5
        while c.get("/api/v1/tokens", headers={"Authorization": f"Bearer {token}"}).status_code == 200:
            assert time.monotonic() < deadline, "the revoked token still works well past the TTL"
            time.sleep(0.05)
        assert c.get("/api/v1/tokens", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert blocktune("token", "revoke", "nope", "--database-url", url).returncode == 1
    r = blocktune("token", "--database-url", url, "list")
    assert "revoked" in r.stdout


def test_token_create_with_scopes(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def create(*args: str) -> str:
        r = blocktune("token", "create", *args, "--database-url", url)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    publisher = create("ci-publisher", "--scope", "publish")
    submitter = create("miss", "--scope", "read", "--scope", "submit")
    ops = create("ops", "--scope", "admin,read", "--scope", "publish")
    default = create("laptop")
    r = blocktune("token", "list", "--database-url", url)
    rows = {line.split("\t")[2]: line.split("\t")[4] for line in r.stdout.splitlines()}
    assert rows == {"ci-publisher": "publish", "miss": "read,submit", "ops": "read,publish,admin",
                    "laptop": "read,publish,submit"}

    r = blocktune("token", "create", "x", "--scope", "publish,root", "--database-url", url)
    assert r.returncode == 2 and "unknown scope 'root'" in r.stderr and "read, publish, submit, admin" in r.stderr
    assert blocktune("token", "create", "x", "--scope", ",", "--database-url", url).returncode == 2
    r = blocktune("token", "create", "x", "--name", "y", "--database-url", url)
    assert r.returncode == 2 and "two names given" in r.stderr
    r = blocktune("token", "create", "--help")
    assert "Default: read,publish,submit" in " ".join(r.stdout.split())

    body = {"kernel_fingerprint": "f" * 64, "kernel_name": "k", "problem_key": {"n": 1}, "gpu_model": "g",
            "compute_capability": "9.0", "config": {"BLOCK": 64}, "median_ms": 1.0}
    with TestClient(create_app(database_url=url)) as c:
        def status(method, path, tok, **kw):
            return c.request(method, path, headers={"Authorization": f"Bearer {tok}"}, **kw).status_code

        assert status("POST", "/api/v1/configs", publisher, json=body) == 200
        assert status("POST", "/api/v1/jobs/1/cancel", publisher) == 403
        assert status("GET", "/api/v1/tokens", publisher) == 403
        assert status("POST", "/api/v1/configs", submitter, json=body) == 403
        assert status("GET", "/api/v1/tokens", default) == 403
        assert status("GET", "/api/v1/tokens", ops) == 200
        assert status("POST", "/api/v1/tokens", ops, json={"name": "p", "scopes": ["publish"]}) == 201
        assert status("POST", "/api/v1/tokens", ops, json={"name": "s", "scopes": ["submit"]}) == 403
