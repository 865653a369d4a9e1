"""Triton's random numbers: the Philox counter-based generator (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC'11) with Triton's rounds (10), constants and conversions, so a
kernel gets the same bits as under Triton for the same seed and offsets.

32-bit offsets run Philox4x32 keyed by the seed's two 32-bit halves; 64-bit offsets run Philox4x64
keyed by (seed, 0). Written in kernel Python: the front end inlines these where they are called.
"""
from . import core as tl
from .dtypes import int32, int64, uint32, uint64
from .library import library

N_ROUNDS_DEFAULT = 10


@library
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """`n_rounds` Philox rounds on the counter (c0, c1, c2, c3) with the key (k0, k1)."""
    if c0.dtype == uint32:
        KEY_A: tl.constexpr = 0x9E3779B9   # golden ratio
        KEY_B: tl.constexpr = 0xBB67AE85   # sqrt(3) - 1
        ROUND_A: tl.constexpr = 0xD2511F53
        ROUND_B: tl.constexpr = 0xCD9E8D57
    else:
        tl.static_assert(c0.dtype == uint64, "philox counters must be uint32 or uint64")
        KEY_A: tl.constexpr = 0x9E3779B97F4A7C15
        KEY_B: tl.constexpr = 0xBB67AE8584CAA73B
        ROUND_A: tl.constexpr = 0xD2E7470EE14C6C93
        ROUND_B: tl.constexpr = 0xCA5A826395121157
    for _ in tl.static_range(n_rounds):
        prev0, prev2 = c0, c2
        c0 = tl.umulhi(ROUND_B, prev2) ^ c1 ^ k0
        c2 = tl.umulhi(ROUND_A, prev0) ^ c3 ^ k1
        c1 = ROUND_B * prev2
        c3 = ROUND_A * prev0
        k0 = k0 + KEY_A
        k1 = k1 + KEY_B
    return c0, c1, c2, c3


@library
def philox(seed, c0, c1, c2, c3, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """Philox on the counter (c0, c1, c2, c3) keyed by an integer `seed` (a number or a scalar)."""
    seed = tl.to_tensor(seed)
    tl.static_assert(seed.dtype.is_int(), "the seed of tl.rand/randn/randint/philox must be an integer")
    seed = seed.to(uint64)
    c0 = tl.to_tensor(c0)
    if c0.dtype.primitive_bitwidth == 32:
        word = uint32
        k0 = (seed & 0xFFFFFFFF).to(uint32)
        k1 = ((seed >> 32) & 0xFFFFFFFF).to(uint32)
    else:
        tl.static_assert(c0.dtype.primitive_bitwidth == 64, "philox offsets must be 32- or 64-bit integers")
        word = uint64
        k0 = seed
        k1 = tl.full((1, ), 0, dtype=uint64)
    c0 = c0.to(word, bitcast=True)
    c1 = tl.to_tensor(c1).to(word, bitcast=True)
    c2 = tl.to_tensor(c2).to(word, bitcast=True)
    c3 = tl.to_tensor(c3).to(word, bitcast=True)
    return philox_impl(c0, c1, c2, c3, k0, k1, n_rounds)


@library
def randint4x(seed, offset, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of random uint32 for a seed and a block of offsets. As in Triton 3.6 the counter
    is 32-bit words: a 64-bit offset gives its low and high words (c0, c1), so an int64 offset
    below 2**32 draws the same numbers as the int32 one."""
    offset_lo = offset.to(uint32)
    zero = offset_lo * 0
    if offset.dtype.primitive_bitwidth > 32:
        offset_hi = (offset >> 32).to(uint32)
    else:
        offset_hi = zero
    return philox(seed, offset_lo, offset_hi, zero, zero, n_rounds)


@library
def randint(seed, offset, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """A block of random unsigned integers (the first of randint4x's four)."""
    ret, _, _, _ = randint4x(seed, offset, n_rounds)
    return ret


@library
def uint_to_uniform_float(x):
    """Random 32- or 64-bit integers → float32 uniform in [0, 1) (never 1.0)."""
    if x.dtype == uint32 or x.dtype == int32:
        x = x.to(int32, bitcast=True)
        scale = 4.6566127342e-10     # the largest s with (2**31 - 1) * s < 1 in float32
    else:
        tl.static_assert(x.dtype == uint64 or x.dtype == int64, "uint_to_uniform_float takes 32- or 64-bit integers")
        x = x.to(int64, bitcast=True)
        scale = 1.0842020432385337e-19
    x = tl.where(x < 0, -x - 1, x)
    return x * scale


@library
def rand(seed, offset, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """A block of float32 uniform in [0, 1)."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@library
def rand4x(seed, offsets, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of float32 uniform in [0, 1)."""
    i1, i2, i3, i4 = randint4x(seed, offsets, n_rounds)
    return uint_to_uniform_float(i1), uint_to_uniform_float(i2), uint_to_uniform_float(i3), uint_to_uniform_float(i4)


@library
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two uniform blocks → two independent standard normal blocks."""
    u1 = tl.maximum(1.0e-7, u1)
    th = 6.283185307179586 * u2
    r = tl.sqrt(-2.0 * tl.log(u1))
    return r * tl.cos(th), r * tl.sin(th)


@library
def randn(seed, offset, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """A block of float32 drawn from the standard normal distribution."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    n1, _ = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


@library
def randn4x(seed, offset, n_rounds: tl.constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of float32 drawn from the standard normal distribution."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(u1, u2)
    n3, n4 = pair_uniform_to_normal(u3, u4)
    return n1, n2, n3, n4
