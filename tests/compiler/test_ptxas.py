"""compiler.ptxas: the one place that finds ptxas, picks the one a driver can load the cubins of, and
runs it (the backend's checks, the runtime's ahead-of-time cubins and the tuner's compile pool)."""
from __future__ import annotations

import os
import stat

import pytest

import compiler
from compiler import ptxas

ADD = '''
import triton
import triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
'''


def _fake_ptxas(path, release: str) -> str:
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_order_it_looks_in(monkeypatch, tmp_path):
    mine = _fake_ptxas(tmp_path / "mine", "12.8")
    triton_path = _fake_ptxas(tmp_path / "triton-ptxas", "12.4")
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    cuda = _fake_ptxas(tmp_path / "cuda" / "bin" / "ptxas", "12.0")
    monkeypatch.setenv("BLOCKTUNE_PTXAS", mine)
    monkeypatch.setenv("TRITON_PTXAS_PATH", triton_path)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    found = ptxas.candidates()
    assert found[:2] == [mine, triton_path] and cuda in found
    assert found.index(cuda) > 1
    assert ptxas.find() == mine and ptxas.version(mine) == (12, 8)
    monkeypatch.setenv("BLOCKTUNE_PTXAS", str(tmp_path / "missing"))     # not there: skipped
    assert ptxas.find() == triton_path


def test_the_one_a_driver_can_load(monkeypatch):
    monkeypatch.setattr(ptxas, "candidates", lambda: ["/nonexistent/a", "/x/b", "/x/c"])
    versions = {"/x/b": (13, 5), "/x/c": (12, 4)}
    monkeypatch.setattr(ptxas, "version", versions.get)
    assert ptxas.for_driver("13.9") == "/x/b"     # the first one not newer than the driver
    assert ptxas.for_driver("13.0") == "/x/c"     # 12.4 ≤ 13.0 is preferred to a newer 13.5
    assert ptxas.for_driver("12.2") == "/x/c"     # same major version: minor compatibility
    assert ptxas.for_driver("11.8") is None       # only newer majors: PTX
    assert ptxas.for_driver(None) == "/x/b"


def test_missing_says_where_to_get_it(monkeypatch):
    monkeypatch.setattr(ptxas, "candidates", lambda: [])
    assert ptxas.find() is None
    with pytest.raises(FileNotFoundError, match="BLOCKTUNE_PTXAS.*nvidia-cuda-nvcc"):
        ptxas.require()


@pytest.mark.skipif(ptxas.find() is None, reason="no ptxas here (CI installs the nvidia-cuda-nvcc wheel)")
def test_assembles_a_kernel_and_reports_its_resources():
    fn = compiler.jit_from_source(ADD, "add")
    ck = compiler.compile(fn, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 256},
                          target="sm_90")
    cubin = ptxas.assemble(ck.asm["ptx"], "sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert "Used" in ptxas.report(ck.asm["ptx"]) and "registers" in ptxas.report(ck.asm["ptx"])
    with pytest.raises(RuntimeError, match="ptxas failed"):
        ptxas.assemble(ck.asm["ptx"].replace(".entry", ".entry_broken", 1), "sm_90")
    assert os.access(ptxas.require(), os.X_OK)
