"""fp16 × fp16 → fp16 `tl.dot` (fp16 accumulators on the tensor cores) on the GPU (`pytest -m gpu`):
Triton's test_dot cases with fp16 outputs and K loops carrying an fp16 `acc`, against torch's
float64 product, within the error fp16 accumulation may make (about an fp16 ulp of the partial sum
at each k16 step, whatever the rounding: f16_accumulation_bound). Fresh random inputs each run (seed
printed), outputs poisoned with NaN. PTX-side and interpret-mode tests: test_f16_accumulator.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
from tests.compiler.kernels import dot_precisions as LK  # noqa: E402
from tests.compiler.kernels import f16_acc as K  # noqa: E402
from tests.compiler.kernels.gpu_util import gen, poisoned, rand  # noqa: E402,F401
from tests.compiler.test_f16_accumulator import (BASE, EPILOGUES, MIXED, ULP, epilogue_flags,  # noqa: E402
                                                  f16_accumulation_bound as bound)

pytestmark = pytest.mark.gpu

def operand(g, shape, col_major: bool):
    """fp16 in [-1, 1), stored column-major when `col_major` (a transposed view)."""
    if col_major:
        return rand(g, shape[::-1], torch.float16).T
    return rand(g, shape, torch.float16)


def check(got, want, tol):
    assert not got.isnan().any()
    err = (got.double() - want).abs()
    assert (err <= tol).all(), f"max error {err.max().item():.4g}, max bound {tol.max().item():.4g}"


def run_tile_case(g, M, N, Kd, nw, col_a, col_b, epilogue):
    x, y = operand(g, (M, Kd), col_a), operand(g, (Kd, N), col_b)
    w = rand(g, (N, N), torch.float16)
    z0 = 1 + 0.1 * rand(g, (M, N), torch.float16)
    if epilogue == "trans":   # Z column-major: its transposed strides
        z = poisoned((N, M), torch.float16).T
    elif epilogue in ("add-matrix", "add-rows", "add-cols"):
        z = z0.clone()
    else:
        z = poisoned((M, N), torch.float16)
    K.f16_dot_kernel[(1,)](x, x.stride(0), x.stride(1), y, y.stride(0), y.stride(1), w, w.stride(0), w.stride(1),
                           z, z.stride(0), z.stride(1), BM=M, BN=N, BK=Kd, num_warps=nw, **epilogue_flags(epilogue))
    torch.cuda.synchronize()
    want, tol = x.double() @ y.double(), bound(x, y)
    extra = {"add-matrix": z0.double(), "add-rows": z0.double()[:, :1], "add-cols": z0.double()[:1, :]}.get(epilogue)
    if extra is not None:   # one more fp16 rounding
        want = want + extra
        tol = tol + ULP * (want.abs() + tol)
    if epilogue == "chain-dot":   # the first product rounded to fp16, then @ W accumulated in fp16
        z16 = want.half()
        want, tol = z16.double() @ w.double(), bound(z16, w) + (tol + ULP * want.abs()) @ w.double().abs()
    check(z, want, tol)


@pytest.mark.parametrize("M,N,Kd,nw,inst_n", MIXED)
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, False), (False, True), (True, True)])
def test_mixed_sizes_f16_accumulator_gpu(gen, M, N, Kd, nw, inst_n, col_a, col_b):
    run_tile_case(gen, M, N, Kd, nw, col_a, col_b, "none")


@pytest.mark.parametrize("M,N,Kd,nw,inst_n", BASE)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_epilogues_f16_accumulator_gpu(gen, M, N, Kd, nw, inst_n, epilogue):
    run_tile_case(gen, M, N, Kd, nw, False, False, epilogue)


@pytest.mark.parametrize("M,N,Kd,bm,bn,bk,nw", [(256, 256, 512, 128, 128, 64, 4), (300, 260, 256, 128, 256, 64, 8),
                                                (200, 136, 320, 64, 64, 32, 4), (96, 80, 200, 32, 64, 64, 2)])
def test_f16_accumulator_loop_gpu(gen, M, N, Kd, bm, bn, bk, nw):
    """A masked K loop carrying an fp16 acc (pipelined; on wgmma one group in flight across
    iterations)."""
    a, b = rand(gen, (M, Kd), torch.float16), rand(gen, (Kd, N), torch.float16)
    c = poisoned((M, N), torch.float16)
    LK.loop_dot_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0),
                                                                 b.stride(1), c.stride(0), c.stride(1), BM=bm, BN=bn,
                                                                 BK=bk, PREC="ieee", num_warps=nw)
    torch.cuda.synchronize()
    check(c, a.double() @ b.double(), bound(a, b))


@pytest.mark.skipif(bool(__import__("os").environ.get("BLOCKTUNE_WGMMA")), reason="already a re-run")
def test_f16_accumulator_on_mma_sync_gpu(tmp_path):
    """The loops and the chained dots again with BLOCKTUNE_WGMMA=0 (mma.sync's fp16 accumulators at
    the wgmma-sized tiles too), in a child process with an empty compile cache (the switch is read at
    compile time)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, BLOCKTUNE_WGMMA="0", BLOCKTUNE_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "gpu", "-p", "no:cacheprovider",
                        "-k", "loop or chain-dot or 128-256", __file__], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    tail = (p.stdout + p.stderr)[-6000:]
    print(tail)
    assert p.returncode == 0, tail
