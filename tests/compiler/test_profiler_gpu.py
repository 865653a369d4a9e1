"""compiler.profiler on the GPU (`pytest -m gpu`): launches timed with CUDA events on their stream,
a scope's device time when nothing inside it was timed, and the device list of the file.

Fresh random inputs each run (seed printed), outputs poisoned with NaN before the launch.
"""
from __future__ import annotations

import json
import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
import compiler.profiler as proton  # noqa: E402
from compiler.profiler import viewer  # noqa: E402
from tests.compiler.kernels import profiled as K  # noqa: E402

from tests.compiler.kernels.util import gen  # noqa: E402,F401 - the fixture

pytestmark = pytest.mark.gpu
DEV = "cuda"



@pytest.fixture(autouse=True)
def no_session_left():
    yield
    proton.finalize()


def _inputs(gen, n):
    x = torch.randn(n, generator=gen).to(DEV)
    y = torch.randn(n, generator=gen).to(DEV)
    return x, y, torch.full((n,), float("nan"), device=DEV)


def _axpy(x, y, out, alpha):
    n = x.numel()
    K.axpy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, alpha, n, BLOCK=1024)


def _child(node, name):
    names = [c["frame"]["name"] for c in node["children"]]
    assert name in names, f"{name!r} not among {names}"
    return node["children"][names.index(name)]


def test_launches_are_timed_with_events_and_results_stay_right(gen, tmp_path):
    n = 1 << 24
    x, y, out = _inputs(gen, n)
    _axpy(x, y, out, 0.25)                    # compile outside the profile
    out.fill_(float("nan"))
    reps = 20
    proton.start(str(tmp_path / "gpu"), hook="triton")
    with proton.scope("axpy"):
        for _ in range(reps):
            _axpy(x, y, out, 0.25)
    proton.finalize()
    torch.testing.assert_close(out.double(), 0.25 * x.double() + y.double(), rtol=1e-6, atol=1e-6)

    root, devices = json.loads((tmp_path / "gpu.hatchet").read_text())
    op = _child(_child(root, "axpy"), f"axpy_kernel [n={n}, BLOCK=1024, grid=({n // 1024},)]")
    assert op["metrics"] == {"flops32": reps * 2.0 * n, "bytes": reps * 12 * n}
    kernel = _child(op, "axpy_kernel")["metrics"]
    assert kernel["count"] == reps and kernel["device_type"] == "CUDA"
    assert kernel["device_id"] == str(torch.cuda.current_device())
    per_launch_ms = kernel["time (ns)"] / reps / 1e6
    bench_ms = triton.testing.do_bench(lambda: _axpy(x, y, out, 0.25), warmup=5, rep=50)
    # events measure the kernel (the loop keeps the GPU busy) plus at most a launch gap
    assert 0.5 * bench_ms <= per_launch_ms <= 1.5 * bench_ms + 0.05, (per_launch_ms, bench_ms)
    info = devices["CUDA"][kernel["device_id"]]
    major, minor = torch.cuda.get_device_capability()
    assert info["arch"] == f"{major}{minor}"
    assert info["num_sms"] == torch.cuda.get_device_properties(0).multi_processor_count
    assert info["clock_rate"] > 0 and info["memory_clock_rate"] > 0 and info["bus_width"] > 0
    tree, metrics = viewer.parse(["gbyte/s", "time/ms"], str(tmp_path / "gpu.hatchet"))
    gbps = {f.name: f for f in tree.frames()}["axpy"].inc["gbyte/s (inc)"]
    assert gbps == pytest.approx(reps * 12 * n / (kernel["time (ns)"] * 1e-9) / 1e9)


def test_a_scope_without_triton_launches_gets_its_device_time(gen, tmp_path):
    a = torch.randn((2048, 2048), generator=gen).to(DEV, torch.float16)
    torch.matmul(a, a)
    proton.start(str(tmp_path / "scopes"), hook="triton")
    with proton.scope("outer"):
        with proton.scope("torch", {"flops16": 2.0 * 2048 ** 3}):
            c = torch.matmul(a, a)
        x, y, out = _inputs(gen, 4096)
        with proton.scope("triton"):
            _axpy(x, y, out, 2.0)
    proton.finalize()
    torch.testing.assert_close(out.double(), 2.0 * x.double() + y.double())
    torch.testing.assert_close(c.float(), (a.double() @ a.double()).float(), rtol=2e-2, atol=0.5)
    root = json.loads((tmp_path / "scopes.hatchet").read_text())[0]
    outer = _child(root, "outer")
    dev = _child(_child(outer, "torch"), proton.session.SCOPE_DEVICE_TIME)["metrics"]
    assert dev["count"] == 1 and dev["time (ns)"] > 0 and dev["device_type"] == "CUDA"
    # outer and triton hold timed children: no device time of their own (no double counting)
    assert proton.session.SCOPE_DEVICE_TIME not in [c["frame"]["name"] for c in outer["children"]]
    triton_scope = _child(outer, "triton")
    assert [c["frame"]["name"] for c in triton_scope["children"]] == \
        ["axpy_kernel [n=4096, BLOCK=1024, grid=(4,)]"]


def test_launches_on_a_side_stream_are_timed_on_it(gen, tmp_path):
    x, y, out = _inputs(gen, 1 << 20)
    side = torch.cuda.Stream()
    proton.start(str(tmp_path / "side"))
    with torch.cuda.stream(side):
        _axpy(x, y, out, -1.0)
    proton.finalize()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), -x.double() + y.double())
    root = json.loads((tmp_path / "side.hatchet").read_text())[0]
    kernel = _child(root, "axpy_kernel")["metrics"]
    assert kernel["count"] == 1 and kernel["time (ns)"] > 0
