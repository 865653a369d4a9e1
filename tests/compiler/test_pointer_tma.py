"""Pointer tiles through TMA (backend/pointer_tma.py, on by default), without a GPU: which
loads the rule takes (the tensor maps the kernel asks the launch for), the PTX it makes (bulk
tensor copies instead of cp.async, assembled by ptxas), and where it must leave the cp.async path
alone. test_pointer_tma_gpu.py runs the same kernels on the GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

import compiler as triton
from compiler import ptxas
from compiler.language.descriptor_type import GLOBAL_SCRATCH
from compiler.runtime import pointer_maps
from compiler.runtime.kernel import CompiledKernel
from test_dot_mma import TUT_DIV, TUT_ONES, TUT_SIG, load_tutorial
from tests.compiler.kernels import pointer_tma as PK

MAP_A = {"name": "a_ptr.tmap", "base": "a_ptr", "dtype": "fp16", "dims": [[["M", 1]], [["K", 1]]],
         "row_stride": [["stride_am", 1]]}
MAP_B = {"name": "b_ptr.tmap", "base": "b_ptr", "dtype": "fp16", "dims": [[["K", 1]], [["N", 1]]],
         "row_stride": [["stride_bk", 1]]}


@pytest.fixture
def pointer_tma(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "1")


def _tutorial(bm=128, bn=256, bk=64, nw=8, ns=3, div=TUT_DIV, ones=TUT_ONES, activation=""):
    cx = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION=activation)
    return triton.compile(load_tutorial().matmul_kernel.fn, signature=TUT_SIG, constexprs=cx, num_warps=nw,
                          num_stages=ns, target="sm_90", divisible_by_16=div, equal_to_1=ones)


def _maps(ck) -> list:
    return [{k: v for k, v in s.items() if k != "block"} for s in ck.metadata.get("pointer_maps") or []]


def _copies(ptx: str) -> tuple[int, int]:
    return ptx.count("cp.async.bulk.tensor"), len(re.findall(r"cp\.async\.c[ga]\.", ptx))


@pytest.mark.parametrize("bm,bn,bk,nw,ns", [(128, 256, 64, 8, 3), (64, 128, 32, 4, 4), (128, 128, 64, 4, 4),
                                            (64, 256, 32, 4, 4), (64, 64, 64, 4, 4)])
def test_tutorial_tiles_through_tma(pointer_tma, bm, bn, bk, nw, ns):
    """Both operands: A's `% M` rows (only masked-off output rows see them), B's `% N` columns, the K
    mask the maps' K bound; the pointer tiles are no longer carried through the loop."""
    ck = _tutorial(bm, bn, bk, nw, ns)
    assert _maps(ck) == [MAP_B, MAP_A]
    assert [s["block"] for s in ck.metadata["pointer_maps"]] == [[bk, bn], [bm, bk]]
    assert ck.metadata["passed"][-2:] == ["b_ptr.tmap", "a_ptr.tmap"]
    ptx = ck.asm["ptx"]
    bulk, cp_async = _copies(ptx)
    assert bulk > 0 and cp_async == 0
    assert ptx.count("prefetch.tensormap") == 2     # each map's descriptor asked for at the entry
    assert ptx.index("prefetch.tensormap") < ptx.index("cp.async.bulk.tensor")
    assert ".param .align 64 .b8" in ptx or "grid_constant" in ck.asm["llir"]
    rep = ptxas.report(ptx)
    assert " 0 bytes spill stores" in rep, rep


def test_elementwise_epilogue_and_where_it_stops(pointer_tma):
    """The tutorial's leaky_relu (a compare and a select on the accumulator) keeps the rows apart;
    2 warps (mma.sync, not wgmma) and num_stages=1 (no pipeline) keep the pointer loads."""
    assert _maps(_tutorial(activation="leaky_relu")) == [MAP_B, MAP_A]
    assert _maps(_tutorial(64, 32, 32, 2, 5)) == []
    assert _maps(_tutorial(ns=1)) == []


def test_on_by_default_and_escape_hatches(monkeypatch):
    """Without the variable the tutorial's tiles go through TMA; BLOCKTUNE_POINTER_TMA=0, and the switch
    under BLOCKTUNE_NO_TMA=1, keep them on cp.async."""
    monkeypatch.delenv("BLOCKTUNE_POINTER_TMA", raising=False)
    monkeypatch.delenv("BLOCKTUNE_NO_TMA", raising=False)
    ck = _tutorial()
    assert _maps(ck) == [MAP_B, MAP_A] and _copies(ck.asm["ptx"])[1] == 0
    for env in ({"BLOCKTUNE_POINTER_TMA": "0"}, {"BLOCKTUNE_POINTER_TMA": "1", "BLOCKTUNE_NO_TMA": "1"}):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            ck = _tutorial()
            assert _maps(ck) == [] and "pointer_maps" not in ck.metadata
            bulk, cp_async = _copies(ck.asm["ptx"])
            assert bulk == 0 and cp_async > 0 and "prefetch.tensormap" not in ck.asm["ptx"]


def test_mixed_operands(pointer_tma):
    """B with unit stride along K (a transposed view): not a row-major box, B stays on cp.async in
    the same pipeline as A's bulk copies; A's row stride not a multiple of 16 bytes: A stays."""
    ck = _tutorial(ones=("stride_ak", "stride_bk", "stride_cn"), div=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K",
                                                                       "stride_am", "stride_bn", "stride_cm"))
    assert _maps(ck) == [MAP_A]
    bulk, cp_async = _copies(ck.asm["ptx"])
    assert bulk > 0 and cp_async > 0 and ck.asm["ptx"].count("prefetch.tensormap") == 1
    assert " 0 bytes spill stores" in ptxas.report(ck.asm["ptx"])
    ck = _tutorial(div=("a_ptr", "b_ptr", "c_ptr", "M", "N", "stride_bk", "stride_cm"))
    assert _maps(ck) == [MAP_B]
    ck = _tutorial(ones=("stride_bn", "stride_cn"))   # A's inner stride a runtime value
    assert _maps(ck) == [MAP_B]


def _compile(kern, sig, cx, div, ones, nw=4, ns=3):
    return triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, num_stages=ns, target="sm_90",
                          divisible_by_16=div, equal_to_1=ones)


SIG = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32", stride_am="i32",
           stride_ak="i32", stride_bk="i32", stride_bn="i32")


def test_masked_rows_and_stepped_range(pointer_tma):
    """Rows bounded by `offs_m < M` (no wrap) and `range(0, K, BK)` with `offs_k < K - k`: the
    mask's bounds are the maps' dims."""
    sig = dict(SIG, c_ptr="*fp16", stride_cm="i32", stride_cn="i32")
    ck = _compile(PK.matmul_masked_rows_kernel, sig, dict(BM=128, BN=128, BK=64),
                  ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
                  ("stride_ak", "stride_bn", "stride_cn"), ns=4)
    assert _maps(ck) == [MAP_B, MAP_A]
    assert _copies(ck.asm["ptx"])[1] == 0


def test_seen_wrapped_rows_stay_pointer_loads(pointer_tma):
    """The accumulator summed over its rows: A's wrapped rows are part of the result (TMA would
    zero them), and so are B's wrapped columns' neighbours... neither operand may change."""
    sig = dict(SIG, c_ptr="*fp32")
    ck = _compile(PK.matmul_colsum_kernel, sig, dict(BM=64, BN=128, BK=64),
                  ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk"), ("stride_ak", "stride_bn"))
    assert _maps(ck) == []
    assert _copies(ck.asm["ptx"])[0] == 0


def test_fixture_kernels_interpret(monkeypatch):
    """The fixtures compute what their docstrings say (interpret mode, numpy in float64)."""
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    rng = np.random.default_rng()
    M, N, K = 37, 50, 40
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    PK.matmul_masked_rows_kernel[(2, 2)](a, b, c, M, N, K, K, 1, N, 1, N, 1, BM=32, BN=32, BK=16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() < 0.05 * np.abs(ref).max()
    s = np.full((N,), np.nan, np.float32)
    PK.matmul_colsum_kernel[(2,)](a, b, s, M, N, K, K, 1, N, 1, BM=64, BN=32, BK=16)
    ref = (a.astype(np.float64)[np.arange(64) % M] @ b.astype(np.float64)).sum(0)
    assert np.abs(s - ref).max() < 0.05 * np.abs(ref).max()


ENCODED: list = []


def test_launch_wrapper_encodes_once(monkeypatch):
    """The generated wrapper evaluates the forms on the call's values, encodes a map on a miss (the
    driver's arguments: address, dims, strides in elements, block, zero fill) and takes it from the
    cache after that; a new address is a new map."""
    from compiler.runtime import tensor_maps

    def fake(*args):   # (owner, address) as encode_raw gives
        ENCODED.append(args)
        return args, 1000 + len(ENCODED)
    monkeypatch.setattr(tensor_maps, "encode_raw", fake)
    monkeypatch.setattr(pointer_maps, "_cache", {})   # the stand-in maps stay out of the real cache
    ENCODED.clear()
    specs = [dict(MAP_B, block=[64, 256]), dict(MAP_A, block=[128, 64])]
    names = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]
    calls = []
    launch = pointer_maps.wrap_launcher(lambda *a: calls.append(a), names, specs)
    values = (0x10000, 0x20000, 0x30000, 1000, 1008, 72, 80, 1008, 1008)
    launch(4, 1, 1, 0, *values)
    launch(4, 1, 1, 0, *values)
    assert [(e[0], e[2], e[3], e[4], e[5]) for e in ENCODED] == [
        (0x20000, (72, 1008), (1008, 1), [64, 256], "zero"), (0x10000, (1000, 72), (80, 1), [128, 64], "zero")]
    assert calls[0] == calls[1] == (4, 1, 1, 0, *values, 1001, 1002)
    launch(4, 1, 1, 0, 0x40000, *values[1:])
    assert len(ENCODED) == 3 and ENCODED[-1][0] == 0x40000 and calls[-1][-2:] == (1001, 1003)

    def refuse(*args):
        raise ValueError("cuTensorMapEncodeTiled failed (CUDA_ERROR_INVALID_VALUE)")
    monkeypatch.setattr(tensor_maps, "encode_raw", refuse)
    with pytest.raises(ValueError, match="loads 'a_ptr' through TMA .* BLOCKTUNE_POINTER_TMA=0"):
        launch(4, 1, 1, 0, 0x50000, *values[1:])


def test_launch_forms_and_order():
    """The launch evaluates the dims' linear forms on the arguments; the launcher takes the maps
    after the arguments and before the global scratch."""
    values = {"M": 1000, "K": 72, "stride_am": 80}
    assert pointer_maps._value([["K", 1], [None, -8]], values) == 64
    assert pointer_maps._value([["stride_am", 2]], values) == 160
    md = {"passed": ["a_ptr", "a_ptr.tmap", GLOBAL_SCRATCH, "M"], "arg_names": [], "arg_types": [],
          "pointer_maps": [{"name": "a_ptr.tmap"}]}
    ck = CompiledKernel("k", {"ptx": ""}, md)
    assert ck._launch_order() == ["a_ptr", "M", "a_ptr.tmap", GLOBAL_SCRATCH]
    md = {"passed": ["a_ptr", "M", "a_ptr.tmap"], "arg_names": ["a_ptr", "M", "a_ptr.tmap"],
          "arg_types": ["*fp16", "i32", "tmap"], "pointer_maps": [{"name": "a_ptr.tmap"}]}
    ck = CompiledKernel("k", {"ptx": ""}, md)
    convs, _, _, passed_pos, passed = ck._plan(2)   # compiled[grid](a, M): the map is not an argument
    assert passed == ["a_ptr", "M"] and passed_pos == [0, 1]


def test_persistent_tile_loop(pointer_tma):
    """bench/matmul_persistent_kernels.py: the K loop inside a tile loop (the tiles' `% M` rows,
    the coordinates computed per tile before the K loop); both operands through TMA."""
    from tests.compiler.kernels import bench_kernels
    kern = bench_kernels("matmul_persistent_kernels.py").matmul_kernel_persistent
    sig = dict(SIG, stride_cm="i32", stride_cn="i32")
    ck = _compile(kern, sig, dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, NUM_SMS=132),
                  TUT_DIV, TUT_ONES, nw=8, ns=3)
    assert _maps(ck) == [MAP_B, MAP_A]
    assert _copies(ck.asm["ptx"])[1] == 0
    assert " 0 bytes spill stores" in ptxas.report(ck.asm["ptx"])
