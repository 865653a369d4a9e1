"""Fixtures of the deploy tests: the Docker engine (installed and started when possible, else the
tests skip saying why) and the blocktune image built from the repository's Dockerfile."""
from __future__ import annotations

import pytest

from docker_engine import (EngineUnavailable, build_blocktune, compose_command, ensure_engine, install_packages,
                           stop_engine)


# The engine (and the image built on it) lives as long as the module that uses it, not the session: a
# dockerd started here is a child of the test process, and kept for the session it stayed one (with
# containerd under it) through every later test — tests/service/test_worker_warm.py, which checks
# that a worker leaves no process behind, saw them in the full suite.
@pytest.fixture(scope="module")
def docker_engine(tmp_path_factory):
    try:
        daemon = ensure_engine(tmp_path_factory.mktemp("dockerd"))
        compose = compose_command()
    except EngineUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
    yield compose
    stop_engine(daemon)


@pytest.fixture(scope="session")
def compose_cli():
    """The compose CLI alone (`config` needs no engine)."""
    try:
        install_packages()
        return compose_command()
    except EngineUnavailable as exc:
        pytest.skip(f"no docker compose: {exc}")


@pytest.fixture(scope="module")
def blocktune_image(docker_engine) -> str:
    """blocktune:test, built with the classic builder (what `docker-compose build` uses)."""
    build_blocktune("blocktune:test", buildkit=False)
    return "blocktune:test"
