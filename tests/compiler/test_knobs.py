"""compiler.knobs: the compiler's environment switches in one settings object; the codegen ones are
part of the compile cache key by construction."""
from __future__ import annotations

import os
import pathlib
import re

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
    for _, k in [*knobs.codegen.knobs(), *knobs.runtime.knobs(), *knobs.cache.knobs()]:
        for name in k.names:
            monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_defaults(clean_env):
    assert knobs.codegen.values() == {"wgmma": "async", "pipeline": True, "tma": True, "warp_specialize": False,
                                       "debug": False, "fp32_default": "tf32"}
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
    assert "cp.async.commit_group" in ptx()
    clean_env.setenv("BLOCKTUNE_NO_PIPELINE", "1")
    assert "cp.async" not in ptx()


@pytest.mark.parametrize("name,values", [("BLOCKTUNE_WGMMA", ("0", "sync")), ("BLOCKTUNE_NO_PIPELINE", ("1",)),
                                         ("BLOCKTUNE_DEBUG", ("1",)), ("TRITON_DEBUG", ("1",)),
                                         ("TRITON_F32_DEFAULT", ("ieee", "tf32x3"))])
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
    names = {name for name, _ in knobs.codegen.knobs()}
    assert names == {"wgmma", "pipeline", "tma", "warp_specialize", "debug", "fp32_default"}
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
