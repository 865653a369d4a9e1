"""int8 and split-precision fp32 (tf32x3, bf16x3, bf16x6) `tl.dot` on the tensor cores, without a GPU
(GPU runs: test_dot_precisions_gpu.py).

int8 × int8 → int32 goes through the 8-bit (k32, K-major) tensor-core paths that fp8 uses: wgmma
`m64nNk32.s32.s8.s8` on sm_90 where the warpgroup split fits, else mma.sync
`m16n8k32.row.col.satfinite.s32.s8.s8.s32` (the instructions Triton's test_dot looks for).
input_precision="tf32x3" is three tf32 mma.sync products of split operands, "bf16x3" three bf16 ones,
"bf16x6" six (split_precision.py).

1. The lowering's address arithmetic, executed on numpy: mma.sync s8 fragments (tensor_core_model)
   and the wgmma descriptors of 8-bit K-major tiles.
2. PTX: the instructions, pipelining of int8 K loops, every case assembled by ptxas.
3. Interpret mode: the same kernels against numpy.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import compiler as triton
import tensor_core_model
from compiler import ptxas
from compiler.backend import dot_layouts, wgmma
from compiler.ptxas import require as find_ptxas
from tests.compiler.kernels import dot_precisions as K

find_ptxas()  # CI installs ptxas: without it these tests must fail, not skip


# ---- 1. address arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,Kd,nw", [(16, 16, 32, 1), (64, 128, 128, 4), (32, 128, 64, 2), (32, 32, 128, 16),
                                       (128, 16, 32, 4), (64, 32, 64, 8)])
def test_s8_mma_fragments_compute_the_product(M, N, Kd, nw):
    rng = np.random.default_rng(M + 3 * N + 7 * Kd + nw)
    A = rng.integers(-128, 128, (M, Kd)).astype(float)
    B = rng.integers(-128, 128, (Kd, N)).astype(float)
    C = rng.integers(-1000, 1000, (M, N)).astype(float)
    D, conflicts = tensor_core_model.mma_sim(A, B, C, nw, "s8", 1, 0)   # K-major tiles only
    np.testing.assert_array_equal(D, A @ B + C)
    assert conflicts == 0


@pytest.mark.parametrize("shape", [(64, 128), (128, 64), (64, 32), (256, 256)])
def test_8bit_kmajor_descriptors_read_the_tile(shape):
    """A K-major 8-bit tile written as the lowering does; each k32 instruction's descriptor reads
    exactly its [64 (M or N), 32] slice."""
    es, base = 1, 1024
    rows, k = shape
    t = dot_layouts.SmemTile(shape, 1, es, base=base, panels=True)
    smem = np.full(base + t.nbytes, np.nan)
    vals = np.arange(rows * k, dtype=float).reshape(shape)
    for i, j in itertools.product(range(rows), range(k)):
        smem[base + t.offset((i, j))] = vals[i, j]
    for mn0 in range(0, rows, 64):
        for k0 in range(0, k, 32):
            desc = wgmma.descriptor_const(t) | (((base + t.offset((mn0, k0))) >> 4) & 0x3FFF)
            got = tensor_core_model.read_through_descriptor(smem, desc, min(64, rows), 32, es, False)
            np.testing.assert_array_equal(got, vals[mn0:mn0 + 64, k0:k0 + 32])


# ---- 2. PTX ------------------------------------------------------------------------------------------

TILE_SIG = dict(A="*{t}", stride_am="i32", stride_ak="i32", B="*{t}", stride_bk="i32", stride_bn="i32", C="*{c}",
                stride_cm="i32", stride_cn="i32")
LOOP_SIG = dict(A="*{t}", B="*{t}", C="*{c}", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
                stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")
TYPES = {"int8": ("i8", "i32"), "fp32": ("fp32", "fp32")}


def _compile(kernel, sig, dt, ones, num_warps, **constexprs):
    t, c = TYPES[dt]
    sig = {k: v.format(t=t, c=c) for k, v in sig.items()}
    return triton.compile(kernel, signature=sig, constexprs=constexprs, num_warps=num_warps, target="sm_90a",
                          divisible_by_16=tuple(n for n in sig if n not in ones), equal_to_1=ones)


def compile_tile(dt, M, N, Kd, nw, col_a=False, col_b=False, prec="ieee", add_c=True):
    ones = ("stride_am" if col_a else "stride_ak", "stride_bk" if col_b else "stride_bn", "stride_cn")
    return _compile(K.tile_dot_kernel, TILE_SIG, dt, ones, nw, BM=M, BN=N, BK=Kd, PREC=prec, ADD_C=add_c)


def assembles(ptx: str, spills: bool = False) -> None:
    """ptxas takes it, without spilling unless `spills` (an accumulator of over 128 registers a thread)."""
    rep = ptxas.report(ptx, "sm_90a")
    assert spills or int(re.search(r"(\d+) bytes spill stores", rep).group(1)) == 0, rep


S8_WGMMA = r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.s32\.s8\.s8 "
S8_MMA = "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"

# Triton's test_dot int8 shapes (get_test_dot_mixed_sizes_cases): (M, N, K, num_warps, wgmma N or None)
INT8_SHAPES = [(128, 256, 32, 8, 256), (128, 16, 32, 4, 16), (32, 128, 64, 4, None), (128, 128, 64, 4, 128),
               (64, 128, 128, 4, 128), (32, 128, 64, 2, None), (64, 64, 32, 4, 64), (32, 32, 128, 16, None),
               (128, 128, 64, 2, None), (64, 128, 128, 2, None)]


@pytest.mark.parametrize("M,N,Kd,nw,inst_n", INT8_SHAPES)
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, False), (False, True), (True, True)])
def test_int8_dot_uses_int8_tensor_cores(M, N, Kd, nw, inst_n, col_a, col_b):
    ptx = compile_tile("int8", M, N, Kd, nw, col_a, col_b).asm["ptx"]
    if inst_n is None:
        assert S8_MMA in ptx and "wgmma" not in ptx
    else:
        assert {int(n) for n in re.findall(S8_WGMMA, ptx)} == {inst_n}
        assert "mma.sync" not in ptx
    assembles(ptx, spills=M * N // (32 * nw) > 128)


def test_int8_dot_on_mma_sync_when_wgmma_is_off(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "0")
    ptx = compile_tile("int8", 64, 128, 128, 4).asm["ptx"]
    assert S8_MMA in ptx and "wgmma" not in ptx
    assembles(ptx)


@pytest.mark.parametrize("nw,bm,bn,mode", [(4, 64, 64, "async"), (8, 128, 128, "async"), (2, 32, 64, "mma")])
def test_int8_k_loop_is_pipelined(nw, bm, bn, mode, monkeypatch):
    """A K loop of int8 tiles (B K-major, as int8 GEMMs store it) goes through the cp.async pipeline;
    on wgmma the int32 accumulator stays in flight across iterations (wgmma wait_group 1)."""
    ones = ("stride_ak", "stride_bk", "stride_cn")
    ck = _compile(K.loop_dot_kernel, LOOP_SIG, "int8", ones, nw, BM=bm, BN=bn, BK=64, PREC="ieee")
    ptx = ck.asm["ptx"]
    assert re.search(r"cp\.async\.wait_group\s+2;", ptx)   # num_stages 3: one stage (2 groups) ahead
    if mode == "async":
        assert re.search(S8_WGMMA, ptx) and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    else:
        assert S8_MMA in ptx
    assembles(ptx)


TF32_MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
BF16_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
# precision → (its instruction, the instruction's K, products)
SPLITS = {"tf32x3": (TF32_MMA, 8, 3), "bf16x3": (BF16_MMA, 16, 3), "bf16x6": (BF16_MMA, 16, 6)}


@pytest.mark.parametrize("prec", list(SPLITS))
@pytest.mark.parametrize("M,N,Kd,nw", [(16, 16, 16, 4), (32, 32, 32, 4), (64, 64, 64, 4), (64, 32, 32, 8)])
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, True)])
def test_split_precision_is_several_mma_products(prec, M, N, Kd, nw, col_a, col_b):
    inst, k_inst, products = SPLITS[prec]
    ptx = compile_tile("fp32", M, N, Kd, nw, col_a, col_b, prec=prec).asm["ptx"]
    wm, wn = dot_layouts.warps_per_tile(M, N, nw)
    assert ptx.count(inst) == products * (M // wm // 16) * (N // wn // 8) * (Kd // k_inst)
    assert "fma.rn.f32" not in ptx   # no FMA dot
    if prec == "tf32x3":   # the operands' big and small parts: two roundings per element a thread writes
        one = compile_tile("fp32", M, N, Kd, nw, col_a, col_b, prec="tf32").asm["ptx"]
        assert ptx.count("cvt.rna.tf32.f32") == 2 * one.count("cvt.rna.tf32.f32")
    assembles(ptx)


@pytest.mark.parametrize("prec", list(SPLITS))
def test_split_precision_in_a_k_loop_assembles(prec):
    ones = ("stride_ak", "stride_bn", "stride_cn")
    ptx = _compile(K.loop_dot_kernel, LOOP_SIG, "fp32", ones, 4, BM=64, BN=64, BK=32, PREC=prec).asm["ptx"]
    assert SPLITS[prec][0] in ptx
    assembles(ptx)


# ---- 3. interpret mode ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")


@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, True)])
def test_int8_tile_dot_in_interpret_mode(interpret, col_a, col_b):
    g = torch.Generator().manual_seed(11)
    M, N, Kd = 32, 64, 64
    a = torch.randint(-128, 128, (Kd, M) if col_a else (M, Kd), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (N, Kd) if col_b else (Kd, N), generator=g, dtype=torch.int8)
    a, b = (a.T if col_a else a), (b.T if col_b else b)
    c = torch.randint(-1000, 1000, (M, N), generator=g, dtype=torch.int32)
    want = a.long() @ b.long() + c.long()
    K.tile_dot_kernel[(1,)](a, a.stride(0), a.stride(1), b, b.stride(0), b.stride(1), c, c.stride(0), c.stride(1),
                            BM=M, BN=N, BK=Kd, PREC="ieee", ADD_C=True)
    assert torch.equal(c.long(), want)


@pytest.mark.parametrize("prec", list(SPLITS))
def test_split_precision_loop_dot_in_interpret_mode(interpret, prec):
    g = torch.Generator().manual_seed(12)
    M, N, Kd = 48, 40, 100
    a = torch.randn((M, Kd), generator=g)
    b = torch.randn((Kd, N), generator=g)
    c = torch.full((M, N), float("nan"))
    K.loop_dot_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0),
                                                                 b.stride(1), c.stride(0), c.stride(1), BM=32, BN=32,
                                                                 BK=32, PREC=prec)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


# ---- the loop pipeline's cp.async groups -------------------------------------------------------------

@pytest.mark.parametrize("stages", [2, 3, 5, 6])
@pytest.mark.parametrize("wgmma_mode", ["1", "0"])
def test_tl_range_num_stages_sets_the_cp_async_depth(stages, wgmma_mode, monkeypatch):
    """tl.range(..., num_stages=S) over a launch with num_stages=3: S-1 stages in flight, a commit
    group per loaded tile (A and B), so the loop waits with cp.async.wait_group 2·(S-2) — the count
    Triton's pipeliner emits and its test_tl_range_num_stages looks for (6 for S = 5)."""
    monkeypatch.setenv("BLOCKTUNE_WGMMA", wgmma_mode)
    sig = dict(A="*fp16", B="*fp16", C="*fp32", K="i32", stride_am="i32", stride_bk="i32", stride_cm="i32")
    ck = triton.compile(K.range_stages_matmul_kernel, signature=sig, constexprs=dict(BM=64, BN=64, BK=64, STAGES=stages),
                        num_warps=4, num_stages=3, target="sm_90a", divisible_by_16=tuple(sig))
    ptx = ck.asm["ptx"]
    assert re.findall(r"cp\.async\.wait_group\s+(\d+);", ptx) == [str(2 * (stages - 2)), "0"]
    assert ptx.count("cp.async.commit_group") == 2 * stages
    assert ck.metadata["shared"] >= stages * 2 * 64 * 64 * 2
    assembles(ptx)


def test_int8_accumulate_folds_into_the_dot():
    """`acc += tl.dot(a, b)` on int8 accumulates in the dot (Triton's combine pattern, as for floats):
    the loop is pipelined with the int32 accumulator in flight, no block add after the dot."""
    sig = dict(A="*i8", B="*i8", C="*i32", K="i32", stride_am="i32", stride_bn="i32")
    ck = triton.compile(K.int8_accumulate_kernel, signature=sig, constexprs=dict(BM=64, BN=64, BK=64), num_warps=4,
                        target="sm_90a", divisible_by_16=tuple(sig))
    dots = [line for line in ck.asm["ir"].splitlines() if " = dot(" in line]
    assert len(dots) == 1 and not re.search(r"= add\(%" + re.search(r"%(\w+) = dot", dots[0]).group(1) + r"\b",
                                             ck.asm["ir"])
    ptx = ck.asm["ptx"]
    assert re.search(S8_WGMMA, ptx) and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    assert re.search(r"cp\.async\.wait_group\s+2;", ptx)
    assembles(ptx)
