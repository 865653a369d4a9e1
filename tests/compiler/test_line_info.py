"""Source line info: the PTX carries .file/.loc for the kernel's Python lines (also the lines of
the @jit functions it calls), ptxas -lineinfo keeps them in the cubin where nvdisasm -g (and
Nsight Compute) read them, and TRITON_DISABLE_LINE_INFO=1 leaves them out. No GPU needed."""
from __future__ import annotations

import re
import subprocess

import pytest

import compiler as triton
from compiler import knobs, ptxas
from tests.compiler.kernels import line_info as K
from tests.compiler.kernels.util import interpret, poisoned  # noqa: F401

SIG = dict(X="*fp32", Y="*fp32")


def compile_kernel(kernel):
    return triton.compile(kernel, signature=SIG, constexprs=dict(BLOCK=128), target="sm_90")


def ptx_lines(ptx: str) -> set[tuple[str, int]]:
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M))
    return {(files[f], int(line)) for f, line in re.findall(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+", ptx, re.M)}


def test_ptx_has_the_kernel_lines_and_the_callee_lines():
    ptx = compile_kernel(K.copy_doubled_kernel).asm["ptx"]
    lines = ptx_lines(ptx)
    for tag in ("load", "store", "callee add"):
        assert (K.__file__, K.line_of(tag)) in lines, (tag, sorted(lines))
    assert ", debug" not in ptx.split(".address_size")[0]   # line tables only: no -G debug build
    ptxas.report(ptx)


def test_cubin_keeps_the_lines(tmp_path):
    nvdisasm = knobs.nvidia.nvdisasm.path
    ck = compile_kernel(K.exp_kernel)
    (tmp_path / "k.cubin").write_bytes(ck.asm["cubin"])
    sass = subprocess.run([nvdisasm, "-g", str(tmp_path / "k.cubin")], check=True, capture_output=True, text=True).stdout
    found = set(re.findall(r'## File "([^"]+)", line (\d+)', sass))
    assert (K.__file__, str(K.line_of("libdevice call"))) in found, sorted(found)


def _sass_lines(tmp_path, ck) -> set[tuple[str, str]]:
    (tmp_path / "k.cubin").write_bytes(ck.asm["cubin"])
    sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-g", str(tmp_path / "k.cubin")], check=True,
                          capture_output=True, text=True).stdout
    return set(re.findall(r'## File "([^"]+)", line (\d+)', sass))


def test_a_constant_added_to_an_int_dot_is_its_accumulator(tmp_path):
    """`d = tl.dot(a, b); d = d + c` with a constant c made after the dot: c is the dot's
    accumulator (Triton's combine), so the add's line is not in the SASS; the dot's is."""
    ck = triton.compile(K.int8_dot_plus_constant_kernel, signature=dict(Out="*i32"), target="sm_90")
    assert re.search(r"%(\d+) = const\(\) \{value=4\} : <32x32xi32>\n\s*%\d+ = dot\(%\d+, %\d+, %\1\)", ck.asm["ir"])
    found = _sass_lines(tmp_path, ck)
    assert (K.__file__, str(K.line_of("int8 dot"))) in found, sorted(found)
    assert (K.__file__, str(K.line_of("plus constant"))) not in found, sorted(found)


def _int8_dot_plus_constant_reference():
    import torch
    a = (torch.arange(32)[:, None] + torch.arange(32)[None, :]).to(torch.int8).long()
    return a @ a + 4


def test_the_constant_accumulator_computes_the_sum(interpret):
    import torch
    out = poisoned((32, 32), torch.int32)
    K.int8_dot_plus_constant_kernel[(1,)](out)
    assert torch.equal(out.long(), _int8_dot_plus_constant_reference())


@pytest.mark.gpu
def test_the_constant_accumulator_computes_the_sum_gpu():
    import torch
    out = torch.full((32, 32), -(2**31), dtype=torch.int32, device="cuda")
    K.int8_dot_plus_constant_kernel[(1,)](out)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu().long(), _int8_dot_plus_constant_reference())


def test_disable_line_info(monkeypatch):
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    assert knobs.codegen.line_info is False
    ptx = compile_kernel(K.copy_doubled_kernel).asm["ptx"]
    assert ".loc" not in ptx and ".file" not in ptx
    monkeypatch.delenv("TRITON_DISABLE_LINE_INFO")
    assert ".loc" in compile_kernel(K.copy_doubled_kernel).asm["ptx"]


def test_line_info_does_not_change_the_code(monkeypatch):
    with_lines = compile_kernel(K.exp_kernel).asm["ptx"]
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    without = compile_kernel(K.exp_kernel).asm["ptx"]

    def code(ptx):
        return [ln for ln in ptx.splitlines() if ln.strip() and not re.match(r"\s*(\.loc|\.file|\.section|\$L__|//|\}|\{)", ln)
                and "debug" not in ln]
    assert code(with_lines) == code(without)
