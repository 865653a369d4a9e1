"""Shared fixtures: GPU detection, a real PostgreSQL server, the system Chromium.

PostgreSQL is started for real: a throw-away cluster (initdb + pg_ctl) on 127.0.0.1 owned by the
`postgres` system user when the tests run as root (initdb refuses root). scripts/setup.sh installs
Debian's `postgresql` package; without it the postgres tests fail loudly (they are part of CI).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _has_gpu() -> bool:
    try:
        from compiler.runtime import driver
        return driver.has_gpu()
    except Exception:
        return False


HAS_GPU = _has_gpu()


@pytest.fixture(scope="session", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    """Tests compile into a cache of their own, never the user's (and start it empty)."""
    if "BLOCKTUNE_CACHE_DIR" not in os.environ:
        os.environ["BLOCKTUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))
    yield


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run scripts/gpu-check.sh on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bindir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return str(Path(found[-1]).parent)
    initdb = shutil.which("initdb")
    if initdb:
        return str(Path(initdb).parent)
    raise RuntimeError("PostgreSQL is not installed: run scripts/setup.sh (installs Debian's postgresql)")


def _as_pg_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--"] + cmd


@pytest.fixture(scope="session")
def postgres_server():
    """A running PostgreSQL server; yields a base URL without a database name."""
    bindir = _pg_bindir()
    root = tempfile.mkdtemp(prefix="blocktune-pg-")
    data = os.path.join(root, "data")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    subprocess.run(_as_pg_user([f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True)
    log = os.path.join(root, "server.log")
    subprocess.run(_as_pg_user([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-o",
                                f"-h 127.0.0.1 -p {port} -k {root} -F", "start"]), check=True, capture_output=True)
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    try:
        yield url
    finally:
        subprocess.run(_as_pg_user([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database on the shared server for one test."""
    from tests.pg import scratch_database

    with scratch_database(postgres_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'blocktune.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    """Runs a test once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'blocktune.db'}"
    return request.getfixturevalue("postgres_url")


CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def chromium_path():
    if not os.path.exists(CHROMIUM):
        raise RuntimeError("Debian's chromium is not installed: run scripts/setup.sh")
    return CHROMIUM


@pytest.fixture(autouse=True)
def _process_limits_restored():
    """The tuner's compile step caps its own process (RLIMIT_AS, RLIMIT_CPU: tuner/compile_step.py);
    a test that runs it in the test process must not leave the cap on. Chromium, started later by the
    dashboard tests, inherits it and dies at start (SIGTRAP) when 8 GiB of address space cannot hold
    its V8 heap reservation."""
    import resource

    kept = {r: resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU)}
    yield
    for r, limits in kept.items():
        if resource.getrlimit(r) != limits:
            resource.setrlimit(r, limits)
