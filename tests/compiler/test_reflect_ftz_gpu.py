"""GPU results of the enable_reflect_ftz option (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_reflect_ftz_gpu.py`): denormal results flushed to zero or kept."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import reflect_ftz as K  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("ftz", [False, True])
def test_exp2_denormal_result(ftz):
    x = torch.full((128,), -127.0, device="cuda")      # 2**-127: below the smallest normal float
    y = torch.full((128,), float("nan"), device="cuda")
    K.exp2_kernel[(1,)](x, y, BLOCK=128, enable_reflect_ftz=ftz)
    if ftz:
        assert torch.all(y == 0.0), y[:4]
    else:   # kept as a denormal: ex2.approx is within a few ulp of 2**-127 there, not exact (the H100's answer)
        assert torch.all(y > 0), y[:4]
        torch.testing.assert_close(y, torch.full_like(y, 2.0 ** -127), rtol=1e-5, atol=0)


@pytest.mark.parametrize("ftz", [None, False])
def test_libdevice_keeps_denormals(ftz):
    x = torch.full((128,), 1e-40, device="cuda")       # sin(x) == x for a denormal x
    y = torch.full((128,), float("nan"), device="cuda")
    kw = {} if ftz is None else {"enable_reflect_ftz": ftz}
    K.sin_kernel[(1,)](x, y, BLOCK=128, **kw)
    assert torch.all(y == x), y[:4]
