"""compiler.knobs: the compiler's environment switches in one settings object; the codegen ones are
part of the compile cache key by construction."""
from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest

import compiler as triton
import compiler.language as tl
from compiler import knobs
from compiler.runtime import compile as C

ROOT = pathlib.Path(__file__).resolve().parents[2]


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}


def _key():
    return C.cache_key(_copy, SIG, {"BLOCK": 128}, 4, 3, "sm_90", (), ())


@pytest.fixture
def clean_env(monkeypatch):
    for k in [*knobs.codegen.knob_descriptors.values(), *knobs.runtime.knob_descriptors.values(),
              *knobs.cache.knob_descriptors.values(), *knobs.language.knob_descriptors.values()]:
        for name in k.names:
            monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_defaults(clean_env):
    assert knobs.codegen.knobs == {"wgmma": "async", "pipeline": True, "tma": True, "warp_specialize": False,
                                   "pointer_tma": True, "debug": False, "fp32_default": "tf32", "fp_fusion": True, "line_info": True}
    assert knobs.runtime.interpret is False and knobs.runtime.interpret_vectorize is True
    assert knobs.runtime.launcher == "native" and knobs.cache.disabled is False


@pytest.mark.parametrize("text,pipelined", [("0", True), ("", True), ("false", True), ("1", False), ("ON", False)])
def test_no_pipeline_is_a_flag(clean_env, text, pipelined):
    """BLOCKTUNE_NO_PIPELINE=0 must not turn pipelining off (it did: any non-empty value did)."""
    clean_env.setenv("BLOCKTUNE_NO_PIPELINE", text)
    assert knobs.codegen.pipeline is pipelined


def test_no_pipeline_0_still_pipelines_the_matmul(clean_env):
    from tests.compiler.kernels import bench_kernels
    mod = bench_kernels("matmul_kernels.py")
    sig = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp16") | dict.fromkeys(
        ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"), "i32")
    cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
    ones = ("stride_ak", "stride_bn", "stride_cn")

    def ptx():
        return triton.compile(mod.matmul_kernel.fn, sig, cx, num_warps=4, num_stages=3, target="sm_90",
                              divisible_by_16=[n for n in sig if n not in ones], equal_to_1=ones).asm["ptx"]
    clean_env.setenv("BLOCKTUNE_NO_PIPELINE", "0")
    assert "cp.async.bulk.tensor" in ptx()     # the pipelined tiles through TMA (codegen.pointer_tma)
    clean_env.setenv("BLOCKTUNE_POINTER_TMA", "0")
    assert "cp.async.commit_group" in ptx()
    clean_env.setenv("BLOCKTUNE_NO_PIPELINE", "1")
    assert "cp.async" not in ptx()
    clean_env.delenv("BLOCKTUNE_POINTER_TMA")
    assert "cp.async" not in ptx()             # no pipeline, no pointer tiles through TMA either


@pytest.mark.parametrize("name,values", [("BLOCKTUNE_WGMMA", ("0", "sync")), ("BLOCKTUNE_NO_PIPELINE", ("1",)), ("BLOCKTUNE_POINTER_TMA", ("0",)),
                                         ("BLOCKTUNE_DEBUG", ("1",)), ("TRITON_DEBUG", ("1",)),
                                         ("TRITON_F32_DEFAULT", ("ieee", "tf32x3")), ("TRITON_DEFAULT_FP_FUSION", ("0",))])
def test_every_codegen_switch_changes_the_cache_key(clean_env, name, values):
    """TRITON_F32_DEFAULT (tl.dot's fp32 precision) was read by the front end but left out of the
    key: a changed default reused the PTX compiled under the old one."""
    ref = _key()
    for v in values:
        clean_env.setenv(name, v)
        assert _key() != ref, (name, v)
        clean_env.delenv(name)
    assert _key() == ref


def test_cache_key_follows_the_codegen_group_by_construction(clean_env):
    """A knob declared in codegen_knobs is in codegen.key() without anything else to change."""
    names = set(knobs.codegen.knob_descriptors)
    assert names == {"wgmma", "pipeline", "tma", "warp_specialize", "pointer_tma", "debug", "fp32_default", "fp_fusion",
                     "line_info"}
    assert all(f"{n}=" in knobs.codegen.key() for n in names)


def test_assigning_a_knob_writes_the_environment(clean_env):
    knobs.codegen.wgmma = "off"
    assert os.environ["BLOCKTUNE_WGMMA"] == "0" and knobs.codegen.wgmma == "off"
    knobs.codegen.wgmma = "sync"
    assert knobs.codegen.wgmma == "sync"
    del knobs.codegen.wgmma
    assert "BLOCKTUNE_WGMMA" not in os.environ and knobs.codegen.wgmma == "async"
    knobs.runtime.interpret = True
    assert os.environ["BLOCKTUNE_INTERPRET"] == "1" and knobs.runtime.interpret
    del knobs.runtime.interpret
    assert not knobs.runtime.interpret


def test_either_interpret_variable_turns_interpret_mode_on(clean_env):
    clean_env.setenv("BLOCKTUNE_INTERPRET", "0")
    clean_env.setenv("TRITON_INTERPRET", "1")
    assert knobs.runtime.interpret


def test_native_interpret_check_sees_os_environ_changes(clean_env):
    """The launch path's cheap pre-check (launch.c's getenv) sees os.environ's assignments and
    deletions at once."""
    from compiler.runtime import native
    mod = native.module()
    if mod is None:
        pytest.skip("no C compiler: the ctypes launcher's os.environ check is used")
    assert not mod.interpret_var_is_set()
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        assert mod.interpret_var_is_set()
    finally:
        del os.environ["TRITON_INTERPRET"]
    assert not mod.interpret_var_is_set()


def test_no_private_environment_reads():
    """The compiler reads the environment through os.environ's public API (knobs), never its
    private `_data` dict."""
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "compiler").rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"environ\._data", line)]
    assert hits == []


def _fake_tool(path, release: str) -> str:
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    path.chmod(0o755)
    return str(path)


def test_nvidia_tools_are_found_and_report_their_release(monkeypatch, tmp_path):
    """Triton's knobs.nvidia.ptxas (a path and a "major.minor" release; Triton's test helpers read it
    at import) is the ptxas compiler/ptxas.py uses."""
    from compiler import ptxas
    monkeypatch.setenv("TRITON_PTXAS_PATH", _fake_tool(tmp_path / "ptxas", "12.6"))
    monkeypatch.setenv("BLOCKTUNE_PTXAS", "")    # restored (unset) after the test: knobs set it below
    tool = knobs.nvidia.ptxas
    assert (tool.path, tool.version) == (str(tmp_path / "ptxas"), "12.6") == (ptxas.find(), "12.6")
    knobs.nvidia.ptxas = _fake_tool(tmp_path / "other", "13.0")
    assert os.environ["BLOCKTUNE_PTXAS"] == str(tmp_path / "other") and "TRITON_PTXAS_PATH" not in os.environ
    assert knobs.nvidia.ptxas.version == "13.0" and ptxas.version(ptxas.find()) == (13, 0)
    monkeypatch.delenv("BLOCKTUNE_PTXAS")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setattr(knobs, "_TOOL_WHEELS", {})
    monkeypatch.setattr(knobs, "_package_dirs", lambda name: [])
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    if os.path.exists("/usr/local/cuda/bin/nvdisasm"):
        pytest.skip("/usr/local/cuda has nvdisasm")
    with pytest.raises(RuntimeError, match="Cannot find nvdisasm: set TRITON_NVDISASM_PATH"):
        knobs.nvidia.nvdisasm
    # Triton's wheel's copy, on sys.path (not imported: under Triton's tests `triton` is a shim)
    (tmp_path / "site" / "triton" / "backends" / "nvidia" / "bin").mkdir(parents=True)
    bundled = _fake_tool(tmp_path / "site" / "triton" / "backends" / "nvidia" / "bin" / "nvdisasm", "12.9")
    assert knobs.nvidia.nvdisasm.path == bundled


def test_groups_have_tritons_base_knobs_api(clean_env):
    """What Triton's fresh_knobs fixture and its tests use: every group is a base_knobs with
    knob_descriptors (each with its variable as `key`), `knobs`, copy().reset() and scope()."""
    groups = [v for v in vars(knobs).values() if isinstance(v, knobs.base_knobs)]
    assert {type(g).__name__ for g in groups} >= {"codegen_knobs", "runtime_knobs", "nvidia_knobs", "language_knobs"}
    assert knobs.codegen.knob_descriptors["wgmma"].key == "BLOCKTUNE_WGMMA"
    fresh = knobs.runtime.copy().reset()
    assert type(fresh) is knobs.runtime_knobs and fresh.launch_enter_hook is knobs.runtime.launch_enter_hook
    with knobs.codegen.scope():
        knobs.codegen.wgmma = "off"
        assert knobs.codegen.wgmma == "off"
    assert "BLOCKTUNE_WGMMA" not in os.environ and knobs.codegen.wgmma == "async"
    clean_env.setenv("TRITON_F32_DEFAULT", "ieee")
    with knobs.language.scope():
        knobs.language.fp32_default = None
        assert knobs.codegen.fp32_default == "tf32"
    assert knobs.language.fp32_default == "ieee" == knobs.codegen.fp32_default


def test_without_propagate_env_an_assignment_stays_in_the_process(clean_env, monkeypatch):
    """Triton's propagate_env = False: the knob (and the compile cache key) changes, os.environ does
    not; reset() forgets it."""
    ref = _key()
    monkeypatch.setattr(knobs, "propagate_env", False)
    knobs.codegen.wgmma = "off"
    assert knobs.codegen.wgmma == "off" and "BLOCKTUNE_WGMMA" not in os.environ and _key() != ref
    knobs.codegen.reset()
    assert knobs.codegen.wgmma == "async" and _key() == ref


@triton.jit
def _mul_add(data):
    ptrs = data + tl.arange(0, 128)
    tl.store(ptrs, tl.load(ptrs) * 1.5 + 1.0)


@pytest.mark.parametrize("fusion", [True, False])
def test_fp_fusion_decides_whether_mul_add_becomes_fma(clean_env, fusion):
    """Triton's knobs.language.default_fp_fusion (TRITON_DEFAULT_FP_FUSION): off, a*b+c stays a
    multiply and an add (bitwise what unfused code computes); on (the default), one fma."""
    knobs.language.default_fp_fusion = fusion
    assert knobs.codegen.fp_fusion is fusion
    ptx = triton.compile(_mul_add, {"data": "*fp32"}, target="sm_90").asm["ptx"]
    assert bool(re.search(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32", ptx)) is fusion
    assert bool(re.search(r"mul\.(rn\.)?f32", ptx)) is not fusion
