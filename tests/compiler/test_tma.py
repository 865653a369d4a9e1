"""Host tensor descriptors through the bulk tensor copy engine on sm_90 (compiler/backend/tma.py):
which descriptors take it (compiler/tensor_map.py), the PTX it makes (assembled with ptxas), the
same kernels in interpret mode, and on the GPU against torch (fresh random inputs, outputs
poisoned with NaN, references in float64). An mbarrier bug hangs the GPU: the GPU tests run under
a thread timeout that ends the process."""
from __future__ import annotations

import ctypes
import math
import re

import pytest
import torch

import compiler as triton
from compiler import tensor_map
from compiler.tools.tensor_descriptor import TensorDescriptor
from tests.compiler import ptx_cfg
from tests.compiler.kernels import tma as K
from tests.compiler.kernels.block_pointers import padded_copy_kernel
from tests.compiler.kernels.util import gen, interpret  # noqa: F401 - fixtures

LOAD = "cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.{}d.global.shared::cta.tile.bulk_group"
STMATRIX = "stmatrix.sync.aligned.m8n8.x4.shared.b16"


def _desc_type(dtype: str, block, padding="zero") -> str:
    return f"tensordesc<{dtype}[{', '.join(map(str, block))}]|{padding}|{'1' * len(block)}>"


def _compile(kernel, sig, constexprs=None, num_warps=4, num_stages=3):
    from tests.compiler.test_ptx import ptxas_report
    ck = triton.compile(kernel, signature=sig, constexprs=constexprs or {}, num_warps=num_warps,
                        num_stages=num_stages, target="sm_90")
    rep = ptxas_report(ck.asm["ptx"])
    assert rep["spills"] == 0, rep["text"]
    return ck, ck.asm["ptx"]


# -- which descriptors take TMA -------------------------------------------------------------------

@pytest.mark.parametrize("block,es,target,ok", [
    ((64, 64), 2, "sm_90", True), ((64, 64), 2, "sm_90a", True), ((64, 64), 2, "sm_80", False),
    ((128, 128), 2, "sm_90", True),    # 256-byte rows: two 128-byte panels
    ((4, 8), 4, "sm_90", True),        # 32-byte rows
    ((4, 4), 4, "sm_90", True),        # 16-byte rows, unswizzled
    ((8, 4), 2, "sm_90", False),       # 8-byte rows: below TMA's 16-byte minimum
    ((512, 64), 2, "sm_90", True),     # a first dim over 256: copied in row chunks of 256
    ((64, 512), 2, "sm_90", True),     # a last dim over 256: eight 128-byte panels
    ((2, 512, 16), 2, "sm_90", False),  # another dim over 256
    ((4, 128), 2, "sm_90", False),     # two panels of 4 rows: the second not 1024-byte aligned
    ((2, 2, 2, 2, 2, 16), 2, "sm_90", False),   # rank 6
    ((2, 8, 64), 2, "sm_90", True),
    ((64,), 2, "sm_90", False),        # 1-D: bounds-checked accesses
    ((128, 128), 4, "sm_90", True), ((128, 256), 4, "sm_90", False),   # 64 KiB at most in one tile
])
def test_eligible(block, es, target, ok):
    assert tensor_map.eligible(block, es, target) is ok


def test_box_and_swizzle():
    assert tensor_map.box((128, 64), 2) == (64, 128) and tensor_map.swizzle_bytes((128, 64), 2) == 128
    assert tensor_map.box((64, 256), 2) == (64, 64)            # one 128-byte panel a copy
    assert tensor_map.box((512, 32), 2) == (32, 256) and tensor_map.row_chunks((512, 32)) == 2
    assert tensor_map.box((4, 16, 32), 2) == (32, 16, 4) and tensor_map.swizzle_bytes((4, 16, 32), 2) == 64
    assert tensor_map.swizzle_bytes((8, 4), 4) == 16


# -- PTX ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,block", [("fp16", (64, 64)), ("bf16", (128, 128)), ("fp32", (32, 64)),
                                         ("fp32", (16, 4)), ("fp16", (2, 16, 64)), ("fp16", (512, 32)),
                                         ("fp16", (32, 512))])
def test_copy_ptx(dtype, block):
    sig = {"in_desc": _desc_type(dtype, block), "out_desc": _desc_type(dtype, block), "scale": "fp32"}
    ck, ptx = _compile(K.scaled_copy_kernel, sig)
    rank = len(block)
    es = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    copies = block[-1] * es // min(block[-1] * es, 128) * tensor_map.row_chunks(block)
    assert ptx.count(LOAD.format(rank)) == copies and ptx.count(STORE.format(rank)) == copies
    assert "ld.global" not in ptx and "st.global" not in ptx
    # one barrier, armed once with the tile's bytes, waited on with parity 0, then invalidated
    assert ptx.count("mbarrier.init.shared::cta.b64") == 1 and ptx.count("mbarrier.inval.shared::cta.b64") == 1
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    # the stored tile is written with ordinary stores: fenced for the copy engine, then read before reuse
    assert "fence.proxy.async.shared::cta" in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    assert "out_desc.tmap" in ck.metadata["passed"] and len(re.findall(r"\.b8 \w+_param_\d+\[128\]", ptx)) == 2
    # the registers come from (and go to) the swizzled tile in 16-byte vectors where rows allow it
    if block[-1] * es >= 16 * 4:
        assert re.search(r"ld\.shared\.v4\.b32", ptx) and re.search(r"st\.shared\.v4\.b32", ptx)


def test_no_tma_keeps_bounds_checked_loads(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_NO_TMA", "1")
    sig = {"in_desc": _desc_type("fp16", (64, 64)), "out_desc": _desc_type("fp16", (64, 64)), "scale": "fp32"}
    ck, ptx = _compile(K.scaled_copy_kernel, sig)
    assert "cp.async.bulk" not in ptx and "mbarrier" not in ptx and "ld.global" in ptx
    assert not any(n.endswith(".tmap") for n in ck.metadata["passed"])


def test_nan_padding_ptx():
    """The padding is the tensor map's fill mode (set at launch): the kernel is the same copy."""
    ck, ptx = _compile(padded_copy_kernel, {"src_desc": _desc_type("fp32", (32, 32), "nan"), "Y": "*fp32",
                                                  "stride_y": "i32"})
    assert ptx.count(LOAD.format(2)) == 1 and "ld.global" not in ptx


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_matmul_tma_pipelined_ptx(dtype):
    """Tutorial 09's loop: A and B (as [N, K], used transposed) pipelined through TMA into three
    stages, one mbarrier each, read by wgmma straight from the tiles."""
    sig = {"a_desc": _desc_type(dtype, (128, 64)), "b_desc": _desc_type(dtype, (128, 64)),
           "c_desc": _desc_type(dtype, (128, 128)), "M": "i32", "N": "i32", "K": "i32"}
    ck, ptx = _compile(K.matmul_tma_kernel, sig, num_warps=8)
    # prologue (2 stages) + the loop body: one copy each for A and B
    assert ptx.count(LOAD.format(2)) == 3 * 2
    assert ptx.count("mbarrier.init.shared::cta.b64") == 3 * 2   # one a tile (A, B) a stage
    assert ck.shared >= 3 * (128 * 64 * 2) * 2
    # the K loop: wait for the stage, wgmma straight from its tiles (no operand through registers),
    # one wgmma group left in flight, one bar.sync before thread 0 arms the next stage and copies
    k_loop = ptx_cfg.innermost_loop_with(ptx, "wgmma.mma_async")
    assert "mbarrier.try_wait.parity.shared::cta.b64" in k_loop.text and "ld.shared" not in k_loop.text
    assert "wgmma.wait_group.sync.aligned 1;" in k_loop.text
    assert k_loop.text.count("bar.sync") == 1 and k_loop.text.count(LOAD.format(2)) == 2
    assert k_loop.text.count("mbarrier.arrive.expect_tx") == 2   # A's and B's


def test_matmul_fp8_tma_pipelined_ptx():
    """fp8: A and Bᵀ K-major as fp8 wgmma needs, pipelined through TMA like fp16."""
    sig = {"a_desc": _desc_type("fp8e4nv", (128, 128)), "b_desc": _desc_type("fp8e4nv", (128, 128)),
           "c_desc": _desc_type("fp16", (128, 128)), "M": "i32", "N": "i32", "K": "i32"}
    ck, ptx = _compile(K.matmul_tma_kernel, sig, num_warps=8)
    assert ptx.count(LOAD.format(2)) == 3 * 2 and ptx.count("mbarrier.init.shared::cta.b64") == 3 * 2
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3", ptx)
    assert "ld.shared" not in ptx.split("st.shared")[0]   # no operand goes through registers


def test_matmul_tma_persistent_ptx():
    sig = {"a_desc": _desc_type("fp16", (128, 64)), "b_desc": _desc_type("fp16", (128, 64)),
           "c_desc": _desc_type("fp16", (128, 128)), "M": "i32", "N": "i32", "K": "i32"}
    ck, ptx = _compile(K.matmul_tma_persistent_kernel, sig, {"NUM_PROGRAMS": 132}, num_warps=8)
    assert ptx.count(STORE.format(2)) == 2   # C: two 128-byte panels
    # copies: the first tile's two stages before the tile loop; in the K loop, one stage ahead
    # and, past its end, the next tile's stage instead; the next tile's stages no iteration
    # reached (a K loop shorter than two) at the K loop's exit, before this tile's epilogue, so
    # that they land while the epilogue runs (persistent.py); barriers set up once a program
    assert ptx.count(LOAD.format(2)) == (2 + 2 + 2) * 2
    k_loop = ptx_cfg.innermost_loop_with(ptx, "wgmma.mma_async")
    assert k_loop.text.count(LOAD.format(2)) == 2 * 2
    assert ptx.count("mbarrier.init.shared::cta.b64") == ptx.count("mbarrier.inval.shared::cta.b64") == 3 * 2
    _assert_next_tile_copies_before_epilogue(ptx)
    # the store's wait for its tile to be read is at the next store (and after the tile loop): the
    # copy engine reads C's tile while the next tile's K loop runs
    tile_loop = ptx_cfg.innermost_loop_with(ptx, "wgmma.mma_async").parents[0]
    store_wait = "cp.async.bulk.wait_group.read 0;"
    assert tile_loop.text.count(store_wait) == 1 and ptx.count(store_wait) == 2
    assert tile_loop.text.index(store_wait) < tile_loop.text.index(STMATRIX)
    # the epilogue's tile above the stages (and their barriers), which the copies are filling
    assert ck.shared >= 1024 + 3 * (2 * 128 * 64 * 2) + 128 * 128 * 2
    # the fp16 accumulator goes into C's tile with stmatrix: four 8×8 blocks an instruction, 128×128
    # over 8 warps, as Triton's epilogue (Triton's test_tensor_descriptor matmuls assert it)
    assert ptx.count(STMATRIX) == 128 * 128 // (16 * 16) // 8 and "st.shared.b32" not in ptx


def test_matmul_tma_persistent_pointer_store_ptx():
    """An epilogue of pointer stores: its conversion through shared memory goes above the stages
    the next tile's copies are filling; no TMA store, so no store wait to move."""
    sig = {"a_desc": _desc_type("fp16", (128, 64)), "b_desc": _desc_type("fp16", (128, 64)), "c_ptr": "*fp16",
           "M": "i32", "N": "i32", "K": "i32", "stride_cm": "i32"}
    ck = triton.compile(K.matmul_tma_persistent_pointer_store_kernel, signature=sig, constexprs={"NUM_PROGRAMS": 132},
                        num_warps=8, num_stages=3, target="sm_90", divisible_by_16=("c_ptr", "stride_cm", "M", "N"))
    ptx = ck.asm["ptx"]
    from tests.compiler.test_ptx import ptxas_report
    assert ptxas_report(ptx)["spills"] == 0
    assert ptx.count(LOAD.format(2)) == (2 + 2 + 2) * 2
    _assert_next_tile_copies_before_epilogue(ptx)
    assert "cp.async.bulk.wait_group" not in ptx
    assert ptx.count(STMATRIX) == 8 and ptx.count("st.global.v4") == 128 * 128 * 2 // 16 // 256
    assert 1024 + 3 * (128 + 128) * 64 * 2 < ck.shared <= 227 * 1024
    # a 128×256 tile: its fp32 accumulator, were it converted, would not fit above the stages
    sig["b_desc"] = _desc_type("fp16", (256, 64))
    ck = triton.compile(K.matmul_tma_persistent_pointer_store_kernel, signature=sig, constexprs={"NUM_PROGRAMS": 132},
                        num_warps=8, num_stages=3, target="sm_90", divisible_by_16=("c_ptr", "stride_cm", "M", "N"))
    assert ck.asm["ptx"].count(LOAD.format(2)) == (2 + 1) * 2 and ck.shared <= 227 * 1024


def _assert_next_tile_copies_before_epilogue(ptx: str) -> None:
    """In the tile loop, leaving the K loop: the next tile's copies that the K loop did not make
    (both stages, A and B, each under its own condition) come before the wait for the K loop's
    last wgmma, and so before the epilogue, on every path."""
    k_loop = ptx_cfg.innermost_loop_with(ptx, "wgmma.mma_async")
    tile_loop = k_loop.parents[0]
    by_name = {blk.name: blk for blk in ptx_cfg.blocks(ptx)}
    outside = tile_loop.blocks - k_loop.blocks
    assert sum("\n".join(by_name[n].lines).count(LOAD.format(2)) for n in outside) == 2 * 2
    # from the K loop's exits, walk the tile loop up to the wait for the last wgmma: every copy of
    # the next tile is reached, no epilogue store is
    work = [s for n in k_loop.blocks for s in by_name[n].succ if s in outside]
    seen, copies = set(), 0
    while work:
        n = work.pop()
        text = "\n".join(by_name[n].lines)
        if n in seen or n == tile_loop.header or "wgmma.wait_group.sync.aligned 0;" in text:
            continue
        seen.add(n)
        assert STORE.format(2) not in text
        copies += text.count(LOAD.format(2))
        work.extend(s for s in by_name[n].succ if s in outside)
    assert copies == 2 * 2


def test_loop_carried_descriptor_pipelined_ptx():
    """A descriptor carried through the loop (its map an iter arg) is still pipelined: the copies
    ahead take the map the iteration they load for will have."""
    sig = {"a_desc": _desc_type("fp16", (128, 64)), "b_desc": _desc_type("fp16", (128, 64)), "c_ptr": "*fp32",
           "K": "i32"}
    ck, ptx = _compile(K.loop_carried_descriptor_kernel, sig, {"BM": 128, "BN": 128, "BK": 64}, num_warps=8)
    assert ptx.count(LOAD.format(2)) == 3 * 2 and ptx.count("mbarrier.init.shared::cta.b64") == 3 * 2


# -- interpret mode: the same kernels, unchanged semantics ----------------------------------------

@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_interpret_padding(interpret, padding):
    x = torch.randn(40, 52)
    y = torch.full((64, 64), 7.0)
    padded_copy_kernel[(2, 2)](TensorDescriptor.from_tensor(x, [32, 32], padding=padding), y, y.stride(0))
    ref = torch.full((64, 64), float("nan") if padding == "nan" else 0.0)
    ref[:40, :52] = x
    torch.testing.assert_close(y, ref, equal_nan=True, rtol=0, atol=0)


def test_interpret_matmul(interpret):
    a, b = torch.randn(100, 72).half(), torch.randn(56, 72).half()
    c = torch.full((100, 56), float("nan")).half()
    descs = (TensorDescriptor.from_tensor(a, [32, 16]), TensorDescriptor.from_tensor(b, [32, 16]),
             TensorDescriptor.from_tensor(c, [32, 32]))
    K.matmul_tma_kernel[(4, 2)](*descs, 100, 56, 72)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(72), rtol=1e-2)


# -- GPU ------------------------------------------------------------------------------------------

def _nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@pytest.mark.parametrize("dtype,shape,block", [
    ("fp16", (300, 200), (64, 64)), ("bf16", (257, 384), (128, 128)), ("fp32", (100, 72), (32, 64)),
    ("fp32", (33, 20), (16, 4)), ("fp16", (1000,), (64,)), ("fp16", (5, 37, 136), (2, 16, 64)),
    ("bf16", (3, 64, 64), (1, 64, 64)), ("fp16", (1100, 80), (512, 32)), ("bf16", (100, 1200), (32, 512))])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_copy_gpu(gen, dtype, shape, block):
    """Boundary tiles included (shapes that are not multiples of the block: the store clips)."""
    td = DTYPES[dtype]
    x = torch.randn(shape, generator=gen).to("cuda", td)
    y = _nan(shape, td)
    grid = [triton.cdiv(s, b) for s, b in zip(shape, block)]
    grid = grid if len(grid) < 3 else [grid[1], grid[2], grid[0]]
    K.scaled_copy_kernel[tuple(grid)](TensorDescriptor.from_tensor(x, list(block)),
                                      TensorDescriptor.from_tensor(y, list(block)), 1.5)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), (x.double() * 1.5).to(td).double(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_loop_carried_descriptor_gpu(gen):
    a = torch.randn(128, 1000, generator=gen).to("cuda", torch.float16)
    b = torch.randn(128, 1000, generator=gen).to("cuda", torch.float16)
    c = _nan((128, 128), torch.float32)
    K.loop_carried_descriptor_kernel[(1,)](TensorDescriptor.from_tensor(a, [128, 64]),
                                           TensorDescriptor.from_tensor(b, [128, 64]), c, 1000, BM=128, BN=128, BK=64,
                                           num_warps=8)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(1000), rtol=1e-2)


def _check_padding(gen, dtype, padding, copy):
    """`copy(x, y)` copies the [100, 90] window of x (rows of 96: 16-byte aligned) tile by tile into
    y [128, 128], which starts as the opposite of the padding: every element past the window must
    come out as the padding."""
    td = DTYPES[dtype]
    x = torch.randn(100, 96, generator=gen).to("cuda", td)
    y = _nan((128, 128), td) if padding == "zero" else torch.zeros((128, 128), dtype=td, device="cuda")
    copy(x, y)
    torch.cuda.synchronize()
    ref = torch.full((128, 128), float("nan") if padding == "nan" else 0.0, dtype=torch.float64)
    ref[:100, :90] = x[:, :90].double().cpu()
    torch.testing.assert_close(y.double().cpu(), ref, equal_nan=True, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_matmul_fp8_tma_gpu(gen):
    M, N, Kd = 512, 384, 1008   # rows of 16-byte multiples; the last K block is partly out of bounds
    a = (torch.randn(M, Kd, generator=gen) * 2).to("cuda", torch.float8_e4m3fn)
    b = (torch.randn(N, Kd, generator=gen) * 2).to("cuda", torch.float8_e4m3fn)
    c = _nan((M, N), torch.float16)
    K.matmul_tma_kernel[(M // 128, N // 128)](TensorDescriptor.from_tensor(a, [128, 128]),
                                              TensorDescriptor.from_tensor(b, [128, 128]),
                                              TensorDescriptor.from_tensor(c, [128, 128]), M, N, Kd, num_warps=8)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    torch.testing.assert_close(c.double(), ref, atol=0.05 * math.sqrt(Kd) * 4, rtol=2e-2)


@pytest.mark.parametrize("padding", ["zero", "nan"])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_padding_gpu(gen, padding, dtype):
    _check_padding(gen, dtype, padding, lambda x, y: padded_copy_kernel[(4, 2)](
        TensorDescriptor(x, [100, 90], [96, 1], [32, 64], padding=padding), y, y.stride(0)))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("M,N,Kd,stages", [(1024, 1024, 1024, 3), (1000, 776, 392, 3), (333, 520, 1000, 4),
                                           (256, 256, 64, 3),
                                           # persistent: the stage counter carried over tiles of
                                           # 3 and 5 K blocks, 1 and 3 stages ahead
                                           (768, 640, 192, 2), (640, 768, 320, 4)])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_matmul_tma_gpu(gen, dtype, M, N, Kd, stages):
    td = DTYPES[dtype]
    a = torch.randn(M, Kd, generator=gen).to("cuda", td)
    b = torch.randn(N, Kd, generator=gen).to("cuda", td)
    ref = a.double() @ b.double().T
    tol = 2e-2 if dtype == "fp16" else 8e-2
    for persistent in (False, True):
        c = _nan((M, N), td)
        descs = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
                 TensorDescriptor.from_tensor(c, [128, 128]))
        for _ in range(2):  # the second launch takes the cached launcher and tensor maps
            if persistent:
                K.matmul_tma_persistent_kernel[(7,)](*descs, M, N, Kd, NUM_PROGRAMS=7, num_warps=8, num_stages=stages)
            else:
                K.matmul_tma_kernel[(triton.cdiv(M, 128), triton.cdiv(N, 128))](*descs, M, N, Kd, num_warps=8,
                                                                               num_stages=stages)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.double(), ref, atol=tol * math.sqrt(Kd), rtol=tol)


@pytest.mark.parametrize("M,N,Kd,stages", [(1000, 776, 392, 3), (768, 1024, 192, 2), (512, 512, 512, 4)])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_matmul_tma_persistent_pointer_store_gpu(gen, M, N, Kd, stages):
    a = torch.randn(M, Kd, generator=gen).to("cuda", torch.float16)
    b = torch.randn(N, Kd, generator=gen).to("cuda", torch.float16)
    c = _nan((M, N), torch.float16)
    K.matmul_tma_persistent_pointer_store_kernel[(5,)](
        TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]), c, M, N, Kd, c.stride(0),
        NUM_PROGRAMS=5, num_warps=8, num_stages=stages)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(Kd), rtol=2e-2)


# -- device-side descriptors ----------------------------------------------------------------------

DEVICE_MATMUL_SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}


def test_device_matmul_persistent_ptx():
    """Three maps written once a program, before the tile loop; the K loop pipelined through them."""
    ck = triton.compile(K.device_matmul_persistent_kernel, signature=DEVICE_MATMUL_SIG,
                        constexprs=dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_PROGRAMS=132), num_warps=8,
                        num_stages=3, target="sm_90", divisible_by_16=tuple(DEVICE_MATMUL_SIG))
    ptx = ck.asm["ptx"]
    from tests.compiler.test_ptx import ptxas_report
    assert ptxas_report(ptx)["spills"] == 0
    assert ptx.count("tensormap.cp_fenceproxy") == 3 and ck.metadata["global_scratch_size"] == 3 * 128
    assert ptx.count(LOAD.format(2)) == (2 + 2 + 2) * 2 and "ld.global" not in ptx   # as test_matmul_tma_persistent_ptx
    _assert_next_tile_copies_before_epilogue(ptx)
    assert ptx.count(STMATRIX) == 8 and ptx.count("st.shared") == 3   # the maps' templates zeroed
    # the maps' fields: 2-D, 128-byte swizzle, fp16, zero fill; box [64, 128] for A and B
    assert ptx.count("tensormap.replace.tile.rank.shared::cta.b1024.b32 [%r") == 3
    assert re.search(r"tensormap\.replace\.tile\.elemtype\.shared::cta\.b1024\.b32 \[%r\d+\], 6;", ptx)


@pytest.mark.parametrize("every", [1, 3])
def test_device_descriptor_made_again_shares_its_slot(every):
    """The same map made before a loop and again in it: one 128-byte scratch slot a program (Triton's
    global_scratch_size after its CSE/LICM), each creation writing it."""
    ck = triton.compile(K.device_remade_descriptor_kernel, signature={"X": "*fp32", "M": "i32", "N": "i32"},
                        constexprs={"BM": 8, "BN": 128, "EVERY": every}, target="sm_90", divisible_by_16=("X", "M", "N"))
    ptx = ck.asm["ptx"]
    assert ck.metadata["global_scratch_size"] == 128 and "tensormap.cp_fenceproxy" in ptx
    assert ptx.count(LOAD.format(2)) == ptx.count(STORE.format(2)) > 0 and "ld.global" not in ptx


@pytest.mark.parametrize("bm,bn,bk", [(64, 512, 32), (512, 64, 32), (128, 128, 16)])
def test_device_matmul_scratch_is_a_map_per_descriptor(bm, bn, bk):
    """Blocks over 256 along a dim go through TMA too (panels, row chunks): three descriptors, three
    maps, as Triton's metadata says (test_make_tensor_descriptor_matmul's allocator checks it)."""
    ck = triton.compile(K.device_matmul_persistent_kernel, signature=DEVICE_MATMUL_SIG,
                        constexprs=dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_PROGRAMS=16), num_warps=8,
                        num_stages=2, target="sm_90", divisible_by_16=tuple(DEVICE_MATMUL_SIG))
    ptx = ck.asm["ptx"]
    assert ck.metadata["global_scratch_size"] == 3 * 128 and ptx.count("tensormap.cp_fenceproxy") == 3
    assert "ld.global" not in ptx
    from tests.compiler.test_ptx import ptxas_report
    assert ptxas_report(ptx)["spills"] == 0


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_device_padding_ptx(padding):
    ck, ptx = _compile(K.device_padded_copy_kernel, {"X": "*fp32", "Y": "*fp32", "M": "i32", "N": "i32",
                                                     "stride_x": "i32", "stride_y": "i32"},
                       {"BM": 32, "BN": 32, "PADDING": padding}, num_warps=4)
    # stride_x is not known to be a multiple of 16 bytes here: bounds-checked loads, no map
    assert "tensormap" not in ptx and "ld.global" in ptx
    ck = triton.compile(K.device_padded_copy_kernel, signature={"X": "*fp32", "Y": "*fp32", "M": "i32", "N": "i32",
                                                                "stride_x": "i32", "stride_y": "i32"},
                        constexprs={"BM": 32, "BN": 32, "PADDING": padding}, num_warps=4, target="sm_90",
                        divisible_by_16=("X", "Y", "stride_x"))
    ptx = ck.asm["ptx"]
    assert re.search(r"tensormap\.replace\.tile\.fill_mode\.shared::cta\.b1024\.b32 \[%r\d+\], " +
                     ("1" if padding == "nan" else "0"), ptx)
    assert ptx.count(LOAD.format(2)) == 1


@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_device_descriptor_made_again_gpu(gen):
    M, N = 64, 1008   # N % 16 == 0: the row stride is a multiple of 16 bytes, as TMA needs (a ragged last tile)
    x = torch.randn((M, N), generator=gen).to("cuda")
    want = x + 1
    asked = []

    def allocate(size, alignment, stream):
        asked.append((size, alignment))
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(allocate)
    try:
        K.device_remade_descriptor_kernel[(M // 8,)](x, M, N, BM=8, BN=128, EVERY=3)
        torch.cuda.synchronize()
    finally:
        triton.set_allocator(None)
    assert asked == [(128 * (M // 8), 128)]
    torch.testing.assert_close(x, want, rtol=0, atol=0)


@pytest.mark.parametrize("padding", ["zero", "nan"])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_device_padding_gpu(gen, padding, dtype):
    _check_padding(gen, dtype, padding, lambda x, y: K.device_padded_copy_kernel[(4, 4)](
        x, y, 100, 90, x.stride(0), y.stride(0), BM=32, BN=32, PADDING=padding))


@pytest.mark.parametrize("M,N,Kd,programs", [(1024, 1024, 1024, 132), (1000, 776, 392, 7), (256, 128, 64, 3)])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_device_matmul_persistent_gpu(gen, M, N, Kd, programs):
    """With the allocator triton.set_allocator installs, and with blocktune's default (none set);
    K and N not multiples of 16 (1000×776×392) keep bounds-checked loads (no maps, no scratch)."""
    a = torch.randn(M, Kd, generator=gen).to("cuda", torch.float16)
    b = torch.randn(N, Kd, generator=gen).to("cuda", torch.float16)
    ref = a.double() @ b.double().T
    asked = []

    def allocate(size, alignment, stream):
        asked.append(size)
        return torch.empty(size, dtype=torch.int8, device="cuda")

    for allocator in (allocate, None):
        triton.set_allocator(allocator)
        try:
            c = _nan((M, N), torch.float16)
            K.device_matmul_persistent_kernel[(programs,)](a, b, c, M, N, Kd, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                                          NUM_PROGRAMS=programs, num_warps=8, num_stages=3)
            torch.cuda.synchronize()
        finally:
            triton.set_allocator(None)
        torch.testing.assert_close(c.double(), ref, atol=2e-2 * math.sqrt(Kd), rtol=2e-2)
    # a map for each descriptor whose row stride the specialization knows to be 16-byte aligned
    maps = 2 * (Kd % 16 == 0) + (N % 16 == 0)
    assert asked == ([programs * maps * 128] if maps else [])


@pytest.mark.parametrize("num_ctas", [1, 2])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_device_matmul_scratch_per_cta_gpu(gen, num_ctas):
    """Triton's test_make_tensor_descriptor_matmul: the allocator is asked for 3 maps × 128 bytes ×
    grid × num_ctas (Triton's per-CTA scratch), and with num_ctas=2 each program's maps land in its
    cluster's first slot; the product is right either way."""
    from tests.compiler.kernels.block_pointers import matmul_descriptor_kernel
    M, N, Kd = 1024, 512, 256
    a = torch.randn(M, Kd, generator=gen).to("cuda", torch.float16)
    b = torch.randn(Kd, N, generator=gen).to("cuda", torch.float16)
    grid = (M // 64, N // 128)
    asked = []

    def allocate(size, alignment, stream):
        asked.append((size, alignment))
        return torch.full((size,), -1, dtype=torch.int8, device="cuda")

    triton.set_allocator(allocate)
    try:
        c = _nan((M, N), torch.float16)
        matmul_descriptor_kernel[grid](a, b, c, M, N, Kd, BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=8,
                                       num_stages=4, num_ctas=num_ctas)
        torch.cuda.synchronize()
    finally:
        triton.set_allocator(None)
    assert asked == [(3 * 128 * grid[0] * grid[1] * num_ctas, 128)]
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=2e-2 * math.sqrt(Kd), rtol=2e-2)


# -- the host tensor map's encoding (the driver call captured) ------------------------------------

@pytest.mark.parametrize("shape,block,dtype,padding,box,swizzle", [
    ((300, 200), (64, 64), torch.float16, "zero", (64, 64), "128B"),
    ((5, 37, 136), (2, 16, 64), torch.float16, "nan", (64, 16, 2), "128B"),
    ((100, 72), (32, 64), torch.float32, "zero", (32, 32), "128B"),      # 256-byte rows: 2 panels of 32
    ((33, 20), (16, 4), torch.float32, "zero", (4, 16), "NONE"),
    ((64, 64), (64, 16), torch.bfloat16, "zero", (16, 64), "32B"),
    ((1000, 64), (512, 32), torch.float16, "zero", (32, 256), "64B"),   # two row chunks a panel
])
def test_tensor_map_encoding(monkeypatch, shape, block, dtype, padding, box, swizzle):
    from cuda.bindings import driver as cu
    from compiler.runtime import tensor_maps
    monkeypatch.setattr(tensor_maps, "_native_encoder", lambda: None)   # the cuda-python path, whose call is captured
    calls = []

    def encode(*args):
        calls.append(args)
        return cu.CUresult.CUDA_SUCCESS, cu.CUtensorMap()

    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", encode)
    monkeypatch.setattr(tensor_maps, "_cache", {})
    x = torch.empty(shape, dtype=dtype)
    desc = TensorDescriptor.from_tensor(x, list(block), padding=padding)
    first = tensor_maps.address(desc)
    assert tensor_maps.address(desc) == first and len(calls) == 1   # cached
    dtype_enum, rank, address, dims, strides, boxes, ones, interleave, swz, _, fill = calls[0]
    es = x.element_size()
    assert rank == len(shape) and address == x.data_ptr()
    assert [int(d) for d in dims] == list(reversed(shape))
    assert [int(s) for s in strides] == [s * es for s in reversed(x.stride()[:-1])]
    assert tuple(int(b) for b in boxes) == box == tensor_map.box(block, es) and [int(o) for o in ones] == [1] * rank
    assert swz == getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + swizzle)
    assert interleave == cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert dtype_enum == getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" +
                                 {torch.float16: "FLOAT16", torch.float32: "FLOAT32", torch.bfloat16: "BFLOAT16"}[dtype])
    assert (fill == cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) == (padding == "nan")
    # another block of the same tensor is another map
    tensor_maps.address(TensorDescriptor.from_tensor(x, [b // 2 if i == 0 and b > 1 else b for i, b in enumerate(block)]))
    assert len(calls) == 2


def test_tensor_map_encoding_error(monkeypatch):
    from cuda.bindings import driver as cu
    from compiler.runtime import tensor_maps
    monkeypatch.setattr(tensor_maps, "_native_encoder", lambda: None)
    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled",
                        lambda *a: (cu.CUresult.CUDA_ERROR_INVALID_VALUE, None))
    monkeypatch.setattr(tensor_maps, "_cache", {})
    desc = TensorDescriptor.from_tensor(torch.empty(64, 64, dtype=torch.float16), [64, 64])
    with pytest.raises(ValueError, match=r"cuTensorMapEncodeTiled failed \(CUDA_ERROR_INVALID_VALUE\).*\[64, 64\]"):
        tensor_maps.address(desc)


# the driver's signature: map, data type, rank, address, dims, strides, box, element strides, interleave,
# swizzle, L2 promotion, fill
_ENCODE_TILED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                 ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int)


def test_native_encoder_calls_the_driver_with_the_maps_arguments(monkeypatch):
    """launch.c's encode_tiled hands cuTensorMapEncodeTiled (here a stand-in with its signature) the
    map's arguments, 64-byte-aligned storage that it keeps, and gives back the driver's error code."""
    from compiler.runtime import native, tensor_maps
    mod = native.module()
    if mod is None:
        pytest.skip("no native launcher module (no C compiler)")
    seen = []

    def driver_encode(tmap, dtype, rank, address, dims, strides, box, ones, interleave, swizzle, promotion, fill):
        seen.append((tmap % 64, dtype, rank, address, dims[:rank], strides[:rank - 1], box[:rank], ones[:rank],
                     interleave, swizzle, promotion, fill))
        ctypes.memset(tmap, 0x5A, 128)
        return 0
    fn = _ENCODE_TILED(driver_encode)
    monkeypatch.setattr(tensor_maps, "_native_encoder", lambda: (mod.encode_tiled, ctypes.cast(fn, ctypes.c_void_p).value))
    x = torch.empty(5, 37, 136, dtype=torch.float16)
    storage, ptr = tensor_maps.encode(TensorDescriptor.from_tensor(x, [2, 16, 64], padding="nan"))
    from cuda.bindings import driver as cu
    assert seen == [(0, int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16), 3, x.data_ptr(), [136, 37, 5],
                     [136 * 2, 37 * 136 * 2], [64, 16, 2], [1, 1, 1], 0,
                     int(cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B),
                     int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
                     int(cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA))]
    assert ptr % 64 == 0 and ctypes.string_at(ptr, 128) == b"\x5a" * 128 and isinstance(storage, bytearray)
    refuse = _ENCODE_TILED(lambda *args: 1)   # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(tensor_maps, "_native_encoder", lambda: (mod.encode_tiled, ctypes.cast(refuse, ctypes.c_void_p).value))
    with pytest.raises(ValueError, match=r"cuTensorMapEncodeTiled failed \(.*\) .*shape \[5, 37, 136\]"):
        tensor_maps.encode(TensorDescriptor.from_tensor(x, [2, 16, 64]))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,block,dtype,padding", [
    ((4096, 512), (128, 64), torch.float16, "zero"), ((5, 37, 136), (2, 16, 64), torch.float16, "nan"),
    ((100, 72), (32, 64), torch.float32, "zero"), ((64, 64), (64, 16), torch.bfloat16, "zero")])
def test_native_encoder_matches_cuda_python_gpu(monkeypatch, shape, block, dtype, padding):
    """On the GPU machine the maps come from launch.c's encode_tiled, byte for byte the map
    cuda-python's cuTensorMapEncodeTiled makes from the same descriptor."""
    from compiler.runtime import tensor_maps
    x = torch.empty(shape, dtype=dtype, device="cuda")
    desc = TensorDescriptor.from_tensor(x, list(block), padding=padding)
    native, native_ptr = tensor_maps.encode(desc)
    assert isinstance(native, bytearray)   # launch.c's storage: the native path
    monkeypatch.setattr(tensor_maps, "_native_encoder", lambda: None)
    reference, reference_ptr = tensor_maps.encode(desc)
    assert ctypes.string_at(native_ptr, 128) == ctypes.string_at(reference_ptr, 128)


@pytest.mark.parametrize("head_dim,block_n,num_warps", [(64, 64, 4), (128, 64, 8), (128, 128, 8)])
def test_attention_forward_loop_ptx(head_dim, block_n, num_warps):
    """Attention's K loop with host descriptors: the tiles' mbarrier waits, no layout conversion
    through shared memory (O's TMA store once anchored the row statistics' loop layout, and l_i
    went through shared memory, two bar.syncs, every iteration), one bar.sync before the copies."""
    from tests.compiler.test_attention import _fwd_ptx
    ck = _fwd_ptx(head_dim, 128, block_n, num_warps, False, True)
    loop = ptx_cfg.innermost_loop_with(ck.asm["ptx"], "wgmma.mma_async")
    assert "mbarrier.try_wait.parity.shared::cta.b64" in loop.text
    assert "ld.shared" not in loop.text and "st.shared" not in loop.text
    assert loop.text.count("bar.sync") == 1 and loop.text.count(LOAD.format(2)) == 2 * (head_dim * 2 // 128)
    # K and V each on their own barrier: QKᵀ waits for K only, P·V for V after the softmax
    waits = [m.start() for m in re.finditer(r"mbarrier\.try_wait", loop.text)]
    commits = [m.start() for m in re.finditer(r"wgmma\.commit_group", loop.text)]
    assert len(waits) == 2 and len(commits) == 2 and waits[0] < commits[0] < waits[1] < commits[1]
