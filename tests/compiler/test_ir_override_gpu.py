"""GPU runs of Triton's `ir_override` (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_ir_override_gpu.py`): the copy kernel launched with the PTX, LLVM
IR or cubin of a times-ten kernel computes ten times its input, as Triton's test_override_ptx."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
from compiler import ptxas  # noqa: E402
from tests.compiler.kernels import ir_override as K  # noqa: E402
from tests.compiler.kernels.gpu_util import gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu
N = 1000


def _override(tmp_path, stage):
    asm = K.times_ten_stages("sm_90a")
    f = tmp_path / f"k.{stage}"
    if stage == "ptx":
        f.write_text(K.as_tritons_ptx(asm["ptx"]))
    elif stage == "llir":
        f.write_text(asm["llir"].replace("times_ten", "_kernel"))
    else:
        f.write_bytes(ptxas.assemble(asm["ptx"].replace("times_ten", "_kernel"), "sm_90a"))
    return str(f)


@pytest.mark.parametrize("stage", ["ptx", "llir", "cubin"])
def test_a_launch_runs_the_override(gen, tmp_path, stage):
    src = rand(gen, (N,), torch.float32)
    dst = poisoned((N,), torch.float32)
    K._kernel[(triton.cdiv(N, 32),)](dst, src, N, BLOCK_SIZE=32, ir_override=_override(tmp_path, stage))
    torch.testing.assert_close(dst, src * 10)
    plain = poisoned((N,), torch.float32)
    K._kernel[(triton.cdiv(N, 32),)](plain, src, N, BLOCK_SIZE=32)
    assert torch.equal(plain, src)


@pytest.mark.parametrize("in_kwargs", [True, False])
def test_an_autotune_config_carries_it(gen, tmp_path, in_kwargs):
    path = _override(tmp_path, "ptx")
    config = triton.Config({"BLOCK_SIZE": 32, "ir_override": path}) if in_kwargs else \
        triton.Config({"BLOCK_SIZE": 32}, ir_override=path)
    tuned = triton.autotune([config], key=["N"])(triton.JITFunction(K._kernel.fn))
    src = rand(gen, (N,), torch.float32)
    dst = poisoned((N,), torch.float32)
    tuned[lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE"]),)](dst, src, N=N)
    torch.testing.assert_close(dst, src * 10)
