"""docker-compose.yml and the Dockerfile: structure checks (no Docker daemon on the test machine)."""
from __future__ import annotations

import re
import tomllib

import yaml

from svc_helpers import ROOT


def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_services():
    s = compose()["services"]
    pg = s["postgres"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    mig = s["migrate"]
    assert mig["command"] == ["migrate"] and mig["restart"] == "no"
    assert mig["depends_on"]["postgres"]["condition"] == "service_healthy"
    api = s["api"]
    assert api["command"][0] == "serve" and "--no-worker" in api["command"]
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["ports"] == ["127.0.0.1:${BLOCKTUNE_API_PORT:-8000}:8000"]   # on the host's loopback only
    workers = {k: v for k, v in s.items() if k.startswith("worker-gpu")}
    assert len(workers) >= 1
    ids = []
    for name, w in workers.items():
        assert w["command"][0] == "worker"
        dev = w["deploy"]["resources"]["reservations"]["devices"]
        assert len(dev) == 1 and dev[0]["driver"] == "nvidia" and dev[0]["capabilities"] == ["gpu"]
        ids += dev[0]["device_ids"]
        # `<node>-gpuN`, the node's name from BLOCKTUNE_NODE (one name per host and GPU)
        assert w["environment"]["BLOCKTUNE_WORKER_NAME"] == "${BLOCKTUNE_NODE:-docker-host}-" + name.removeprefix("worker-")
        assert w["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert w["environment"]["BLOCKTUNE_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert len(ids) == len(set(ids)) == len(workers)   # one GPU each
    for name in ("migrate", "api", *workers):
        assert s[name]["image"] == "${BLOCKTUNE_IMAGE:-blocktune:latest}"


def test_dockerfile_ships_every_package():
    text = (ROOT / "Dockerfile").read_text()
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pat in include:
        pkg = pat.rstrip("*")
        assert re.search(rf"^COPY {pkg} \./{pkg}$", text, re.M), pkg
    assert 'ENTRYPOINT ["blocktune"]' in text and "USER blocktune" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
