"""Triton's tutorial 04 (low-memory dropout) in interpret mode and, marked `gpu`, on the GPU: the
mask of seeded dropout is tl.rand(seed, offset) > p bit for bit (philox_reference.py), so the same
seed reproduces it and another seed changes it."""
from __future__ import annotations

import secrets

import numpy as np
import pytest
import torch

import compiler as triton
from tests.compiler import philox_reference as ref
from tests.compiler.kernels import dropout as K
from tests.compiler.kernels.util import interpret, poisoned  # noqa: F401


@pytest.fixture
def gen():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def expected_keep(seed, n, p):
    return ref.uniform(ref.randint4x(seed, np.arange(n), 32)[0]) > np.float32(p)


def seeded_dropout(x, p, seed, block=1024):
    out = torch.full_like(x, float("nan"))
    n = x.numel()
    K.seeded_dropout_kernel[(triton.cdiv(n, block),)](x, out, n, p, seed, BLOCK_SIZE=block)
    return out


def check_dropout(x, out, keep, p):
    x, out = x.cpu().double(), out.cpu().double()
    keep = torch.as_tensor(keep)
    assert torch.equal(out != 0, keep & (x != 0)), "the kept elements are not tl.rand(seed, offset) > p"
    torch.testing.assert_close(out[keep], x[keep] / (1 - np.float32(p)), rtol=3e-7, atol=0)
    assert (out[~keep] == 0).all()


@pytest.mark.usefixtures("interpret")
def test_dropout_with_stored_mask(gen):
    n, p = 1000, 0.5
    x = torch.randn(n, generator=gen)
    keep = torch.rand(n, generator=gen) > p
    out = poisoned((n,), torch.float32)
    K.dropout_kernel[(triton.cdiv(n, 256),)](x, keep, out, n, p, BLOCK_SIZE=256)
    check_dropout(x, out, keep.numpy(), p)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("p", [0.25, 0.5, 0.9])
def test_seeded_dropout(p, gen):
    n = 3000
    x = torch.randn(n, generator=gen) + 5  # no zeros: a zero output means dropped
    seed = secrets.randbits(31)
    out = seeded_dropout(x, p, seed, block=512)
    keep = expected_keep(seed, n, p)
    check_dropout(x, out, keep, p)
    assert abs(keep.mean() - (1 - p)) < 0.05
    assert torch.equal(seeded_dropout(x, p, seed, block=256), out), "the same seed must give the same mask"
    assert not torch.equal(seeded_dropout(x, p, seed + 1, block=512), out)


@pytest.mark.usefixtures("interpret")
def test_seeded_dropout_one_seed_per_row(gen):
    rows, cols, p = 4, 200, 0.5
    x = torch.randn(rows, cols, generator=gen) + 5
    seeds = torch.randint(0, 2**31 - 1, (rows,), generator=gen, dtype=torch.int64)
    out = torch.full_like(x, float("nan"))
    K.seeded_dropout_rows_kernel[(rows,)](x, out, seeds, cols, x.stride(0), p, BLOCK_SIZE=256)
    for r in range(rows):
        check_dropout(x[r], out[r], expected_keep(int(seeds[r]), cols, p), p)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [98432, 1 << 22])
def test_gpu_seeded_dropout(n):
    p, seed = 0.5, secrets.randbits(31)
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, device="cuda", generator=g) + 5
    out = seeded_dropout(x, p, seed)
    check_dropout(x, out, expected_keep(seed, n, p), p)
    keep = torch.rand(n, device="cuda", generator=g) > p
    masked = torch.full_like(x, float("nan"))
    K.dropout_kernel[(triton.cdiv(n, 1024),)](x, keep, masked, n, p, BLOCK_SIZE=1024)
    check_dropout(x, masked, keep.cpu().numpy(), p)
