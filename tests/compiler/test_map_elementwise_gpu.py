"""GPU runs of tl.map_elementwise against torch (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_map_elementwise_gpu.py`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import map_elementwise as K  # noqa: E402
from tests.compiler.kernels.gpu_util import DEV, gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("BLOCK,nw", [(1, 1), (128, 4), (1024, 8)])
def test_branching_scalar_function(gen, BLOCK, nw):
    K.run_compare(torch, rand, poisoned, gen, DEV, BLOCK, nw)


@pytest.mark.parametrize("M,N,nw", [(16, 32, 4), (64, 128, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_broadcast_arguments_and_scalar(gen, M, N, nw, dtype):
    K.run_selu_2d(torch, rand, poisoned, gen, DEV, M, N, dtype, nw)


@pytest.mark.parametrize("BLOCK,pack,nw", [(512, 1, 4), (512, 2, 4), (32, 4, 1), (2, 4, 1), (4096, 4, 8)])
def test_multiple_results_and_pack(gen, BLOCK, pack, nw):
    K.run_divmod(torch, rand, poisoned, gen, DEV, BLOCK, pack, nw)
