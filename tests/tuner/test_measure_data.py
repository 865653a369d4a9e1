"""Measurement statistics, CPU timing, argument construction and output comparison."""
from __future__ import annotations

import time

import pytest

from jobspec.model import JobSpec
from tuner.data import build_args, compare, signature, specialization, tolerances
from tuner.measure import measure_cpu, quantile, spread


def test_spread_and_quantiles():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    s = spread(xs)
    assert s == {"p20": 1.8, "p80": 4.2, "min": 1.0, "max": 5.0, "n": 5}
    assert quantile([1.0], 0.5) == 1.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_measure_cpu_times_the_function_and_resets():
    calls = {"fn": 0, "reset": 0}

    def fn():
        calls["fn"] += 1
        time.sleep(0.002)

    def reset():
        calls["reset"] += 1

    m = measure_cpu(fn, reset, warmup_ms=0, rep_ms=20, min_reps=3, max_reps=5)
    assert 3 <= len(m.samples_ms) <= 5 and m.method == "cpu"
    assert all(s >= 1.9 for s in m.samples_ms)
    assert calls["reset"] == calls["fn"]          # a reset before every run
    assert 1.9 <= m.median_ms <= m.spread["max"]


def spec(**over):
    d = {
        "kernel": {"name": "k", "source": "x"},
        "sizes": {"M": 4, "N": 6},
        "args": [
            {"name": "a", "tensor": {"shape": ["M", "N"], "dtype": "float16", "init": "randn"}},
            {"name": "b", "tensor": {"shape": ["M"], "dtype": "int32", "init": "randint", "low": 0, "high": 5}},
            {"name": "c", "tensor": {"shape": ["M", "N"], "dtype": "float32", "init": "arange", "inplace": True}},
            {"name": "d", "tensor": {"shape": [3], "dtype": "bf16", "init": "full", "value": 2.5}},
            {"name": "stride_am", "value": "stride(a, 0)"},
            {"name": "one", "value": 1},
            {"name": "scale", "value": 0.5},
            {"name": "n", "value": "numel(a) * 4"},
        ],
        "grid": [1],
        "space": {"BLOCK": [16]},
    }
    d.update(over)
    return JobSpec.model_validate(d)


def test_build_args_is_deterministic_and_typed():
    torch = pytest.importorskip("torch", reason="tuner/data.py is the torch data plane (BLOCKTUNE_CHILD_TORCH=1) (torch is not installed)")
    s = spec()
    args1, tensors1, env = build_args(s)
    args2, tensors2, _ = build_args(s)
    for x, y in zip(args1, args2):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
    a, b, c, d = (tensors1[k] for k in "abcd")
    assert a.dtype == torch.float16 and a.shape == (4, 6)
    assert b.dtype == torch.int32 and int(b.min()) >= 0 and int(b.max()) < 5
    assert torch.equal(c, torch.arange(24, dtype=torch.float32).reshape(4, 6))
    assert d.dtype == torch.bfloat16 and float(d[0]) == 2.5
    assert args1[4:] == [6, 1, 0.5, 96]
    assert not torch.equal(a, build_args(spec(seed=1))[1]["a"])   # the seed matters
    sig = signature(s, env)
    assert sig == {"a": "*fp16", "b": "*i32", "c": "*fp32", "d": "*bf16", "stride_am": "i32", "one": "i32",
                   "scale": "fp32", "n": "i32"}
    assert specialization(s, env) == (("a", "b", "c", "d", "n"), ("one",))


def test_compare_with_tolerances():
    torch = pytest.importorskip("torch", reason="tuner/data.py is the torch data plane (BLOCKTUNE_CHILD_TORCH=1) (torch is not installed)")
    s = spec(check={"outputs": ["a", "c"]})
    assert tolerances(s, "a") == (1e-2, 1e-2)
    assert tolerances(s, "c") == (1e-4, 1e-4)
    assert tolerances(spec(check={"outputs": ["c"], "atol": 0.5}), "c") == (0.5, 1e-4)
    ref = torch.linspace(-1, 1, 100)
    assert compare(ref + 1e-6, ref, 1e-4, 1e-4) is None
    out = ref.clone()
    out[7] += 0.1
    why = compare(out, ref, 1e-4, 1e-4)
    assert why is not None and "1 of 100" in why and "(7,)" in why
    nan = torch.tensor([float("nan"), 1.0])
    assert compare(nan, nan.clone(), 0, 0) is None
    assert "shape" in compare(ref[:5], ref, 0, 0)
    assert compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), 0, 0).startswith("1 of 3")


class _SimTimer:
    """EventTimer over a simulated GPU clock: a kernel takes `kernel_ms`, the flush `flush_ms`."""

    def __new__(cls, kernel_ms, flush_ms):
        from tuner.measure import EventTimer

        class Sim(EventTimer):
            def __init__(self):
                self.now, self.calls, self.flushes, self.captured = 0.0, 0, 0, None

            def kernel(self):
                self.now += kernel_ms
                self.calls += 1

            def flush(self):
                self.now += flush_ms
                self.flushes += 1

            def events(self, n):
                return [[None] for _ in range(n)]

            def record(self, ev):
                ev[0] = self.now

            def elapsed_ms(self, a, b):
                return b[0] - a[0]

            def sync(self):
                pass

            def capture(self, fn, batch):
                self.captured = batch

                def replay():
                    for _ in range(batch):
                        fn()
                return replay, lambda: None
        return Sim()


def test_event_protocol_counts_like_triton_do_bench():
    """Warm-up and repeats are counted per repeat *with* its flush (Triton's do_bench); samples
    are the kernel alone; short kernels go through a graph batch and are divided by its size."""
    t = _SimTimer(kernel_ms=0.05, flush_ms=0.05)
    m = t.measure(t.kernel, warmup_ms=25.0, rep_ms=100.0, min_reps=10, max_reps=5000, cuda_graph="never")
    assert m.method == "events" and len(m.samples_ms) == 1000           # 100 ms / (0.05 + 0.05)
    assert all(abs(x - 0.05) < 1e-9 for x in m.samples_ms)
    assert t.calls == 1 + 5 + 250 + 1000                                # first run, estimate, warm-up, repeats
    g = _SimTimer(kernel_ms=0.002, flush_ms=0.08)
    m = g.measure(g.kernel, warmup_ms=1.0, rep_ms=50.0, min_reps=10, max_reps=1000)
    assert m.method == "cuda-graph" and g.captured == 100               # ~0.2 ms batches of a 2 µs kernel
    assert all(abs(x - 0.002) < 1e-9 for x in m.samples_ms) and len(m.samples_ms) == int(50 / 0.28)
