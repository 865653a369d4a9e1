"""An independent Philox4x32-10 / Philox4x64-10 (Salmon et al., SC'11; Random123's philox.h),
written from the published algorithm and checked against Random123's known-answer vectors: the
reference for tl.randint/rand/randn. Python integers throughout: slow, obviously right."""
from __future__ import annotations

import numpy as np

# (multipliers M0, M1; Weyl key increments W0, W1) per word width
CONSTANTS = {
    32: (0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85),
    64: (0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B),
}

# Random123 kat_vectors: (width, counter, key, expected) for 10 rounds
KNOWN_ANSWERS = [
    (32, (0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (32, (0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (32, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    (64, (0, 0, 0, 0), (0, 0),
     (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)),
    (64, (2**64 - 1,) * 4, (2**64 - 1,) * 2,
     (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0)),
]


def philox(counter, key, width=32, rounds=10):
    """One Philox block: 4 counter words, 2 key words → 4 random words."""
    m0, m1, w0, w1 = CONSTANTS[width]
    mask = (1 << width) - 1
    x0, x1, x2, x3 = (int(c) & mask for c in counter)
    k0, k1 = (int(k) & mask for k in key)
    for r in range(rounds):
        if r:  # the key schedule: a Weyl sequence, bumped before every round but the first
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * x0, m1 * x2
        x0, x1, x2, x3 = (p1 >> width) ^ x1 ^ k0, p1 & mask, (p0 >> width) ^ x3 ^ k1, p0 & mask
    return x0, x1, x2, x3


def philox32_blocks(counters, key, rounds=10):
    """Philox4x32 over many counters at once: counters is (4, n) uint32, key two ints. The same
    algorithm as `philox` in numpy uint64 (32×32-bit products fit), for large tests."""
    m0, m1, w0, w1 = (np.uint64(c) for c in CONSTANTS[32])
    mask, shift = np.uint64(0xFFFFFFFF), np.uint64(32)
    x0, x1, x2, x3 = (np.asarray(c, dtype=np.uint64) for c in counters)
    k0, k1 = np.uint64(key[0] & 0xFFFFFFFF), np.uint64(key[1] & 0xFFFFFFFF)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * x0, m1 * x2
        x0, x1, x2, x3 = (p1 >> shift) ^ x1 ^ k0, p1 & mask, (p0 >> shift) ^ x3 ^ k1, p0 & mask
    return np.stack([x0, x1, x2, x3]).astype(np.uint32)


def randint4x(seed: int, offsets, width=32):
    """tl.randint4x(seed, offsets) for a 1-D array of `width`-bit offsets: a (4, n) array of uint32.
    Philox4x32 keyed by the seed's low and high halves; the counter is (offset's low word, its high
    word for 64-bit offsets else 0, 0, 0), as in Triton 3.6."""
    seed &= 2**64 - 1
    offsets = np.asarray(offsets).ravel().astype(np.int64).astype(np.uint64)
    counters = np.zeros((4, offsets.size), dtype=np.uint64)
    counters[0] = offsets & np.uint64(0xFFFFFFFF)
    if width == 64:
        counters[1] = offsets >> np.uint64(32)
    return philox32_blocks(counters, (seed & 0xFFFFFFFF, seed >> 32))


def uniform(words):
    """tl.uint_to_uniform_float: fold the signed value onto [0, 2**(n-1)) and scale, in float32."""
    signed = words.view(np.int32 if words.dtype == np.uint32 else np.int64)
    folded = np.where(signed < 0, -signed - 1, signed)
    scale = np.float32(4.6566127342e-10) if words.dtype == np.uint32 else np.float32(1.0842020432385337e-19)
    return folded.astype(np.float32) * scale


def normal_pair(u1, u2):
    """Box-Muller in float64 (the kernels compute it in float32)."""
    u1 = np.maximum(np.float64(1.0e-7), u1.astype(np.float64))
    r = np.sqrt(-2.0 * np.log(u1))
    th = 2 * np.pi * u2.astype(np.float64)
    return r * np.cos(th), r * np.sin(th)
