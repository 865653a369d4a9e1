"""`triton._C.libtriton.nvidia.cublas.CublasLt` (`pytest -m gpu`): cuBLASLt's c = a @ b.T against
torch in float64, for fp16, bf16, fp32 (TF32) and fp8 e4m3, and `gemm`'s alpha/beta.

Fresh random inputs each run (seed printed), outputs poisoned with NaN before the call.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from compiler._C.libtriton import nvidia  # noqa: E402

from tests.compiler.kernels.util import gen  # noqa: E402,F401 - the fixture

pytestmark = pytest.mark.gpu
DEV = "cuda"
# (rtol, atol) of the output against float64: one rounding to the output type, fp32 accumulation
TOL = {torch.float16: (4e-3, 2e-2), torch.bfloat16: (1e-2, 0.1), torch.float32: (5e-3, 5e-2)}



@pytest.fixture(scope="module")
def cublas():
    workspace = torch.empty(32 * 1024 * 1024, device=DEV, dtype=torch.uint8)
    return nvidia.cublas.CublasLt(workspace)


def _nan(shape, dtype):
    return torch.full(shape, float("nan"), device=DEV, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("M,N,K", [(64, 128, 64), (192, 80, 136), (1024, 512, 2048)])
def test_matmul_is_a_times_b_transposed(cublas, gen, dtype, M, N, K):
    a = torch.randn((M, K), generator=gen).to(DEV, dtype)
    b = torch.randn((N, K), generator=gen).to(DEV, dtype)
    c = _nan((M, N), dtype)
    cublas.matmul(a, b, c)
    ref = a.double() @ b.double().T
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(c.double(), ref, rtol=rtol, atol=atol * (K / 64) ** 0.5)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8_e4m3fn")
def test_fp8_matmul(cublas, gen):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89+")
    M, N, K = 256, 128, 512
    a = (torch.randn((M, K), generator=gen) * 0.5).to(DEV).to(torch.float8_e4m3fn)
    b = (torch.randn((N, K), generator=gen) * 0.5).to(DEV).to(torch.float8_e4m3fn)
    c = torch.full((M, N), 0x7F, device=DEV, dtype=torch.uint8).view(torch.float8_e4m3fn)   # NaN bytes
    cublas.matmul(a, b, c)
    ref = a.double() @ b.double().T
    # the output is e4m3 (3 mantissa bits: half an ulp is 1/16 relative)
    torch.testing.assert_close(c.double(), ref, rtol=0.07, atol=0.02)


def test_gemm_alpha_beta(cublas, gen):
    M, N, K = 128, 96, 256
    a = torch.randn((M, K), generator=gen).to(DEV, torch.float16)
    b = torch.randn((N, K), generator=gen).to(DEV, torch.float16)
    c = torch.randn((M, N), generator=gen).to(DEV, torch.float16)
    d = _nan((M, N), torch.float16)
    cublas.gemm(a, b, c, d, 0.5, 2.0)
    ref = 0.5 * (a.double() @ b.double().T) + 2.0 * c.double()
    torch.testing.assert_close(d.double(), ref, rtol=4e-3, atol=4e-2)


def test_runs_on_torchs_current_stream(cublas, gen):
    a = torch.randn((512, 512), generator=gen).to(DEV, torch.float16)
    c = _nan((512, 512), torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cublas.matmul(a, a, c)
        got = c.double()                     # ordered after the matmul on the same stream
    torch.cuda.synchronize()
    torch.testing.assert_close(got, a.double() @ a.double().T, rtol=4e-3, atol=0.06)


def test_bad_operands_are_clear_errors(cublas):
    a = torch.zeros((64, 32), device=DEV, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="B needs to be transposed"):
        cublas.matmul(a, torch.zeros((32, 64), device=DEV, dtype=torch.float16),
                      torch.zeros((64, 64), device=DEV, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="data types do not match"):
        cublas.matmul(a, a, torch.zeros((64, 64), device=DEV, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        x = torch.zeros((64, 32), device=DEV, dtype=torch.float64)
        cublas.matmul(x, x, torch.zeros((64, 64), device=DEV, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="contiguous"):
        t = torch.zeros((32, 64), device=DEV, dtype=torch.float16).T
        cublas.matmul(t, t, torch.zeros((64, 64), device=DEV, dtype=torch.float16))
