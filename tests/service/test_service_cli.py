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
    r = blocktune("token", "create", "--name", "ci", "--database-url", url)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith("bt_") and "shown only once" in r.stderr
    r = blocktune("token", "--database-url", url, "list")
    assert r.returncode == 0 and "\tci\tactive" in r.stdout and token not in r.stdout
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
