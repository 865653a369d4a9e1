"""Layout conversions through shared memory go in chunks when the whole block would not fit: by the
top row-major offset bits both layouts keep in registers, and where that is not enough (the top bits
are a warp's), by lower register-only bits too — the thread part of the offsets then shifted past
them. Triton's test_simple_matmul with a float64 128x128 accumulator split into two halves for the
store (EPILOGUE_SUBTILE) asked 256 KiB of shared memory for that split's conversion before.

1. The conversion run on a model of one CTA (simt_model): every element arrives, in bounded space.
2. The kernel compiles for sm_90 within shared memory and assembles; on the GPU it is right.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import compiler as triton
from compiler import ptxas
from compiler.backend import pipeline
from compiler.backend.layouts import Layout
from compiler.backend.lowering import CONVERT_CHUNK_BYTES, Lowering
from compiler.language import dtypes as T
from simt_model import CTA, Value
from tests.compiler.kernels import subtile_epilogue as K


class ConvertingCTA(CTA):
    """The model CTA with the lowering's own conversion through shared memory."""
    smem_reserved = 0
    convert = Lowering.convert
    smem_write = Lowering.smem_write
    smem_read = Lowering.smem_read
    _smem_slots = Lowering._smem_slots
    _padded = Lowering._padded
    _vec_len = Lowering._vec_len
    _without_bits = Lowering._without_bits


# the split of the fp64 accumulator's halves (8 warps): the half index sits on lane bit 3 and goes
# into registers; the top offset bits are warp bits, so only lower register bits can chunk it
SPLIT_HAVE = Layout((128, 64, 2), reg=((0, 1, 0), (0, 2, 0), (0, 4, 0), (1, 0, 0), (2, 0, 0), (4, 0, 0)),
                    lane=((0, 8, 0), (0, 16, 0), (0, 32, 0), (0, 0, 1), (8, 0, 0)),
                    warp=((16, 0, 0), (32, 0, 0), (64, 0, 0)))
SPLIT_WANT = Layout((128, 64, 2), reg=((0, 0, 1), (0, 1, 0), (0, 2, 0), (0, 4, 0), (1, 0, 0), (2, 0, 0), (4, 0, 0)),
                    lane=((0, 8, 0), (0, 16, 0), (0, 32, 0), (0, 0, 0), (8, 0, 0)),
                    warp=((16, 0, 0), (32, 0, 0), (64, 0, 0)))


def run_convert(have, want, dt, seed=0):
    elems = np.random.default_rng(seed).integers(0, 1 << 40, size=have.shape, dtype=np.int64)
    cta = ConvertingCTA(have.num_warps)
    v, out = Value(0, have.shape, dt), Value(1, have.shape, dt)
    cta.put(v, have, elems)
    cta.set_block(out, want, cta.convert(cta.block(v, have), have, want, dt))
    np.testing.assert_array_equal(cta.elements(out), elems)
    return cta


def test_split_conversion_goes_in_chunks_of_lower_register_bits():
    cta = run_convert(SPLIT_HAVE, SPLIT_WANT, T.float64)
    assert cta.smem_bytes <= CONVERT_CHUNK_BYTES   # (the whole block: 128 KiB, 256 KiB padded)


@pytest.mark.parametrize("reserved", [0, 200 * 1024])
def test_a_conversion_that_fits_keeps_its_single_pass(reserved):
    """Chunks cost two barriers each: lower bits are taken only where the block would not fit
    beside what is reserved (here a [64, 64, 2] fp64 block, 64 KiB + padding)."""
    have = Layout((64, 64, 2), reg=SPLIT_HAVE.reg, lane=SPLIT_HAVE.lane, warp=((16, 0, 0), (32, 0, 0)))
    want = Layout((64, 64, 2), reg=SPLIT_WANT.reg, lane=SPLIT_WANT.lane, warp=((16, 0, 0), (32, 0, 0)))
    cta = ConvertingCTA(have.num_warps)
    cta.smem_reserved = reserved
    elems = np.arange(64 * 64 * 2, dtype=np.int64).reshape(64, 64, 2)
    v, out = Value(0, have.shape, T.float64), Value(1, have.shape, T.float64)
    cta.put(v, have, elems)
    cta.set_block(out, want, cta.convert(cta.block(v, have), have, want, T.float64))
    np.testing.assert_array_equal(cta.elements(out), elems)
    if reserved:
        assert cta.smem_bytes <= CONVERT_CHUNK_BYTES
    else:
        assert cta.smem_bytes > 64 * 1024


SIG = dict(A="*fp64", B="*fp64", C="*fp64", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
           stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")


@pytest.mark.parametrize("stages", [4, 2])
def test_fp64_subtile_matmul_fits_shared_memory(stages):
    """Triton's test_simple_matmul[False-True-8-1-128-128-16-4-float64-float64] (its kernel's shape)."""
    ones = ("stride_ak", "stride_bn", "stride_cn")
    ck = triton.compile(K.subtile_matmul_kernel, signature=SIG, num_warps=8, target="sm_90a",
                        constexprs=dict(BM=128, BN=128, BK=16, STAGES=stages),
                        divisible_by_16=tuple(n for n in SIG if n not in ones), equal_to_1=ones)
    assert ck.shared <= pipeline.SMEM_LIMIT
    rep = ptxas.report(ck.asm["ptx"], "sm_90a")
    assert re.search(r"Used \d+ registers", rep)


torch = pytest.importorskip("torch")

from tests.compiler.kernels.gpu_util import gen  # noqa: E402,F401


@pytest.mark.gpu
@pytest.mark.parametrize("dt,bm,bn,bk,nw", [(torch.float64, 128, 128, 16, 8), (torch.float64, 64, 128, 32, 4),
                                            (torch.float32, 128, 128, 32, 8)])
def test_subtile_matmul_gpu(gen, dt, bm, bn, bk, nw):
    from tests.compiler.kernels.gpu_util import poisoned, rand
    g = gen
    M, N, Kd = 2 * bm, 3 * bn, 4 * bk
    a, b = rand(g, (M, Kd), dt), rand(g, (Kd, N), dt)
    c = poisoned((M, N), dt)
    K.subtile_matmul_kernel[(M // bm * (N // bn),)](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                                    c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, STAGES=4, num_warps=nw)
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    tol = 1e-12 if dt == torch.float64 else 2e-2   # fp32 operands: tf32 by default
    torch.testing.assert_close(c.double(), want, rtol=tol, atol=tol * Kd ** 0.5)
