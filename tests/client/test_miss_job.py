"""client.compiler_plugin.miss_job: one launch of an @autotune kernel as a tuning job spec — valid for the
tuner's JobSpec and accepted by the service's submission checks (which parse and front-end-compile
the kernel), outputs and in-place tensors from restore_value / reset_to_zero or from the IR, and a
refusal with the reason for what a spec cannot say."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as triton
import compiler.language as tl
from client.compiler_plugin.miss_job import CannotDescribe, job_spec
from jobspec.model import JobSpec
from tuner.submission import prepare_submission

CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=2, num_stages=2)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr, ACT: tl.constexpr = "none"):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    r = a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m)
    if ACT == "relu":
        r = tl.maximum(r, 0.0)
    tl.store(out_ptr + offs, r, mask=m)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale_inplace(x_ptr, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=offs < n) * 2, mask=offs < n)


@triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["sum_ptr"])
@triton.jit
def total(x_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(sum_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.autotune(configs=CONFIGS, key=["n"], restore_value=["x_ptr"])
@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.autotune(configs=CONFIGS, key=["M"])
@triton.jit
def rowsum(x_ptr, out_ptr, M, N, stride_m, stride_n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_m + cols * stride_n, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def accepted(spec: dict, kernel) -> JobSpec:
    """Valid for the tuner, and accepted by the service with the kernel's own fingerprint."""
    js = JobSpec.model_validate(spec)
    assert prepare_submission(spec).fingerprint == kernel.fingerprint
    return js


def cdiv_grid(n):
    return lambda META: (triton.cdiv(n, META["BLOCK"]),)


def test_a_launch_becomes_a_valid_spec():
    n = 100
    x, y, out = (np.zeros(n, np.float32) for _ in range(3))
    spec = job_spec(axpy, (x, y, out, 2.5, n), {"grid": cdiv_grid(n), "ACT": "relu"})
    js = accepted(spec, axpy)
    assert spec["kernel"]["name"] == "axpy" and "import numpy" not in spec["kernel"]["source"]
    assert [a["name"] for a in spec["args"]] == ["x_ptr", "y_ptr", "out_ptr", "a", "n"]
    assert spec["args"][0]["tensor"] == {"shape": [100], "dtype": "float32", "init": "randn"}
    assert spec["args"][2]["tensor"] == {"shape": [100], "dtype": "float32", "init": "zeros"}
    assert spec["args"][3] == {"name": "a", "value": 2.5} and spec["args"][4] == {"name": "n", "value": 100}
    assert spec["constants"] == {"ACT": "relu"}                       # a constexpr passed at the launch
    assert spec["space"] == {"BLOCK": [16, 64], "num_warps": [2, 4], "num_stages": [2, 3]}
    assert spec["configs"] == [{"BLOCK": 16, "num_warps": 4, "num_stages": 3},
                               {"BLOCK": 64, "num_warps": 2, "num_stages": 2}]
    assert spec["default_config"] == spec["configs"][0]
    assert spec["grid"] == ["cdiv(n, BLOCK)"] and spec["key"] == ["n"]
    assert spec["check"] == {"outputs": ["out_ptr"]}
    assert js.problem_key() == {"n": 100} and js.grid_for({"BLOCK": 64}) == (2, 1, 1)
    # a constexpr left to its default is sent too (the tuner needs every constexpr's value)
    assert job_spec(axpy, (x, y, out, 2.5, n), {"grid": (7,)})["constants"] == {"ACT": "none"}


def test_outputs_and_in_place_tensors():
    n = 64
    x, idx = np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.int32)
    spec = job_spec(scale_inplace, (x, idx, n), {"grid": cdiv_grid(n)})
    accepted(spec, scale_inplace)
    assert spec["check"]["outputs"] == ["x_ptr"]
    assert spec["args"][0]["tensor"] == {"shape": [64], "dtype": "float32", "init": "randn", "inplace": True}
    assert spec["args"][1]["tensor"] == {"shape": [64], "dtype": "int32", "init": "zeros"}   # indices: zeros

    s = np.zeros(1, dtype=np.float32)
    spec = job_spec(total, (x, s, n), {"grid": cdiv_grid(n)})
    accepted(spec, total)
    assert spec["check"]["outputs"] == ["sum_ptr"]
    assert spec["args"][1]["tensor"] == {"shape": [1], "dtype": "float32", "init": "zeros", "inplace": True}

    spec = job_spec(double, (x, n), {"grid": cdiv_grid(n)})
    accepted(spec, double)
    assert spec["check"]["outputs"] == ["x_ptr"] and spec["args"][0]["tensor"]["inplace"] is True


def test_dense_views_pass_and_strided_views_are_refused():
    torch = pytest.importorskip("torch", reason="describes torch's tensor views (t(), slices) (torch is not installed)")
    x = torch.zeros(32, 8)
    out = torch.zeros(8)
    t = x.t()                                  # 8 x 32, strides (1, 8): a permutation of dense memory
    spec = job_spec(rowsum, (t, out, 8, 32, t.stride(0), t.stride(1)), {"grid": (8,)})
    accepted(spec, rowsum)
    assert spec["args"][0]["tensor"]["shape"] == [8, 32] and spec["grid"] == ["8"]
    part = x[:, :4]                            # every other half-row: a fresh 32 x 4 tensor is too small
    with pytest.raises(CannotDescribe, match="does not cover its memory densely"):
        job_spec(rowsum, (part, out, 32, 4, part.stride(0), part.stride(1)), {"grid": (32,)})


def test_what_a_spec_cannot_say_is_refused():
    n = 16
    x, y, out = (np.zeros(n, np.float32) for _ in range(3))
    with pytest.raises(CannotDescribe, match="argument 'a' is None"):
        job_spec(axpy, (x, y, out, None, n), {"grid": (1,)})
    with pytest.raises(CannotDescribe, match="dtype complex64"):
        job_spec(axpy, (x.astype(np.complex64), y, out, 1.0, n), {"grid": (1,)})
    with pytest.raises(CannotDescribe, match="grid cannot be sent"):
        job_spec(axpy, (x, y, out, 1.0, n), {"grid": lambda META: (int(n / META["BLOCK"]),)})

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=lambda args: None)], key=["n"])
    @triton.jit
    def hooked(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
    with pytest.raises(CannotDescribe, match="pre_hook"):
        job_spec(hooked, (x, n), {"grid": (1,)})

    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
    @triton.jit
    def heuristic(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
    with pytest.raises(CannotDescribe, match="@heuristics"):
        job_spec(heuristic, (x, n), {"grid": (1,)})
