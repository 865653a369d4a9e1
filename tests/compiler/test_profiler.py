"""compiler.profiler (Triton's proton) in interpret mode: launch hooks and `launch_metadata`,
sessions, nested scopes, the .hatchet file, and the viewer against a file written to proton's
format (its TreeData::dumpHatchet) by hand."""
from __future__ import annotations

import json
import pytest
import torch

import compiler.profiler as proton
from compiler import knobs
from compiler.profiler import session, viewer
from compiler.runtime.launch_hooks import LazyDict
from tests.compiler.kernels import profiled as K
from tests.compiler.kernels.util import gen  # noqa: F401 - the fixture


@pytest.fixture
def interpreted(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    yield
    proton.finalize()           # a failed test leaves no session (nor launch hook) behind



def _inputs(gen, n):
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    return x, y, torch.full((n,), float("nan"))


def _axpy(x, y, out, alpha=0.5, block=128):
    n = x.numel()
    K.axpy_kernel[lambda meta: (triton_cdiv(n, meta["BLOCK"]),)](x, y, out, alpha, n, BLOCK=block)


def triton_cdiv(a, b):
    return -(-a // b)


def _load(path):
    with open(path) as f:
        return json.load(f)


def _child(node, name):
    names = [c["frame"]["name"] for c in node["children"]]
    assert name in names, f"{name!r} not among {names}"
    return node["children"][names.index(name)]


# -- launch hooks ----------------------------------------------------------------------------------

def test_launch_metadata_gets_the_resolved_grid_the_kernel_and_every_argument(interpreted, gen):
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        x, y, out = _inputs(gen, 300)
        _axpy(x, y, out, alpha=2.0)
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    torch.testing.assert_close(out, 2.0 * x + y)
    assert len(seen) == 1 and isinstance(seen[0], LazyDict)
    assert seen[0].data["name"] == "axpy_kernel"           # before get(): the kernel's name
    md = seen[0].get()
    assert md["name"] == "axpy_kernel [n=300, BLOCK=128, grid=(3,)]"   # grid called with BLOCK's default
    assert md["flops32"] == 600.0 and md["bytes"] == 3600


def test_launch_metadata_is_computed_only_when_a_hook_asks(interpreted, gen, monkeypatch):
    calls = []
    monkeypatch.setattr(K.axpy_kernel, "launch_metadata", lambda *a: calls.append(a) or {})
    noop = lambda md: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(noop)
    try:
        x, y, out = _inputs(gen, 64)
        _axpy(x, y, out)
    finally:
        knobs.runtime.launch_enter_hook.remove(noop)
    assert calls == []
    _axpy(x, y, out)                                      # no hook: the fast path
    assert calls == []


def test_exit_hooks_run_last_added_first_even_when_the_launch_fails(interpreted):
    order = []
    first, second = (lambda md: order.append("first")), (lambda md: order.append("second"))
    knobs.runtime.launch_exit_hook.add(first)
    knobs.runtime.launch_exit_hook.add(second)
    try:
        with pytest.raises(Exception):
            K.scale_kernel[(1,)](torch.ones(4), torch.ones(4), 4)   # BLOCK missing
    finally:
        knobs.runtime.launch_exit_hook.remove(first)
        knobs.runtime.launch_exit_hook.remove(second)
    assert order == ["second", "first"]


# -- sessions, scopes, the file ----------------------------------------------------------------------

def test_scopes_nest_and_metrics_sum_into_the_hatchet_file(interpreted, gen, tmp_path):
    x, y, out = _inputs(gen, 500)
    proton.start(str(tmp_path / "run"), hook="triton")
    with proton.scope("outer", {"bytes": 7}):
        with proton.scope("inner", {"flops16": 100}):
            _axpy(x, y, out)
            _axpy(x, y, out)
        proton.enter_scope("manual", metrics={"bytes": 1})
        K.scale_kernel[(2,)](x, out, 200, BLOCK=128)
        proton.exit_scope("manual", metrics={"bytes": 2})
    proton.finalize()
    torch.testing.assert_close(out[:200], 2 * x[:200])

    assert not knobs.runtime.launch_enter_hook and not knobs.runtime.launch_exit_hook
    data = _load(tmp_path / "run.hatchet")
    assert isinstance(data, list) and len(data) == 2
    root, devices = data
    assert root["frame"] == {"name": "ROOT", "type": "function"}
    assert {"time (ns)", "count", "bytes", "flops16", "flops32"} <= set(root["metrics"])
    assert all(v == 0 for v in root["metrics"].values())
    outer = _child(root, "outer")
    assert outer["metrics"] == {"bytes": 7}
    inner = _child(outer, "inner")
    assert inner["metrics"] == {"flops16": 100}
    op = _child(inner, "axpy_kernel [n=500, BLOCK=128, grid=(4,)]")
    assert op["metrics"] == {"flops32": 2000.0, "bytes": 12000}           # two launches summed
    kernel = _child(op, "axpy_kernel")
    assert kernel["metrics"]["count"] == 2 and kernel["metrics"]["time (ns)"] > 0
    assert kernel["metrics"]["device_type"] == "INTERPRETER" and kernel["metrics"]["device_id"] == "0"
    manual = _child(outer, "manual")
    assert manual["metrics"] == {"bytes": 3}
    # no launch_metadata: the op node is the kernel's name, with no metrics of its own
    scale = _child(_child(manual, "scale_kernel"), "scale_kernel")
    assert scale["metrics"]["count"] == 1
    assert list(devices) == ["INTERPRETER"]


def test_a_deactivated_session_records_nothing_until_activated(interpreted, gen, tmp_path):
    x, y, out = _inputs(gen, 128)
    sid = proton.start(str(tmp_path / "p"), hook="triton")
    proton.deactivate()
    assert not knobs.runtime.launch_enter_hook              # the fast launch path while inactive
    with proton.scope("skipped"):
        _axpy(x, y, out)
    proton.activate(sid)
    _axpy(x, y, out)
    proton.finalize()
    root = _load(tmp_path / "p.hatchet")[0]
    assert [c["frame"]["name"] for c in root["children"]] == ["axpy_kernel [n=128, BLOCK=128, grid=(1,)]"]
    assert root["children"][0]["children"][0]["metrics"]["count"] == 1


def test_without_the_triton_hook_a_launch_is_its_kernel_name_only(interpreted, gen, tmp_path):
    x, y, out = _inputs(gen, 64)
    proton.start(str(tmp_path / "plain.hatchet"))
    with proton.scope("s"):
        _axpy(x, y, out)
    proton.finalize()
    s = _child(_load(tmp_path / "plain.hatchet")[0], "s")
    kernel = _child(s, "axpy_kernel")
    assert kernel["children"] == [] and kernel["metrics"]["count"] == 1 and "flops32" not in kernel["metrics"]


def test_scope_as_a_decorator_and_scope_errors(interpreted, tmp_path):
    @proton.scope("decorated", {"bytes": 4})
    def work():
        return 3

    proton.start(str(tmp_path / "d"))
    assert work() == 3 and work() == 3
    proton.enter_scope("a")
    with pytest.raises(ValueError, match="Scope name mismatch"):
        proton.exit_scope("b")
    proton.exit_scope("a")
    proton.finalize()
    assert _child(_load(tmp_path / "d.hatchet")[0], "decorated")["metrics"] == {"bytes": 8}
    with pytest.raises(ValueError, match="data='trace'"):
        proton.start("x", data="trace")
    with pytest.raises(ValueError, match="no profiling session 9999"):
        proton.activate(9999)


def test_scopes_outside_a_session_record_nothing(interpreted):
    with proton.scope("nothing"):
        pass
    assert proton.enter_scope("x") is None and proton.exit_scope() is None
    assert session.open_frames() == []


# -- the viewer ----------------------------------------------------------------------------------------

def _proton_file(path):
    """A profile as proton writes it (two kernels under a scope with launch metadata, a device)."""
    def node(name, metrics, children=()):
        return {"frame": {"name": name, "type": "function"}, "metrics": metrics, "children": list(children)}

    kernel = {"time (ns)": 2_000_000, "count": 4, "device_id": "0", "device_type": "CUDA"}
    tree = node("ROOT", {"bytes": 0, "count": 0, "flops16": 0, "time (ns)": 0}, [
        node("matmul_kernel [M=1024, N=1024, K=512]", {"flops16": 4 * 2.0 * 1024 * 1024 * 512,
                                                       "bytes": 4 * 2 * (2 * 1024 * 512 + 1024 * 1024)},
             [node("matmul_kernel", kernel)]),
        node("cublas [M=1024, N=1024, K=512]", {"flops16": 2.0 * 1024 * 1024 * 512},
             [node("sm90_xmma_gemm", {"time (ns)": 250_000, "count": 1, "device_id": "0", "device_type": "CUDA"})]),
        node("__proton_launch_metadata", {}),
        node("empty scope", {}),
    ])
    devices = {"CUDA": {"0": {"clock_rate": 1755000, "memory_clock_rate": 2619000, "bus_width": 5120,
                              "arch": "90", "num_sms": 132}}}
    path.write_text(json.dumps([tree, devices]))
    return path


def test_viewer_derives_tutorial_09s_metrics_from_a_proton_file(tmp_path, capsys):
    path = _proton_file(tmp_path / "matmul.hatchet")
    tree, metrics = viewer.parse(["tflop16/s", "time/ms"], str(path))
    assert metrics == ["tflop16/s (inc)", "time/ms (inc)"]
    names = [f.name for f in tree.frames()]
    assert "__proton_launch_metadata" not in names and "empty scope" not in names
    by_name = {f.name: f for f in tree.frames()}
    op = by_name["matmul_kernel [M=1024, N=1024, K=512]"]
    assert op.inc["time/ms (inc)"] == pytest.approx(2.0)
    assert op.inc["tflop16/s (inc)"] == pytest.approx(4 * 2.0 * 1024 * 1024 * 512 / 2e-3 / 1e12)
    root = tree.root
    assert root.inc["time/ms (inc)"] == pytest.approx(2.25)
    assert root.inc["tflop16/s (inc)"] == pytest.approx(5 * 2.0 * 1024 * 1024 * 512 / 2.25e-3 / 1e12)
    viewer.print_tree(tree, metrics)
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(" ROOT") and f"{root.inc['tflop16/s (inc)']:.3f}" in out[0]
    assert any("└─" in line and "sm90_xmma_gemm" in line and "0.250" in line for line in out)


def test_viewer_other_metrics_and_errors(tmp_path):
    path = _proton_file(tmp_path / "m.hatchet")
    tree, metrics = viewer.parse(["gbyte/s", "avg_time/us", "count", "time/%"], str(path))
    by_name = {f.name: f for f in tree.frames()}
    op = by_name["matmul_kernel [M=1024, N=1024, K=512]"]
    assert op.inc["gbyte/s (inc)"] == pytest.approx(4 * 2 * (2 * 1024 * 512 + 1024 * 1024) / 2e-3 / 1e9)
    assert op.inc["avg_time/us (inc)"] == pytest.approx(500.0)
    assert op.inc["count (inc)"] == 4 and tree.root.inc["count (inc)"] == 5
    assert op.inc["time/% (inc)"] == pytest.approx(100 * 2.0 / 2.25)
    with pytest.raises(RuntimeError, match="Metric flops8 is not found"):
        viewer.parse(["tflop8/s"], str(path))
    with pytest.raises(ValueError, match="util"):
        viewer.parse(["util"], str(path))
    tree, _ = viewer.parse(["time/ms"], str(path), exclude="cublas")
    assert "cublas [M=1024, N=1024, K=512]" not in [f.name for f in tree.frames()]


def test_our_file_reads_back_like_protons(interpreted, gen, tmp_path, capsys):
    x, y, out = _inputs(gen, 256)
    proton.start(str(tmp_path / "ours"), hook="triton")
    with proton.scope("bench", {"flops32": 1000.0}):
        _axpy(x, y, out)
    proton.finalize()
    tree, metrics = viewer.parse(["tflop32/s", "time/ms"], str(tmp_path / "ours.hatchet"))
    by_name = {f.name: f for f in tree.frames()}
    bench = by_name["bench"]
    kernel_ns = by_name["axpy_kernel"].metrics["time (ns)"]
    assert bench.inc["time/ms (inc)"] == pytest.approx(kernel_ns / 1e6)
    assert bench.inc["tflop32/s (inc)"] == pytest.approx((1000.0 + 512.0) / (kernel_ns * 1e-9) / 1e12)
    viewer.print_tree(tree, metrics)
    assert "wall time of blocktune's CPU interpreter" in capsys.readouterr().out


def test_cublaslt_without_a_gpu_is_a_clear_error():
    from compiler._C.libtriton import nvidia
    from compiler.runtime.driver import NoGPUError

    with pytest.raises(NoGPUError, match="workspace must be a CUDA tensor"):
        nvidia.cublas.CublasLt(torch.empty(1024, dtype=torch.uint8))


def test_an_autotuned_kernel_reports_its_config_through_launch_metadata(interpreted, gen, tmp_path):
    x, y, out = _inputs(gen, 1000)
    K.axpy_autotuned[lambda meta: (triton_cdiv(1000, meta["BLOCK"]),)](x, y, out, 3.0, 1000)  # tunes
    block = K.axpy_autotuned.best_config.kwargs["BLOCK"]
    out.fill_(float("nan"))
    proton.start(str(tmp_path / "tuned"), hook="triton")
    K.axpy_autotuned[lambda meta: (triton_cdiv(1000, meta["BLOCK"]),)](x, y, out, 3.0, 1000)
    proton.finalize()
    torch.testing.assert_close(out, 3.0 * x + y)
    root = _load(tmp_path / "tuned.hatchet")[0]
    grid = -(-1000 // block)
    op = _child(root, f"axpy_autotuned [n=1000, BLOCK={block}, grid=({grid},)]")
    assert _child(op, "axpy_autotuned")["metrics"]["count"] == 1


def test_metrics_take_numpy_scalars_and_refuse_other_values(interpreted, tmp_path):
    import numpy as np

    proton.start(str(tmp_path / "np"))
    with proton.scope("np", {"bytes": np.int64(3), "flops16": np.float32(1.5)}):
        pass
    with pytest.raises(TypeError, match="metric 'bytes' must be an int or a float, got str"):
        with proton.scope("bad", {"bytes": "3"}):
            pass
    proton.finalize()
    assert _child(_load(tmp_path / "np.hatchet")[0], "np")["metrics"] == {"bytes": 3, "flops16": 1.5}


def test_viewer_command_line(tmp_path, capsys):
    path = _proton_file(tmp_path / "cli.hatchet")
    viewer.main(["-l", str(path)])
    listed = capsys.readouterr().out
    assert "- time (ns)" in listed and "- flops16" in listed
    viewer.main(["-m", "time/us,count", "-d", "1", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2250.000 5 ROOT"
    assert "matmul_kernel [M=1024, N=1024, K=512]" in lines[1] and "2000.000 4" in lines[1]
    assert not any(line.endswith(" matmul_kernel") for line in lines)      # depth 1
