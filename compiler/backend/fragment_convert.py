"""Layout conversions out of a tensor-core accumulator through swizzled shared memory (the epilogue).

A dot's result lives in the m16n8 fragment layout (mma.sync and wgmma alike: a thread holds two
adjacent columns of row g and of row g+8, repeated over n8 tiles), so only 4 bytes of a 16-bit
result are contiguous per thread. Stored in that layout, a tile goes out in scattered 4-byte
stores; the generic conversion (Lowering.convert) moves it through a row-major buffer instead, but
writes it with one `st.shared.b32` per register pair, and lanes g = 0…7 (rows 256 bytes apart for
a 128-wide fp16 tile) all hit the same four banks: 8-way conflicts.

Here the buffer is an XOR-swizzled tile (dot_layouts.SmemTile, `panels=False`: the 16-byte chunk c
of row r sits at c ^ (r / per_phase) % max_phase), in which both sides are conflict-free:
  write  16-bit results on sm_90: `stmatrix.m8n8.x4` — one instruction stores four 8×8 matrices of
         the fragment, each matrix row one 16-byte chunk (lanes 8q…8q+7 give the rows of matrix q);
         elsewhere (sm_80, 32-bit results) vector stores of the adjacent pair, spread over the banks
         by the swizzle
  read   the wanted layout (the store's: 16 bytes per thread along the row) with `ld.shared.v4`
so each warp then writes whole 128-byte rows with `st.global.v4` (Triton's epilogue; it writes with
`st.shared.v4` and reads back with `ldmatrix`, the mirror image). The buffer reuses the dynamic
shared memory of the K loop's stages, which are free once the loop has drained. The other direction
(a tile added to the accumulator, `acc += tl.load(C)`) stays on the generic conversion: through
this buffer it made ptxas spill a small tf32 dot (32×32×16, 4 warps).
"""
from __future__ import annotations

import re

from llvmlite import ir as ll

from .dot_layouts import SmemTile, register_groups
from .layouts import Layout
from .llvm_types import I32, esize, mty
from .smem_tiles import read_tile, tile_ptr, write_tile

# the lanes of the m16n8 accumulator fragment (PTX ISA "Matrix fragments for mma.m16n8k16"): lanes
# 0-1 pick the column pair, lanes 2-4 the row
FRAGMENT_LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))


def is_fragment(lay: Layout) -> bool:
    """An mma/wgmma accumulator layout: adjacent column pairs in registers, the fragment's lanes,
    and every other register and warp bit a move by whole 8×8 blocks."""
    return (lay.rank == 2 and bool(lay.reg) and lay.reg[0] == (0, 1) and lay.lane == FRAGMENT_LANES
            and all(r % 8 == 0 and c % 8 == 0 for r, c in lay.reg[1:] + lay.warp))


def has_stmatrix(target: str) -> bool:
    """stmatrix is sm_90's (PTX 7.8)."""
    digits = re.match(r"sm_(\d+)", (target or "").lower())
    return digits is not None and int(digits.group(1)) >= 90


def stmatrix_applies(lay: Layout, es: int, target: str) -> bool:
    """16-bit values held in the fragment layout go into a 16-byte-swizzled tile with stmatrix
    (the conversion here, and a TMA store's tile: tma.py)."""
    return es == 2 and is_fragment(lay) and has_stmatrix(target)


def applies(have: Layout, want: Layout, dt, smem_free: int) -> bool:
    """This conversion handles `have` → `want` of dtype `dt` (else the generic one does, which can
    go in chunks): the whole tile fits the shared memory already there or the chunk bound."""
    if dt.is_ptr() or dt.name == "int1" or esize(dt) not in (2, 4):
        return False
    if not is_fragment(have) or is_fragment(want) or have.shape != want.shape:
        return False
    rows, cols = have.shape
    return cols * esize(dt) >= 16 and rows >= 8 and rows * cols * esize(dt) <= smem_free


def scratch_tile(shape: tuple, es: int) -> SmemTile:
    return SmemTile(shape, 1, es, base=0, panels=False)


def convert(lw, regs: list, have: Layout, want: Layout, dt, stmatrix: bool) -> list:
    """`regs` (held in the fragment layout `have`) in layout `want`, through the swizzled buffer."""
    es = esize(dt)
    mt = mty(dt)
    tile = scratch_tile(have.shape, es)
    lw.smem_bytes = max(lw.smem_bytes, tile.nbytes)
    lw.barrier()
    if stmatrix and es == 2:
        write_stmatrix(lw, regs, have, tile)
    else:
        write_tile(lw, regs, have, tile, mt)
    lw.barrier()
    return read_tile(lw, want, tile, mt)


def write_stmatrix(lw, regs: list, have: Layout, tile: SmemTile) -> None:
    """stmatrix.sync.aligned.m8n8.x{1,2,4}: register word w (the pair 2w, 2w+1) of every lane is
    element pair (lane % 4) of row lane / 4 of an 8×8 matrix; a group of 2^q words is 2^q such
    matrices, and lane l gives the address of row l % 8 of matrix l / 8 — the coordinate of word
    bits picked by lane bits 3-4 plus row l % 8, which the swizzle keeps a whole 16-byte chunk."""
    b = lw.b
    word_bits = list(have.reg[1:])          # each register word's coordinate bits
    q = min(2, len(word_bits))              # matrices per instruction: 2^q
    mat_bits, rest_bits = word_bits[:q], word_bits[q:]
    # lanes 0-2: the matrix row; lanes 3-4: which matrix (absent matrices: the address of matrix 0)
    lane_coords = ((1, 0), (2, 0), (4, 0)) + tuple(mat_bits) + ((0, 0),) * (2 - q)
    lane_off = tuple(tile.offset(c) for c in lane_coords)
    warp_off = tuple(tile.offset(c) for c in have.warp)
    tv, tm = lw.linear(lane_off, warp_off)
    rest_off = [tile.offset(c) for c in rest_bits]
    n = 1 << q
    text = (f"stmatrix.sync.aligned.m8n8.x{n}.shared.b16 [$0], {{"
            + ", ".join(f"${i + 1}" for i in range(n)) + "};")
    pair = ll.VectorType(regs[0].type, 2)
    fty = ll.FunctionType(ll.VoidType(), [ll.IntType(32)] + [I32] * n)
    asm = ll.InlineAsm(fty, text, ",".join(["r"] + ["r"] * n), side_effect=True)
    words_per_group = n
    for grp, c in register_groups(rest_off, len(regs) // (2 * words_per_group), 1):
        off = lw.combine_const(tv, tm, c)
        addr = b.ptrtoint(tile_ptr(lw, off, tile), I32)
        words = []
        for w in range(words_per_group):
            r0 = 2 * (grp * words_per_group + w)
            v = ll.Constant(pair, None)
            v = b.insert_element(v, regs[r0], ll.Constant(I32, 0))
            v = b.insert_element(v, regs[r0 + 1], ll.Constant(I32, 1))
            words.append(b.bitcast(v, I32))
        b.call(asm, [addr] + words)
