from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from svc_helpers import LiveServer, make_token, seed  # noqa: E402


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """`blocktune serve` on 127.0.0.1 over a SQLite database with real rows."""
    from db.migrate import upgrade

    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'blocktune.db'}"
    upgrade(url)
    data = seed(url, n_trials=10)
    data["running"] = seed(url, n_trials=4, state="running", fingerprint="e" * 64, kernel_name="softmax")
    data["queued"] = seed(url, n_trials=0, state="queued", fingerprint="9" * 64, kernel_name="queued_kernel")
    data["token"] = make_token(url)
    server = LiveServer(url)
    data["url"] = server.base
    data["db"] = url
    try:
        yield data
    finally:
        server.stop()
