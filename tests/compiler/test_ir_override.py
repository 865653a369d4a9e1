"""Triton's `ir_override` compile option (launch option / autotune Config key): a .llir, .ptx or
.cubin file replaces that stage of the compiled kernel; Triton's MLIR stages (.ttir/.ttgir) are
NotApplicable. Compiled here and assembled with ptxas; GPU runs in test_ir_override_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as triton
from compiler import ptxas
from compiler.not_applicable import NotApplicable
from tests.compiler.kernels import ir_override as K


def _compile(override):
    src = triton.ASTSource(fn=K._kernel, signature=dict(K.SIGNATURE, BLOCK_SIZE="constexpr"), constexprs={"BLOCK_SIZE": 32})
    return triton.compile(src, target="sm_90", options={"ir_override": str(override)})


def test_a_ptx_file_replaces_the_kernels_ptx(tmp_path):
    f = tmp_path / "k.ptx"
    f.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"]))
    ck = _compile(f)
    ptx = ck.asm["ptx"]
    assert "0f41200000" in ptx and "_kernel_param_3" not in ptx   # times ten; the unused scratch param dropped
    assert ck.name == "_kernel" and ck.metadata["passed"] == ["dst", "src", "N"]
    ptxas.report(ptx)


def test_the_entry_name_is_the_files(tmp_path):
    f = tmp_path / "k.ptx"
    f.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"], entry="renamed"))
    assert _compile(f).name == "renamed"


def test_an_llir_file_is_compiled_to_the_ptx(tmp_path):
    f = tmp_path / "k.llir"
    f.write_text(K.times_ten_stages()["llir"])
    ck = _compile(f)
    assert "0f41200000" in ck.asm["ptx"] and ck.asm["llir"] != triton.compile(
        K._kernel, signature=K.SIGNATURE, constexprs=dict(BLOCK_SIZE=32), target="sm_90").asm["llir"]
    ptxas.report(ck.asm["ptx"])


def test_a_cubin_file_is_the_image(tmp_path):
    cubin = ptxas.assemble(K.times_ten_stages()["ptx"].replace("times_ten", "_kernel"), "sm_90")
    f = tmp_path / "k.cubin"
    f.write_bytes(cubin)
    assert _compile(f).asm["cubin"] == cubin


def test_the_cache_key_follows_the_files_contents(tmp_path):
    f = tmp_path / "k.ptx"
    f.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"]))
    first = _compile(f)
    f.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"].replace("0f41200000", "0f40A00000")))  # times five
    second = _compile(f)
    assert first.hash != second.hash and "0f40A00000" in second.asm["ptx"]


@pytest.mark.parametrize("ext", ["ttir", "ttgir"])
def test_mlir_stages_are_not_applicable(tmp_path, ext):
    f = tmp_path / f"k.{ext}"
    f.write_text("module {}")
    with pytest.raises(NotApplicable, match=rf"replaces Triton's {ext.upper()} \(MLIR\) stage; blocktune has no MLIR"):
        _compile(f)


def test_wrong_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="extension names the stage"):
        _compile(tmp_path / "k.txt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _compile(tmp_path / "missing.ptx")
    used = tmp_path / "used.ptx"   # the extra parameter is read: the launch could not fill it
    used.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"]).replace(
        "ld.param.b64 \t%rd3, [_kernel_param_0];", "ld.param.b64 \t%rd3, [_kernel_param_3];"))
    with pytest.raises(ValueError, match=r"the PTX kernel takes \(.u64, .u64, .u32, .u64\)"):
        _compile(used)
    wide = tmp_path / "wide.ptx"
    wide.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"], threads=256))
    with pytest.raises(ValueError, match=r"needs 256 threads \(.reqntid\); the launch has 128"):
        _compile(wide)


def test_a_launch_takes_it(tmp_path):
    f = tmp_path / "k.ptx"
    f.write_text(K.as_tritons_ptx(K.times_ten_stages()["ptx"]))
    ck = K._kernel.warmup(torch.float32, torch.float32, 64, BLOCK_SIZE=32, grid=(2,), ir_override=str(f))
    assert "0f41200000" in ck.asm["ptx"]


def test_interpret_mode_refuses_it(monkeypatch, tmp_path):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    f = tmp_path / "k.ptx"
    f.write_text("")
    x = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="interpret mode does not run"):
        K._kernel[(2,)](x, x, 64, BLOCK_SIZE=32, ir_override=str(f))
