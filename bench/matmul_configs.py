"""The configs `bench/matmul.py --configs extended` adds to the tutorial's 16, for both autotuners.

Hopper tiles the tutorial's list lacks or has only one of: two warpgroups (8 warps) on 64×256,
128×256 and 256×128 tiles at 3 and 4 stages, 128×128 with 8 warps, BLOCK_K 32 with 8 warps (less
shared memory per stage, more stages), a wider L2 grouping (GROUP_SIZE_M 16) for the large tiles,
and narrow-N, long-K tiles for the decode shapes (M = 1, 16), where the grid is small. Every entry
fits the H100's 227 KiB of shared memory: (BM·BK + BK·BN) · 2 bytes · stages.
"""
from __future__ import annotations


def _c(bm, bn, bk, warps, stages, group=8):
    return ({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group}, warps, stages)


EXTENDED = [
    _c(128, 256, 64, 8, 4), _c(256, 128, 64, 8, 3), _c(256, 128, 64, 8, 4), _c(64, 256, 64, 8, 3), _c(64, 256, 64, 8, 4),
    _c(128, 128, 64, 8, 4), _c(128, 256, 32, 8, 5), _c(64, 256, 32, 8, 5),
    _c(128, 256, 64, 8, 3, group=16), _c(256, 128, 64, 8, 3, group=16),
    _c(64, 64, 128, 4, 4), _c(64, 32, 128, 4, 4),
]

SMEM_LIMIT = 227 * 1024
assert all((kw["BLOCK_SIZE_M"] + kw["BLOCK_SIZE_N"]) * kw["BLOCK_SIZE_K"] * 2 * s <= SMEM_LIMIT for kw, _, s in EXTENDED)
