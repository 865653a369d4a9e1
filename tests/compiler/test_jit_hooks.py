"""Triton's JIT cache surface: `device_caches` (clearing it makes the next warmup compile again),
`knobs.runtime.jit_cache_hook` / `jit_post_compile_hook` around each compile, and `preload` from
the hook's specialization data, in this process and in another one. Warmup compiles without a GPU
(for sm_90), so these run on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import knobs


@triton.jit
def tuple_kernel(t, Out):
    tl.store(Out, t[0][0] + t[1][0])


@triton.jit
def copy_kernel(X, Y, BLOCK: tl.constexpr):
    tl.store(Y + tl.arange(0, BLOCK), tl.load(X + tl.arange(0, BLOCK)))


@pytest.fixture
def hooks():
    calls = {"cache": [], "post": []}
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **kw: calls["cache"].append(kw)
        knobs.runtime.jit_post_compile_hook = lambda **kw: calls["post"].append(kw)
        yield calls


def _warm(block=128):
    return copy_kernel.warmup(torch.float32, torch.float32, BLOCK=block, grid=(1,))


def test_hooks_run_once_per_specialization_until_the_cache_is_cleared(hooks):
    copy_kernel.device_caches.clear()
    first = _warm()
    assert _warm() is first and len(hooks["cache"]) == 1 and len(hooks["post"]) == 1
    call = hooks["cache"][0]
    assert call["fn"].name == "copy_kernel" and call["fn"].jit_function is copy_kernel
    assert call["compile"]["constants"] == {"BLOCK": 128} and call["is_manual_warmup"] is True
    assert "copy_kernel[num_warps=4" in call["repr"] and "X: *fp32" in call["repr"]
    _warm(64)
    assert len(hooks["cache"]) == 2
    for dev in list(copy_kernel.device_caches):
        copy_kernel.device_caches[dev][0].clear()
    again = _warm()
    assert len(hooks["cache"]) == 3 and again.hash == first.hash


def test_a_cache_hook_that_returns_true_skips_the_compile():
    copy_kernel.device_caches.clear()
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **kw: True
        assert _warm(32) is None
    assert _warm(32) is not None


def test_preload_compiles_the_same_kernel(hooks):
    tuple_kernel.device_caches.clear()
    warm = tuple_kernel.warmup(((1,), (tl.constexpr(2),)), torch.int32, grid=(1,))
    data = hooks["cache"][-1]["compile"]["specialization_data"]
    assert json.loads(data)["name"].endswith("test_jit_hooks.tuple_kernel")
    tuple_kernel.device_caches.clear()
    assert tuple_kernel.preload(data).hash == warm.hash
    with pytest.raises(RuntimeError, match="Specialization data is for"):
        copy_kernel.preload(data)


def test_preload_in_another_process(hooks, tmp_path):
    copy_kernel.device_caches.clear()
    warm = _warm(256)
    data = hooks["cache"][-1]["compile"]["specialization_data"]
    module = copy_kernel.fn.__module__    # as pytest imported it: the data names the kernel by it
    code = f"import sys, {module} as T; print(T.copy_kernel.preload(sys.stdin.read()).hash)"
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, here]), BLOCKTUNE_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, text=True, env=env,
                         timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.split()
    assert out[-1] == warm.hash
