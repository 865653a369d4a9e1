"""The interpret-mode fixture (no torch: tests over numpy arrays use it too)."""
from __future__ import annotations

import pytest


@pytest.fixture(params=["vec", "seq"])
def interpret(monkeypatch, request):
    """Turn interpret mode on for one test (the runtime reads the environment at launch time).

    Every test runs twice: with straight-line kernels vectorized over programs ("vec") and with
    every program run one by one ("seq"); kernels with control flow always run one by one."""
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("BLOCKTUNE_INTERPRET_VECTORIZE", "1" if request.param == "vec" else "0")
    yield
