"""The tutorial runner (scripts/triton-tutorials.sh) on a fake Triton checkout written here: CI
cannot fetch Triton, and the runner's reading of a tutorial's checks must not depend on one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.triton_tutorials import checks, runner

REPO = Path(__file__).resolve().parents[2]

KERNEL = '''
import torch
import triton
import triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64), )](x, y, out, x.numel(), BLOCK=64)
    return out


x, y = torch.rand(100, device=DEVICE), torch.rand(100, device=DEVICE)
'''

TUTORIALS = {
    # runs, one assert and one printed comparison pass; its benchmark would fail if it ran
    "01-good.py": KERNEL + '''
assert torch.allclose(add(x, y), x + y)
print(f"The maximum difference between torch and triton is {torch.max(torch.abs(add(x, y) - (x + y)))}")
if torch.allclose(add(x, y), x + y):
    print("✅ Triton and Torch match")


@triton.testing.perf_report(triton.testing.Benchmark(x_names=["n"], x_vals=[1], line_arg="p", line_vals=["a"],
                                                     line_names=["A"], plot_name="good-bench", args={}))
def bench(n, p):
    raise RuntimeError("the benchmark ran on the CPU")


bench.run(print_data=True)
''',
    # its check fails (a printed ❌, then an assert of a comparison)
    "02-wrong.py": KERNEL + '''
print("❌ Triton and Torch differ" if not torch.allclose(add(x, y), x - y) else "✅ Triton and Torch match")
assert x.is_contiguous()
assert torch.allclose(add(x, y), x - y), "off"
''',
    # insists on CUDA before it checks anything, also when pytest imports it for its test_op
    "03-cuda.py": KERNEL + '''
import pytest

out = add(x, y)
assert x.is_cuda and out.is_cuda
assert torch.allclose(out, x + y)


@pytest.mark.parametrize("n", [1])
def test_op(n):
    pass
''',
    # pytest cases: parametrized test_op (one case of three fails); test_helper is not a pytest test
    "04-pytest.py": KERNEL + '''
import pytest


def test_helper(n):
    assert torch.allclose(add(x[:n], y[:n]), x[:n] + y[:n])


test_helper(10)


@pytest.mark.parametrize("n", [1, 50, 100])
def test_op(n):
    expect = x[:n] + y[:n] + (1.0 if n == 100 else 0.0)
    torch.testing.assert_close(add(x[:n], y[:n]), expect)
''',
    # checks nothing
    "05-quiet.py": KERNEL + "print(add(x, y)[:3])\n",
    # never ends
    "06-slow.py": "import time\ntime.sleep(600)\n",
    "10-not-selected.py": "raise SystemExit(3)\n",
}


@pytest.fixture(scope="module")
def fake_checkout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("triton")
    (root / "python" / "triton").mkdir(parents=True)
    (root / "python" / "triton" / "__init__.py").write_text("__version__ = '3.5.0'\n")
    (root / "python" / "triton" / "_internal_testing.py").write_text("")  # copied into the shim
    tutorials = root / "python" / "tutorials"
    tutorials.mkdir()
    for name, text in TUTORIALS.items():
        (tutorials / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def report(fake_checkout, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("out")
    proc = subprocess.run([sys.executable, "-m", "tools.triton_tutorials.runner", str(fake_checkout), "--out",
                           str(out), "--only", "1,2,3,4,5", "--timeout", "300", "--markdown", str(out / "report.md"),
                           "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # not all passed
    data = json.loads((out / "report.json").read_text())
    data["by_name"] = {t["tutorial"]: t for t in data["tutorials"]}
    data["stdout"], data["markdown"] = proc.stdout, (out / "report.md").read_text()
    return data


def test_the_runner_finds_01_to_09_and_selects_by_number_or_name(fake_checkout):
    assert [p.name for p in runner.find_tutorials(fake_checkout)] == [n for n in TUTORIALS if n[0] == "0"]
    assert [p.name for p in runner.find_tutorials(fake_checkout, ["3", "05-quiet"])] == ["03-cuda.py", "05-quiet.py"]


def test_the_report_covers_the_selected_tutorials(report):
    assert list(report["by_name"]) == ["01-good", "02-wrong", "03-cuda", "04-pytest", "05-quiet"]
    assert report["mode"].startswith("CPU")
    assert "01-good" in report["stdout"] and "| 02-wrong | failed |" in report["markdown"]


def test_a_passing_tutorial_reports_its_checks_and_skips_its_benchmark(report):
    good = report["by_name"]["01-good"]
    assert (good["status"], good["checks"], good["error"]) == ("ran", "passed", "")
    assert good["check_detail"] == "1/1 check statements, 2 printed comparisons"
    assert good["benchmarks_skipped"] == ["good-bench"] and good["benchmarks_ran"] == []


def test_a_failing_check_is_reported_with_its_line(report):
    wrong = report["by_name"]["02-wrong"]
    assert wrong["status"] == "failed" and wrong["checks"] == "failed" and not wrong["needs_cuda"]
    line = len(KERNEL.splitlines()) + 4
    assert wrong["check_detail"] == (f'line {line}: assert torch.allclose(add(x, y), x - y), "off"; '
                                     "❌ Triton and Torch differ")
    assert wrong["error"] == "AssertionError: off" and wrong["where"].startswith(f"02-wrong.py:{line}:")


def test_a_tutorial_that_insists_on_cuda_says_so(report):
    cuda = report["by_name"]["03-cuda"]
    assert cuda["status"] == "failed" and cuda["needs_cuda"]
    assert cuda["checks"] == "none" and cuda["check_detail"] == "0/1 check statements, no printed comparison reached"
    assert cuda["tests"]["selected"] == 0 and "is_cuda" in cuda["tests"]["collection_error"]
    assert "| 03-cuda | failed (needs CUDA) |" in report["markdown"] and "not collected" in report["markdown"]


def test_pytest_cases_are_run_and_counted(report):
    t = report["by_name"]["04-pytest"]
    assert t["status"] == "ran"
    # --cases-per-test defaults to 2 on the CPU: n=1 and n=50 run, and both pass
    assert (t["tests"]["selected"], t["tests"]["passed"], t["tests"]["failed"]) == (2, 2, 0)
    assert t["checks"] == "passed" and "2/2 pytest cases" in t["check_detail"]


def test_a_tutorial_without_checks(report):
    quiet = report["by_name"]["05-quiet"]
    assert (quiet["status"], quiet["checks"]) == ("ran", "")
    assert quiet["check_detail"] == "the tutorial checks nothing against torch"


def test_a_tutorial_that_hangs_is_stopped(fake_checkout, tmp_path):
    assert runner.main([str(fake_checkout), "--only", "06", "--out", str(tmp_path), "--quiet", "--timeout", "3"]) == 1
    slow = json.loads((tmp_path / "report.json").read_text())["tutorials"][0]
    assert slow["status"] == "timed out" and slow["error"] == "still running after 3 s"


def test_failing_pytest_cases_fail_the_checks(fake_checkout, tmp_path):
    out = tmp_path / "out"
    code = runner.main([str(fake_checkout), "--only", "04", "--cases-per-test", "0", "--out", str(out), "--quiet",
                        "--timeout", "120"])
    t = json.loads((out / "report.json").read_text())["tutorials"][0]
    assert code == 1 and (t["tests"]["selected"], t["tests"]["failed"]) == (3, 1)
    assert t["checks"] == "failed" and t["check_detail"].startswith("1/3 pytest cases failed: test_op[100]: ")


def test_reading_what_a_tutorial_checks():
    src = textwrap.dedent('''
        import pytest
        assert a.is_cuda
        assert torch.allclose(a, b), "x"
        torch.testing.assert_close(a, b)
        def test_plain(M, N, dtype, eps=1e-5):
            pass
        @pytest.mark.parametrize("M, N", [(1, 2)])
        @pytest.mark.parametrize("dtype", ["fp16"])
        def test_op(M, N, dtype, eps=1e-5):
            pass
        @pytest.mark.parametrize(["M"], [1])
        def test_half(M, N):
            pass
    ''')
    assert checks.check_sites(src) == [4, 5]
    assert checks.pytest_tests(src) == ["test_op"]
    printed = checks.printed_checks("  TMA: ...\r  TMA: ✅  \nx\n  cuBLAS: ⭕\n❌ differ\n"
                                    "The maximum difference between torch and triton is tensor(2.5e-06)\n"
                                    "The maximum difference between torch and triton is 0.5\n")
    assert [(p.text, p.ok) for p in printed] == [
        ("TMA: ✅", True), ("cuBLAS: ⭕", None), ("❌ differ", False),
        ("The maximum difference between torch and triton is tensor(2.5e-06)", True),
        ("The maximum difference between torch and triton is 0.5", False)]
    assert checks.needs_cuda("AssertionError: Torch not compiled with CUDA enabled")
    assert checks.needs_cuda("AssertionError: ", 'a = torch.randn((M, K), device="cuda")')
    assert not checks.needs_cuda("AssertionError: off", "assert torch.allclose(a, b)")


def test_benchmarks_run_when_asked(fake_checkout, tmp_path):
    """--benchmarks run (the default with --gpu): 01-good's sweep runs, and its error is the tutorial's."""
    assert runner.main([str(fake_checkout), "--only", "01", "--benchmarks", "run", "--out", str(tmp_path),
                        "--quiet"]) == 1
    good = json.loads((tmp_path / "report.json").read_text())["tutorials"][0]
    assert good["benchmarks_ran"] == ["good-bench"] and good["benchmarks_skipped"] == []
    assert good["status"] == "failed" and good["error"] == "RuntimeError: the benchmark ran on the CPU"
    assert good["checks"] == "passed"  # its checks had run before the benchmark
