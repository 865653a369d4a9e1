"""tl.philox/randint/randint4x/rand/rand4x/randn/randn4x: the same bits as Triton for the same seed
and offsets, checked against an independent Philox (philox_reference.py, itself checked against
Random123's known answers) in interpret mode and, marked `gpu`, on the GPU (there also against
Triton's own tl.rand/randint when triton is importable)."""
from __future__ import annotations

import secrets

import numpy as np
import pytest
import torch

import compiler as triton
import compiler.language as tl
from tests.compiler import philox_reference as ref
from tests.compiler.kernels import random_kernels as K
from tests.compiler.kernels.util import interpret, poisoned  # noqa: F401

SEEDS = [0, 42, 0xFFFFFFFF, 0x0000000FCAFEB0BA, 2**63 - 1]
WORDS = {32: (np.uint32, np.int32, torch.int32, tl.uint32), 64: (np.uint64, np.int64, torch.int64, tl.uint64)}


@pytest.fixture
def rng():
    seed = secrets.randbits(32)
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def random_words(rng, width, n):
    return [int(v) for v in rng.integers(0, 2**width, n, dtype=np.uint64)]


def run_philox(rows, key, width, device="cpu"):
    """tl.philox_impl on each 4-word counter in `rows` with `key`, in one block."""
    npt, signed, store, word = WORDS[width]
    c = torch.from_numpy(np.array(rows, dtype=npt).view(signed).ravel().copy()).to(device)
    k = torch.from_numpy(np.array(key, dtype=npt).view(signed).copy()).to(device)
    out = torch.full((4 * len(rows),), -7, dtype=store, device=device)
    K.philox_block_kernel[(1,)](c, k, out, BLOCK=len(rows), WORD=word)
    return [tuple(int(v) for v in r) for r in out.cpu().numpy().view(npt).reshape(len(rows), 4)]


def run_randint(seed, n, width, device="cpu", const_seed=False, block=128):
    _, _, store, _ = WORDS[width]
    x = torch.full((n,), -7, dtype=store, device=device)
    kernel = K.randint_const_seed_kernel if const_seed else K.randint_kernel
    kernel[(triton.cdiv(n, block),)](x, n, seed, BLOCK=block)
    return x.cpu().numpy().view(WORDS[width][0])


def run_rand(kernel, seed, n, width, device="cpu", block=128):
    x = torch.full((n,), float("nan"), device=device)
    kernel[(triton.cdiv(n, block),)](x, n, seed, OFFSET_DTYPE=tl.int32 if width == 32 else tl.int64, BLOCK=block)
    return x.cpu().numpy()


def test_reference_matches_random123_known_answers(rng):
    for width, counter, key, expected in ref.KNOWN_ANSWERS:
        assert ref.philox(counter, key, width) == expected
    # the vectorized 32-bit reference agrees with the scalar one
    rows = [tuple(random_words(rng, 32, 4)) for _ in range(64)]
    key = tuple(random_words(rng, 32, 2))
    blocks = ref.philox32_blocks(np.array(rows, dtype=np.uint64).T, key)
    assert [tuple(int(v) for v in col) for col in blocks.T] == [ref.philox(r, key, 32) for r in rows]


# ---- interpret mode ---------------------------------------------------------------------------

@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("width", [32, 64])
def test_philox_known_answers(width):
    for w, counter, key, expected in ref.KNOWN_ANSWERS:
        if w == width:
            assert run_philox([counter] * 2, key, width) == [expected] * 2


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("width", [32, 64])
def test_philox_random_counters_and_key(width, rng):
    rows = [tuple(random_words(rng, width, 4)) for _ in range(16)]
    key = tuple(random_words(rng, width, 2))
    assert run_philox(rows, key, width) == [ref.philox(r, key, width) for r in rows]


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("const_seed", [False, True])
def test_randint(width, seed, const_seed):
    n = 300  # three programs, the last one masked
    got = run_randint(seed, n, width, const_seed=const_seed)
    np.testing.assert_array_equal(got, ref.randint4x(seed, np.arange(n), width)[0])


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("base", [0, 2**32 - 8, 2**32, 3 * 2**40 + 5])
def test_randint_of_64_bit_offsets_counts_with_both_words(base):
    """Triton 3.6: an int64 offset is (low word, high word) of a Philox4x32 counter, so offsets
    under 2**32 draw what int32 offsets draw, and offsets past it differ by their high word."""
    x = torch.full((64,), -7, dtype=torch.int64)
    K.randint_far_offsets_kernel[(1,)](x, base, 1234, BLOCK=64)
    offsets = np.arange(base, base + 64, dtype=np.uint64)
    np.testing.assert_array_equal(x.numpy(), ref.randint4x(1234, offsets.view(np.int64), 64)[0].astype(np.int64))
    if base + 64 <= 2**32:
        np.testing.assert_array_equal(x.numpy(), ref.randint4x(1234, offsets, 32)[0].astype(np.int64))


@pytest.mark.usefixtures("interpret")
def test_randint4x_with_a_seed_loaded_at_run_time(rng):
    seed = int(rng.integers(0, 2**31))
    n = 200
    x = poisoned((4 * n,), torch.int32)
    K.randint4x_kernel[(triton.cdiv(n, 64),)](x, n, torch.tensor([seed], dtype=torch.int64), BLOCK=64)
    np.testing.assert_array_equal(x.numpy().view(np.uint32).reshape(4, n), ref.randint4x(seed, np.arange(n), 32))


@pytest.mark.usefixtures("interpret")
def test_rand_with_a_block_of_seeds(rng):
    seeds = rng.integers(0, 2**40, 64, dtype=np.int64)
    x = poisoned((64,), torch.float32)
    K.rand_block_seed_kernel[(1,)](x, torch.from_numpy(seeds), BLOCK=64)
    expected = [ref.uniform(ref.randint4x(int(s), [i], 32)[0])[0] for i, s in enumerate(seeds)]
    np.testing.assert_array_equal(x.numpy(), np.array(expected, dtype=np.float32))


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("seed", [0, 124, 0xFFFFFFFF])
def test_rand_bit_exact(width, seed):
    n = 1000
    got = run_rand(K.rand_kernel, seed, n, width)
    expected = ref.uniform(ref.randint4x(seed, np.arange(n), width)[0])
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert (got >= 0).all() and (got < 1).all()


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("width", [32, 64])
def test_randn(width, rng):
    seed = int(rng.integers(0, 2**40))
    n = 4096
    got = run_rand(K.randn_kernel, seed, n, width)
    words = ref.randint4x(seed, np.arange(n), width)
    z, _ = ref.normal_pair(ref.uniform(words[0]), ref.uniform(words[1]))
    np.testing.assert_allclose(got, z, rtol=1e-5, atol=1e-5)
    assert abs(got.mean()) < 0.06 and abs(got.std() - 1) < 0.06


@pytest.mark.usefixtures("interpret")
def test_rand4x_randn4x(rng):
    seed = int(rng.integers(0, 2**31))
    n = 256
    u, z = poisoned((4 * n,), torch.float32), poisoned((4 * n,), torch.float32)
    K.rand4x_randn4x_kernel[(triton.cdiv(n, 128),)](u, z, n, seed, BLOCK=128)
    uniforms = ref.uniform(ref.randint4x(seed, np.arange(n), 32))
    np.testing.assert_array_equal(u.numpy().reshape(4, n), uniforms)
    pairs = ref.normal_pair(uniforms[0], uniforms[1]) + ref.normal_pair(uniforms[2], uniforms[3])
    np.testing.assert_allclose(z.numpy().reshape(4, n), np.stack(pairs), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_uniform_never_reaches_one(dtype):
    info = torch.iinfo(dtype)
    out = poisoned((2,), torch.float32)
    K.uniform_limits_kernel[(1,)](torch.tensor([info.min, info.max], dtype=dtype), out, n=2)
    assert out[0] == out[1]
    assert 1.0 - torch.finfo(torch.float32).eps <= out[0].item() < 1.0


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("seed", [torch.zeros(1, dtype=torch.int32), 2.3])
def test_seed_must_be_an_integer(seed):
    with pytest.raises(triton.CompilationError, match="seed .* must be an integer"):
        K.rand_any_seed_kernel[(1,)](torch.empty(2), seed)


# ---- GPU ----------------------------------------------------------------------------------------

def _triton():
    try:
        import triton as real_triton  # noqa: PLC0415 - optional: only where Triton is installed
        import triton.language as real_tl  # noqa: PLC0415
    except ImportError:
        return None
    return real_triton, real_tl


@pytest.mark.gpu
@pytest.mark.parametrize("width", [32, 64])
def test_gpu_philox_known_answers_and_random_counters(width, rng):
    for w, counter, key, expected in ref.KNOWN_ANSWERS:
        if w == width:
            assert run_philox([counter] * 4, key, width, "cuda") == [expected] * 4
    rows = [tuple(random_words(rng, width, 4)) for _ in range(128)]
    key = tuple(random_words(rng, width, 2))
    assert run_philox(rows, key, width, "cuda") == [ref.philox(r, key, width) for r in rows]


@pytest.mark.gpu
@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("seed", SEEDS)
def test_gpu_randint_rand_randn(width, seed):
    n = 5000
    words = ref.randint4x(seed, np.arange(n), width)
    for const_seed in (False, True):
        np.testing.assert_array_equal(run_randint(seed, n, width, "cuda", const_seed, block=1024), words[0])
    u = run_rand(K.rand_kernel, seed, n, width, "cuda", block=1024)
    np.testing.assert_array_equal(u.view(np.uint32), ref.uniform(words[0]).view(np.uint32))
    z = run_rand(K.randn_kernel, seed, n, width, "cuda", block=1024)
    # the GPU's log and sqrt are the approximate instructions (as Triton's): an absolute margin
    # covers u1 near 1, where sqrt(-2 log u1) magnifies log's absolute error
    np.testing.assert_allclose(z, ref.normal_pair(ref.uniform(words[0]), ref.uniform(words[1]))[0], rtol=1e-4, atol=1e-3)

    real = _triton()
    if real is not None:  # Triton's own generator, same seed and offsets, in the same test
        rt, rtl = real

        @rt.jit
        def triton_rand(X, Y, N, seed, BLOCK: rtl.constexpr):
            offset = rtl.program_id(0) * BLOCK + rtl.arange(0, BLOCK)
            rtl.store(X + offset, rtl.randint(seed, offset), mask=offset < N)
            rtl.store(Y + offset, rtl.rand(seed, offset), mask=offset < N)

        if width == 32:
            x = torch.empty(n, dtype=torch.int32, device="cuda")
            y = torch.empty(n, device="cuda")
            triton_rand[(triton.cdiv(n, 1024),)](x, y, n, seed, BLOCK=1024)
            np.testing.assert_array_equal(x.cpu().numpy().view(np.uint32), words[0])
            np.testing.assert_array_equal(y.cpu().numpy().view(np.uint32), u.view(np.uint32))
