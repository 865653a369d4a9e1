"""The TMA box of a tensor descriptor: the rules the front end (does this descriptor go through the
bulk tensor copy engine?), the backend (the shared-memory tile it lands in) and the launcher (the
CUtensorMap it encodes) must agree on.

A block [b0, …, b(n-1)] of e-byte elements lands in shared memory as the 2-D tile
[b0·…·b(n-2), b(n-1)] of backend/dot_layouts.SmemTile with panels: the last dim cut into panels of
`swizzle` bytes (128, or the whole row when shorter), each panel the rows one after the other,
16-byte chunks swizzled by the hardware's pattern of that width — exactly what wgmma's descriptors
read. One TMA copy fills one panel, so the tensor map's box is [panel_cols, b(n-2), …, b0]
(innermost first) with that swizzle, and a load or store issues b(n-1) / panel_cols copies — and
b0 / 256 times that where b0 exceeds a box dim's 256: the box then holds 256 of it (row chunks,
as Triton splits such blocks).
Rows shorter than 32 bytes (16) are copied unswizzled.
"""
from __future__ import annotations

MAX_BOX = 256          # each box dim (cuTensorMapEncodeTiled)
MIN_RANK, MAX_RANK = 2, 5   # 1-D maps: the driver refused a [64]-box fp16 map on the H100 (untried otherwise)
# a block goes through one shared-memory tile: larger ones (e.g. a 128×256 fp32 store) stay
# bounds-checked accesses rather than crowd out the pipeline stages or exceed the 227 KiB
MAX_TILE_BYTES = 64 * 1024
TARGETS = ("sm_90", "sm_90a")


def swizzle_bytes(block: tuple, elt_bytes: int) -> int:
    """The swizzle width: 128, 64 or 32 bytes, or 16 (no swizzle) for 16-byte rows."""
    return min(block[-1] * elt_bytes, 128)


def panel_cols(block: tuple, elt_bytes: int) -> int:
    return swizzle_bytes(block, elt_bytes) // elt_bytes


def box(block: tuple, elt_bytes: int) -> tuple:
    """The tensor map's box, innermost dim first: a panel of the last dim, the leading dims whole
    but the first, which is cut to MAX_BOX (row_chunks copies)."""
    return (panel_cols(block, elt_bytes),) + tuple(reversed(block[1:-1])) + (min(block[0], MAX_BOX),)


def row_chunks(block: tuple) -> int:
    """Copies along the first dim per panel (the box holds at most MAX_BOX of it)."""
    return -(-block[0] // MAX_BOX)


def eligible(block: tuple, elt_bytes: int, target: str) -> bool:
    """Whether loads and stores through a host descriptor of this block use TMA on `target`
    (else they stay bounds-checked loads and stores)."""
    if (target or "").lower() not in TARGETS:
        return False
    if not MIN_RANK <= len(block) <= MAX_RANK or elt_bytes not in (1, 2, 4, 8):
        return False
    # the box's dims are capped, not the block's: its last dim is copied a panel at a time
    if any(b < 1 for b in block) or any(d > MAX_BOX for d in box(block, elt_bytes)):
        return False
    inner = block[-1] * elt_bytes
    rows = 1
    for b in block[:-1]:
        rows *= b
    if inner < 16 or rows * inner > MAX_TILE_BYTES:
        return False
    # several 128-byte panels: each starts where the hardware's swizzle pattern starts over (1024 bytes)
    return inner <= 128 or (inner % 128 == 0 and rows % 8 == 0)
