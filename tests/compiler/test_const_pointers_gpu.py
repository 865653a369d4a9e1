"""GPU runs of kernels with `tl.const` pointer parameters (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_const_pointers_gpu.py`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
from tests.compiler.kernels import const_pointers as K  # noqa: E402
from tests.compiler.kernels.gpu_util import gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [1, 1000, 65537])
def test_loads_through_const_pointer(gen, n):
    x = rand(gen, (n,), torch.float32)
    out = poisoned((n,), torch.float32)
    K.scale_kernel[(triton.cdiv(n, 256),)](x, out, n, 2.5, BLOCK=256)
    torch.testing.assert_close(out, x * 2.5, rtol=0, atol=0)


@pytest.mark.parametrize("choose_x", [False, True])
def test_compile_time_choice(choose_x):
    x, out = torch.full((1,), 3.0, device="cuda"), torch.full((1,), 5.0, device="cuda")
    K.constexpr_choice_kernel[(1,)](x, out, CHOOSE_X=choose_x)
    assert out.item() == (4.0 if choose_x else 6.0)
