"""Block values into and out of swizzled shared-memory tiles (dot_layouts.SmemTile), each thread's
registers in vectors of up to 16 bytes: the dot's register operands (dot.py) and the epilogue's
buffer (fragment_convert.py) go through these."""
from __future__ import annotations

from llvmlite import ir as ll

from .dot_layouts import SmemTile, register_groups
from .layouts import Layout
from .llvm_types import I32


def tile_ptr(lw, off, tile: SmemTile):
    """The shared-memory pointer of element offset `off` (an i32) of the tile."""
    b = lw.b
    byte = b.mul(off, ll.Constant(I32, tile.es))
    return lw.smem_ptr(b.add(byte, ll.Constant(I32, tile.base)) if tile.base else byte)


def read_tile(lw, lay: Layout, tile: SmemTile, mt) -> list:
    """This thread's registers of `lay` from the swizzled tile, in vectors of up to 16 bytes
    (consecutive registers that stay consecutive in the tile)."""
    b = lw.b
    es = tile.es
    lane_off, warp_off, reg_off = tile.layout_offsets(lay)
    tv, tm = lw.linear(lane_off, warp_off)
    v = tile.vector_width(reg_off, tm)
    out = []
    for _, c in register_groups(reg_off, lay.n_regs, v):
        ptr = tile_ptr(lw, lw.combine_const(tv, tm, c), tile)
        if v == 1:
            out.append(b.load(ptr, typ=mt, align=es))
        else:
            vec = b.load(ptr, typ=ll.VectorType(mt, v), align=es * v)
            out.extend(b.extract_element(vec, ll.Constant(I32, j)) for j in range(v))
    return out


def write_tile(lw, vals: list, lay: Layout, tile: SmemTile, mt: ll.Type):
    """Store a block held in `lay` into the swizzled tile (vectorized along the contiguous dim)."""
    b = lw.b
    es = tile.es
    lane_off, warp_off, reg_off = tile.layout_offsets(lay)
    tv, tm = lw.linear(lane_off, warp_off)
    tmask = 0
    for o in lane_off + warp_off:
        tmask |= o
    v = tile.vector_width(reg_off, tmask)
    for g, c in register_groups(reg_off, lay.n_regs, v):
        ptr = tile_ptr(lw, lw.combine_const(tv, tm, c), tile)
        if v == 1:
            val = vals[g]
        else:
            val = ll.Constant(ll.VectorType(mt, v), None)
            for j in range(v):
                val = b.insert_element(val, vals[g + j], ll.Constant(I32, j))
        b.store(val, ptr, align=es * v)
