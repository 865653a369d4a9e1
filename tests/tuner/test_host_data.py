"""The GPU child's torch-free inputs and checks (tuner/host_data.py) against torch's version."""
from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="compares the numpy data plane with torch's (tuner/data.py) (torch is not installed)")

from jobspec.model import TensorSpec
from tuner import data, host_data


DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "int8", "uint8", "bool"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
CASES = [(d, i) for d in DTYPES for i in ("randn", "rand", "zeros", "ones", "arange", "randint", "full")
         if d in FLOATS or i not in ("randn", "rand")]        # the spec refuses randn/rand of integers


@pytest.mark.parametrize("dtype,init", CASES)
def test_make_array_dtypes_and_initializers(dtype, init):
    kw = {"randint": {"low": -5, "high": 7}, "full": {"value": 3}}.get(init, {})
    if init == "randint" and dtype in ("uint8", "bool"):
        kw = {"low": 0, "high": 2}
    ts = TensorSpec(shape=[4, 6], dtype=dtype, init=init, **kw)
    a = host_data.make_array(ts, (4, 6), seed=11)
    assert a.shape == (4, 6) and a.flags.c_contiguous and a.dtype == host_data.NUMPY[dtype]
    assert np.array_equal(a, host_data.make_array(ts, (4, 6), seed=11))        # deterministic
    vals = host_data.as_numbers(a, dtype)
    # the same distribution as torch's generator makes (values differ, ranges and constants agree)
    t = data.make_tensor(ts, (4, 6), seed=11)
    if init in ("zeros", "ones", "full", "arange"):
        assert np.array_equal(vals, t.double().numpy() if t.dtype.is_floating_point else t.long().numpy())
    elif init == "rand":
        assert vals.min() >= 0.0 and vals.max() <= 1.0 and len(np.unique(vals)) > 10
    elif init == "randint" and dtype != "bool":
        assert vals.min() >= kw["low"] and vals.max() < kw["high"]


def test_bf16_bits_round_to_nearest_even():
    x = np.array([1.0, -2.5, 3.140625, 1.00390625, 1.01171875, float("inf"), float("nan")], np.float32)
    bits = host_data.to_bf16_bits(x)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bits[:-1], want[:-1]) and np.isnan(host_data.from_bf16_bits(bits)[-1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int32"])
def test_compare_agrees_with_the_torch_version(dtype):
    ts = TensorSpec(shape=[64], dtype=dtype, init="randn" if dtype != "int32" else "randint", low=-50, high=50)
    ref = host_data.make_array(ts, (64,), seed=3)
    out = ref.copy()
    to_t = (lambda a: torch.from_numpy(host_data.from_bf16_bits(a)).to(torch.bfloat16)) if dtype == "bfloat16" \
        else torch.from_numpy
    assert host_data.compare(out, ref, dtype, 1e-2, 1e-2) is None
    out[5] = out[5] + (40 if dtype == "int32" else (host_data.to_bf16_bits(np.float32([7.0]))[0] - ref[5]
                                                    if dtype == "bfloat16" else 7))
    got = host_data.compare(out, ref, dtype, 1e-2, 1e-2)
    want = data.compare(to_t(out), to_t(ref), 1e-2, 1e-2)
    assert got is not None and got == want
    assert host_data.compare(out[:10], ref, dtype, 0, 0).startswith("shape (10,) != reference (64,)")


def _whole_output_verdict(out, ref, dtype, atol, rtol) -> bool:
    """The check as a plain element-wise isclose over every element (what compare must decide)."""
    a, b = host_data.as_numbers(out, dtype), host_data.as_numbers(ref, dtype)
    ok = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True) if a.dtype == np.float64 else a == b
    return bool(ok.all())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "uint8", "bool"])
def test_compare_decides_as_a_whole_output_isclose(dtype):
    """compare looks at values only where the bits differ: its verdict and its message are those of
    the whole-output check, for outputs that pass, fail, or hold NaN, ±inf and ±0 (equal, bits unlike)."""
    rng = np.random.default_rng(5)
    init = "randn" if dtype in FLOATS else "randint"
    kw = {"low": 0, "high": 2} if dtype in ("bool", "uint8") else ({"low": -50, "high": 50} if init == "randint" else {})
    ts = TensorSpec(shape=[32, 48], dtype=dtype, init=init, **kw)
    ref = host_data.make_array(ts, (32, 48), seed=9)
    if dtype in FLOATS:
        special = host_data.to_bf16_bits(np.float32([np.nan, np.inf, -np.inf, 0.0])) if dtype == "bfloat16" \
            else np.array([np.nan, np.inf, -np.inf, 0.0], dtype=ref.dtype)
        ref.reshape(-1)[:4] = special
    cases = [ref.copy()]
    for scale in (1e-4, 3e-3, 2e-2, 1.0):        # nudges inside and outside the tolerance, at a few places
        out = ref.copy()
        idx = rng.choice(ref.size, size=25, replace=False)
        vals = host_data.as_numbers(out, dtype).reshape(-1)
        if dtype in FLOATS:
            moved = (vals[idx] * (1 + scale)).astype(np.float32)
            out.reshape(-1)[idx] = host_data.to_bf16_bits(moved) if dtype == "bfloat16" else moved.astype(ref.dtype)
        else:
            out.reshape(-1)[idx] = (vals[idx] + (scale >= 1.0)).astype(ref.dtype) if dtype != "bool" \
                else ~out.reshape(-1)[idx]
        cases.append(out)
    if dtype in FLOATS:
        signed_zero = ref.copy()
        signed_zero.reshape(-1)[3] = host_data.to_bf16_bits(np.float32([-0.0]))[0] if dtype == "bfloat16" \
            else -0.0
        nan_moved = ref.copy()
        nan_moved.reshape(-1)[[0, 7]] = nan_moved.reshape(-1)[[7, 0]]
        cases += [signed_zero, nan_moved]
    verdicts = set()
    for out in cases:
        want = _whole_output_verdict(out, ref, dtype, 1e-2, 1e-2)
        got = host_data.compare(out, ref, dtype, 1e-2, 1e-2)
        assert (got is None) == want, (dtype, got)
        verdicts.add(want)
        if not want:
            a, b = host_data.as_numbers(out, dtype), host_data.as_numbers(ref, dtype)
            n_bad = (~np.isclose(a, b, rtol=1e-2, atol=1e-2, equal_nan=True)).sum() if dtype in FLOATS else (a != b).sum()
            assert got.startswith(f"{n_bad} of {ref.size} elements differ")
    assert verdicts == {True, False}          # the cases hold both passing and failing outputs


@pytest.mark.parametrize("init,dtype", [("randn", "float16"), ("rand", "bfloat16"), ("zeros", "float16"),
                                        ("zeros", "bfloat16"), ("empty", "int32"), ("randn", "float32")])
def test_make_array_values_are_the_seeded_formula(init, dtype):
    """Inputs made in place are the values of `x * std + mean` (`x * (hi - lo) + lo`) from the seed's
    generator, bit for bit: workers sharing a job, and a resumed job's stored reference, agree."""
    ts = TensorSpec(shape=[33, 65], dtype=dtype, init=init, std=0.5, mean=0.25, low=-2.0, high=3.0)
    g = np.random.default_rng(21)
    if init == "randn":
        v = g.standard_normal((33, 65), dtype=np.float32) * ts.std + ts.mean
    elif init == "rand":
        v = g.random((33, 65), dtype=np.float32) * (3.0 - -2.0) + -2.0
    else:
        v = np.zeros((33, 65))
    want = host_data.to_bf16_bits(v.astype(np.float32)) if dtype == "bfloat16" else v.astype(host_data.NUMPY[dtype])
    got = host_data.make_array(ts, (33, 65), seed=21)
    assert got.dtype == want.dtype and got.flags.c_contiguous
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_large_inputs_are_blocks_of_their_own_generators_and_threads_change_nothing(monkeypatch):
    """A random tensor larger than BLOCK is made block by block, block 0 from the seed's generator
    and block i from the child seed (seed, i): the values depend on the seed alone, whether the
    blocks are made on one thread or on many (workers sharing a job, and a resumed job's stored
    reference, agree)."""
    import yaml
    from pathlib import Path

    from jobspec.model import JobSpec

    monkeypatch.setattr(host_data, "BLOCK", 1000)
    ts = TensorSpec(shape=[50, 70], dtype="float16", init="randn", std=0.5, mean=0.25)
    got = host_data.make_array(ts, (50, 70), seed=21).reshape(-1)
    assert got.size == 3500
    for block, (lo, hi) in enumerate(((0, 1000), (1000, 2000), (2000, 3000), (3000, 3500))):
        g = np.random.default_rng(21 if block == 0 else (21, block))
        want = (g.standard_normal(hi - lo, dtype=np.float32) * ts.std + ts.mean).astype(np.float16)
        assert np.array_equal(got[lo:hi].view(np.uint16), want.view(np.uint16)), block
    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "specs" / "matmul.yaml").read_text())
    spec = JobSpec.model_validate({**raw, "sizes": {"M": 96, "N": 64, "K": 80}, "seed": 4})
    monkeypatch.setattr(host_data, "input_threads", lambda: 1)
    args_serial, serial, env = host_data.host_arguments(spec)
    monkeypatch.setattr(host_data, "input_threads", lambda: 8)
    args_threads, threads, _ = host_data.host_arguments(spec)
    tensor_args = [a.name for a in spec.args if a.is_tensor]
    assert list(threads) == list(serial) == tensor_args and len(tensor_args) == 3
    assert all(np.array_equal(threads[k], serial[k]) for k in serial)
    assert not np.array_equal(serial["a_ptr"][:12, :], serial["b_ptr"][:12, :64])    # each tensor its own seed
    for a, x, y in zip(spec.args, args_threads, args_serial):
        assert x is threads[a.name] if a.is_tensor else x == y == env[a.name]
