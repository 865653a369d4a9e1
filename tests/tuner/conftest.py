"""Tuner test helpers: caches and work directories under the test's tmp dir."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "cache" / "compiler"))
    monkeypatch.delenv("BLOCKTUNE_DATABASE_URL", raising=False)
