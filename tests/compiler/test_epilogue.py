"""The epilogue's conversion out of a tensor-core accumulator (backend/fragment_convert.py).

Run on a model of one CTA (simt_model): every element of a dot result held in the mma/wgmma
fragment layout must arrive where the store's layout wants it, for the tile shapes and warp counts
the matmul configs use, through stmatrix (16-bit results) or vector stores (32-bit), and neither
the writes nor the 16-byte reads may conflict on shared-memory banks. The PTX side: the tutorial
matmul's epilogue is stmatrix + ld.shared.v4 + st.global.v4 and assembles with ptxas.
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler.backend import fragment_convert
from compiler.backend.dot_layouts import mma_acc_layout, wgmma_acc_layout, wgmma_config
from compiler.backend.layouts import blocked
from compiler.language import dtypes as T

from simt_model import CTA, Value


def conflict_ways(cta: CTA) -> int:
    """The worst bank conflict over all recorded vector accesses (1: none): a phase is the lanes
    that move 128 bytes together; within it, each 16-byte bank group serves one distinct 16-byte
    line per wavefront."""
    ways = 1
    for _, addr, nbytes in cta.accesses:
        per_phase = max(1, 128 // nbytes)
        for w in range(cta.num_warps):
            lanes = addr[w * 32:(w + 1) * 32]
            for p in range(0, 32, per_phase):
                lines = {}
                for a in lanes[p:p + per_phase].tolist():
                    lines.setdefault((a // 16) % 8, set()).add(a // 16)
                ways = max(ways, max(len(v) for v in lines.values()))
    return ways


def store_layout(shape, es, num_warps):
    """The layout the store of a [M, N] row-major tile wants (16 bytes per thread along N)."""
    return blocked(shape, (1, 0), max(1, min(16 // es, shape[1])), num_warps)


def run_convert(have, want, dt, stmatrix, seed=0):
    rng = np.random.default_rng(seed)
    elems = rng.integers(0, 1 << 15, size=have.shape, dtype=np.int64)
    cta = CTA(have.num_warps)
    v, out = Value(0, have.shape, dt), Value(1, have.shape, dt)
    cta.put(v, have, elems)
    regs = cta.block(v, have)
    assert fragment_convert.applies(have, want, dt, 1 << 20)
    cta.set_block(out, want, fragment_convert.convert(cta, regs, have, want, dt, stmatrix))
    np.testing.assert_array_equal(cta.elements(out), elems)
    return cta


WGMMA_CASES = [(128, 256, 8), (128, 128, 4), (64, 256, 4), (128, 64, 4), (64, 128, 4), (64, 32, 4),
               (256, 128, 8), (256, 64, 4), (128, 32, 4), (64, 64, 8), (64, 16, 4)]
MMA_CASES = [(32, 64, 2), (64, 32, 2), (128, 128, 4), (16, 16, 1), (64, 64, 4), (128, 256, 8)]


@pytest.mark.parametrize("m,n,nw", WGMMA_CASES)
@pytest.mark.parametrize("dt", [T.float16, T.bfloat16, T.float32])
def test_wgmma_accumulator_to_store_layout(m, n, nw, dt):
    assert wgmma_config(m, n, nw) is not None
    have = wgmma_acc_layout(m, n, nw)
    cta = run_convert(have, store_layout((m, n), dt.itemsize, nw), dt, stmatrix=dt.itemsize == 2)
    kinds = {k for k, _, _ in cta.accesses}
    assert kinds == ({"stmatrix", "ld"} if dt.itemsize == 2 else {"st", "ld"})
    # 32-bit: the 8-byte pairs of rows g and g+1 share a bank group (the unswizzled buffer: 8 ways)
    assert conflict_ways(cta) == (1 if dt.itemsize == 2 else 2)


@pytest.mark.parametrize("m,n,nw", MMA_CASES)
@pytest.mark.parametrize("stmatrix", [True, False])
def test_mma_accumulator_to_store_layout(m, n, nw, stmatrix):
    """mma.sync's accumulator (sm_80 code: no stmatrix there), replicated warps included."""
    cta = run_convert(mma_acc_layout(m, n, nw), store_layout((m, n), 2, nw), T.float16, stmatrix)
    assert conflict_ways(cta) <= (1 if stmatrix else 2)


def test_only_accumulator_layouts_take_this_path():
    acc = wgmma_acc_layout(128, 128, 4)
    plain = store_layout((128, 128), 2, 4)
    assert not fragment_convert.applies(plain, acc, T.float16, 1 << 20)     # into a fragment: generic
    assert not fragment_convert.applies(acc, acc, T.float16, 1 << 20)
    assert not fragment_convert.applies(acc, plain, T.int1, 1 << 20)
    assert not fragment_convert.applies(acc, plain, T.float16, 16 * 1024)  # does not fit: generic, chunked
    assert fragment_convert.has_stmatrix("sm_90a") and not fragment_convert.has_stmatrix("sm_80")


# ---- the tutorial's epilogue in PTX and SASS ------------------------------------------------------

def tutorial_ptx(bm, bn, bk, nw, stages, target="sm_90", c_dtype="fp16"):
    from compiler.backend import nvptx
    from compiler.runtime.compile import build_ir
    from tests.compiler.kernels import bench_kernels
    from tests.compiler.test_dot_mma import TUT_DIV, TUT_ONES, TUT_SIG
    mod = bench_kernels("matmul_kernels.py")
    cx = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="")
    sig = dict(TUT_SIG, c_ptr=f"*{c_dtype}")
    return nvptx.compile_ir(build_ir(mod.matmul_kernel.fn, sig, cx, TUT_DIV, TUT_ONES), num_warps=nw,
                            num_stages=stages, target=target)["ptx"]


def epilogue(ptx: str) -> str:
    return ptx[ptx.rindex("wgmma.wait_group.sync.aligned 0;" if "wgmma" in ptx else "mma.sync"):]


@pytest.mark.parametrize("bm,bn,bk,nw,stages", [(128, 256, 64, 8, 3), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4),
                                                (128, 64, 64, 4, 4), (128, 32, 32, 4, 4)])
def test_tutorial_epilogue_ptx(bm, bn, bk, nw, stages):
    """wgmma: one stmatrix.x4 per 16×16 block of the tile, one ld.shared.v4 and one st.global.v4
    per 16 bytes of a thread's share, no 4-byte shared stores; assembles without spills."""
    from tests.compiler.test_ptx import ptxas_report
    ptx = tutorial_ptx(bm, bn, bk, nw, stages)
    tail = epilogue(ptx)
    threads = 32 * nw
    assert tail.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == bm * bn // (16 * 16) // (threads // 32)
    assert tail.count("ld.shared.v4.b32") == tail.count("st.global.v4.b32") == bm * bn * 2 // 16 // threads
    assert "st.shared.b32" not in tail and "st.shared.b16" not in tail
    rep = ptxas_report(ptx)
    assert rep["spills"] == 0 and rep["stack"] == 0, rep["text"]


def test_mma_sync_epilogue_without_stmatrix():
    """sm_80 code (mma.sync, no stmatrix there): vector stores into the swizzled buffer, 16-byte reads."""
    from tests.compiler.test_ptx import ptxas_report
    ptx = tutorial_ptx(128, 128, 32, 4, 4, target="sm_80")
    tail = epilogue(ptx)
    assert "stmatrix" not in ptx and "st.shared.v2.b16" in tail
    assert tail.count("ld.shared.v4.b32") == tail.count("st.global.v4.b32") == 16
    assert ptxas_report(ptx)["spills"] == 0


def test_fp32_output_epilogue():
    """A float32 result (tests' dot kernel, D fp32): 8-byte pair stores into the swizzled buffer,
    then 16-byte reads and global stores (32 per thread of a 128×128 tile over 128 threads)."""
    from tests.compiler.test_dot_mma import compile_dot
    from tests.compiler.test_ptx import ptxas_report
    ptx = compile_dot("fp16", 128, 128, 32, 4, out="fp32").asm["ptx"]
    tail = epilogue(ptx)
    assert "stmatrix" not in ptx
    assert tail.count("st.shared.v2.b32") == 64 and tail.count("st.global.v4.b32") == 32
    assert ptxas_report(ptx)["spills"] == 0


def _extended_configs():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "matmul_configs.py"
    spec = importlib.util.spec_from_file_location("_matmul_configs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.EXTENDED


@pytest.mark.parametrize("i", range(len(_extended_configs())))
def test_extended_bench_configs_assemble(i):
    """bench/matmul.py --configs extended: every added config is a wgmma kernel that assembles
    without spills or stack (what the benchmark's autotuners will time)."""
    from tests.compiler.test_ptx import ptxas_report
    kw, nw, ns = _extended_configs()[i]
    ptx = tutorial_ptx(kw["BLOCK_SIZE_M"], kw["BLOCK_SIZE_N"], kw["BLOCK_SIZE_K"], nw, ns)
    assert "wgmma.mma_async" in ptx and "stmatrix" in ptx
    rep = ptxas_report(ptx)
    assert rep["spills"] == 0 and rep["stack"] == 0, rep["text"]


# ---- a TMA store's tile (tma.lower_tma_store) -----------------------------------------------------

def _tma_store_image(m, n, nw, stmatrix):
    """The shared-memory bytes of C's box [m, n] (fp16, 128-byte panels) after every thread wrote
    its accumulator registers: through stmatrix or through the generic vector stores."""
    from compiler.backend import smem_tiles, tma
    from compiler.backend.llvm_types import mty
    lay = wgmma_acc_layout(m, n, nw)
    rng = np.random.default_rng(m * n + nw)
    cta = CTA(nw)
    v = Value(0, (m, n), T.float16)
    cta.put(v, lay, rng.integers(0, 1 << 15, size=(m, n), dtype=np.int64))
    tile = tma.BoxTile((m, n), 2)
    if stmatrix:
        assert fragment_convert.stmatrix_applies(lay, 2, "sm_90a")
        fragment_convert.write_stmatrix(cta, cta.block(v, lay), lay, tile)
    else:
        smem_tiles.write_tile(cta, cta.block(v, lay), lay, tile, mty(T.float16))
    return cta


@pytest.mark.parametrize("m,n,nw", [(128, 128, 8), (128, 256, 8), (128, 128, 4), (64, 128, 4), (128, 64, 4),
                                    (256, 128, 8), (64, 32, 4), (64, 16, 4)])   # 64- and 32-byte swizzles too
def test_tma_store_tile_through_stmatrix(m, n, nw):
    """The TMA store's swizzled panels hold the same bytes whether the accumulator went in through
    stmatrix (one instruction per four 8×8 blocks) or through 4-byte stores, and stmatrix's rows
    do not conflict on banks."""
    via_stmatrix, via_stores = _tma_store_image(m, n, nw, True), _tma_store_image(m, n, nw, False)
    assert len(via_stmatrix.smem) == m * n   # every element (2 bytes) once
    assert via_stmatrix.smem == via_stores.smem
    assert {k for k, _, _ in via_stmatrix.accesses} == {"stmatrix"}
    assert conflict_ways(via_stmatrix) == 1
