"""`blocktune compile`: file::kernel → IR / LLVM IR / PTX on stdout, errors on stderr with status 1."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compiler import cli

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
'''


@pytest.fixture
def kfile(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "kernels.py"
    p.write_text(KERNEL)
    return p


def run_cli(*args):
    """Through the product's entry point (service/cli.py dispatches `compile` to compiler.cli)."""
    return subprocess.run([sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
                           "compile", *args], capture_output=True, text=True, cwd=ROOT)


def test_emit_ir_named_signature(kfile, capsys):
    rc = cli.main(["compile", f"{kfile}::add_kernel", "--signature", "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n_elements=i32",
                   "--constexpr", "BLOCK_SIZE=256", "--divisible-by-16", "x_ptr", "--emit", "ir"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert out.out.startswith("func @add_kernel(%x_ptr: *fp32 {divisibility=16}, %y_ptr: *fp32")
    assert "arange() {start=0, end=256}" in out.out


def test_emit_ir_positional_signature_equal_to_1(kfile, capsys):
    rc = cli.main(["compile", f"{kfile}::add_kernel", "-s", "*fp16,*fp16,*fp16,i32", "-c", "BLOCK_SIZE=64",
                   "--equal-to-1", "n_elements", "--emit", "ir"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "n_elements" not in out.out.splitlines()[0] and "*fp16" in out.out


def test_emit_ptx_through_blocktune_entry_point(kfile):
    r = run_cli(f"{kfile}::add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK_SIZE=1024",
                "--num-warps", "4", "--target", "sm_90", "--emit", "ptx")
    assert r.returncode == 0, r.stderr
    assert ".target sm_90" in r.stdout and ".entry add_kernel" in r.stdout


def test_emit_llir_to_file(kfile, tmp_path, capsys):
    out_file = tmp_path / "k.ll"
    rc = cli.main(["compile", f"{kfile}::add_kernel", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK_SIZE=128",
                   "--target", "sm_90", "--emit", "llir", "-o", str(out_file)])
    assert rc == 0, capsys.readouterr().err
    assert "define" in out_file.read_text() and "add_kernel" in out_file.read_text()


def test_compilation_error_exit_1(kfile, capsys):
    rc = cli.main(["compile", f"{kfile}::add_kernel", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK_SIZE=100",
                   "--emit", "ir"])
    out = capsys.readouterr()
    assert rc == 1 and out.out == ""
    first = out.err.splitlines()[0]
    assert first.startswith(f"{kfile}:8:") and "error:" in first and "power of 2" in first
    assert "tl.arange(0, BLOCK_SIZE)" in out.err


def test_hostile_file_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(f"import os\nos.system('touch {marker}')\n" + KERNEL +
                    f"\nif __name__ == '__main__':\n    open('{marker}', 'w')\n")
    # strict (what the service does): refused, naming the line
    r = run_cli(f"{evil}::add_kernel", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK_SIZE=128", "--emit", "ir",
                "--strict")
    assert r.returncode == 1
    assert "evil.py:1:1: error: import of 'os' is not allowed" in r.stderr
    assert not marker.exists()
    # default: the statements are skipped, never run, and the kernel compiles
    r = run_cli(f"{evil}::add_kernel", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK_SIZE=128", "--emit", "ir")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("func @add_kernel(")
    assert "skipped (not executed) top-level statement(s) at line(s) 1, 2, 16" in r.stderr
    assert not marker.exists()


def test_readme_example(capsys):
    """README: blocktune compile examples/add.py::add_kernel (a file with a __main__ block)."""
    rc = cli.main(["compile", str(ROOT / "examples" / "add.py") + "::add_kernel", "--signature", "*fp32,*fp32,*fp32,i32",
                   "--constexpr", "BLOCK_SIZE=1024", "--emit", "ptx", "--target", "sm_90"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert ".entry add_kernel" in out.out


def test_usage_errors(kfile, capsys):
    assert cli.main(["compile", str(kfile), "-s", "i32"]) == 2                       # no ::kernel
    assert cli.main(["compile", f"{kfile}::add_kernel", "-s", "*fp32,i32", "--emit", "ir"]) == 2   # wrong arity
    assert cli.main(["compile", f"{kfile}::add_kernel", "-s", "x_ptr=*fp99,y_ptr=*fp32,out_ptr=*fp32,n_elements=i32",
                     "-c", "BLOCK_SIZE=64", "--emit", "ir"]) == 2
    assert cli.main(["compile", f"{kfile}::missing", "-s", "i32", "--emit", "ir"]) == 1
    assert cli.main(["compile", "/nonexistent/k.py::k", "-s", "i32"]) == 2
    capsys.readouterr()


def test_parse_helpers():
    import compiler.language as tl
    assert cli.parse_signature("a=*fp32, n=i32") == {"a": "*fp32", "n": "i32"}
    assert cli.parse_signature("*fp32,i32") == ["*fp32", "i32"]
    assert cli.parse_constexprs(["A=1,B=2.5", "C=True", "D=tl.float16", "E=fp32", "F=name"]) == \
        {"A": 1, "B": 2.5, "C": True, "D": tl.float16, "E": tl.float32, "F": "name"}
