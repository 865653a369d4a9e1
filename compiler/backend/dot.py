"""The `dot` rule: tensor cores (mma.sync, mma.py; wgmma, wgmma.py) where dot_layouts.py says they
fit, else FMAs from shared memory.

Operands that arrive in registers are written to swizzled shared-memory tiles (`write_tile`) and
read back by the tensor-core instructions; the pipeline (pipeline.py) fills the tiles with cp.async
instead and calls `dot_from_tiles` directly.
"""
from __future__ import annotations

import copy

from llvmlite import ir as ll

from ..language import dtypes as T
from . import fp8, mma, pinned_tma, small_dot, wgmma
from .errors import BackendError
from .dot_layouts import PINNED_LIMIT, SmemTile, mma_kind, operand_cdim, operand_tiles, uses_wgmma
from .layouts import dot_operand
from .llvm_types import F32, F64, I32, esize, is_signed, lty, mty
from .smem_tiles import write_tile
from . import split_precision


def check_dot_shapes(fn) -> None:
    """Triton's min_dot_size on CUDA: K >= 32 for 8-bit operands, K >= 16 for the others (M or N
    under 16 run padded on the tensor cores, small_dot.py, or as FMA dots). The front end accepts
    smaller K because interpret mode runs them."""
    for op in fn.walk_with_dropped():    # an unused dot too, as Triton checks it when it is written
        if op.name == "dot":
            a = op.operands[0]
            why = dot_shape_problem(a.shape[-2:], op.result.shape[-1], a.dtype.primitive_bitwidth)
            if why:
                raise BackendError(why, op.loc) from ValueError(why)


def dot_shape_problem(a_shape, n: int, bitwidth: int) -> str | None:
    """Why a dot of A (`a_shape`, M x K) and B (K x `n`) of `bitwidth`-bit elements cannot run on an
    NVIDIA GPU, or None."""
    (m, k), k_min = a_shape, (32 if bitwidth == 8 else 16)
    got = f"got M={m}, N={n}, K={k} (smaller dots run in interpret mode only)"
    if k < k_min:   # Triton's words
        return f"Input shapes should have M >= 1, N >= 1 and K >= {k_min} for tl.dot of {bitwidth}-bit inputs, {got}"
    return None




def lower_dot(lw, op):
    """FMA dot: A and B go to shared memory (row-major), then for each k every thread loads the
    A values of its C rows and the B values of its C columns (vectorized along k for A and along n
    for B) and does the outer-product FMAs. Register use stays at acc + a few operands.
    fp16/bf16/fp8/int8 (and fp32 as tf32) dots go to tensor cores instead (mma.py, wgmma.py; padded
    where M or N is under 16, small_dot.py), fp32 as tf32x3/bf16x3/bf16x6 to several tf32 or bf16
    ones (split_precision.py)."""
    padded = small_dot.padded_kind(op)
    if padded is not None:
        return small_dot.lower_padded_dot(lw, op, padded)
    if split_precision.is_split_kind(mma_kind(op)):
        return split_precision.lower_split_dot(lw, op, mma_kind(op))
    if mma_kind(op) is not None:
        return lower_tensor_core_dot(lw, op)
    a, bv, c = op.operands
    res = op.result
    m, n = res.shape
    k = a.shape[1]
    cl = lw.want(res)
    al, bl = dot_operand(cl, 0, k), dot_operand(cl, 1, k)
    b = lw.b
    odt, adt = res.dtype, a.dtype
    if adt.is_floating():
        acc_t = F64 if odt.name == "fp64" or adt.name == "fp64" else F32
        up = (lambda x: b.fpext(x, acc_t) if x.type != acc_t else x)
        fma = lambda x, y, z: lw.call(f"llvm.fma.{'f64' if acc_t == F64 else 'f32'}", acc_t, [x, y, z])  # noqa: E731
    else:
        acc_t = I32
        up = (lambda x: b.sext(x, I32) if is_signed(adt) else b.zext(x, I32)) if adt.primitive_bitwidth < 32 else (lambda x: x)
        fma = lambda x, y, z: b.add(b.mul(x, y), z)  # noqa: E731
    if adt.is_fp8():  # A and B may be different fp8 kinds: each decoded exactly to fp32
        up_a = lambda x: fp8.to_float(lw, x, adt, T.float32)  # noqa: E731
        up_b = lambda x: fp8.to_float(lw, x, bv.dtype, T.float32)  # noqa: E731
    else:
        up_a = up_b = up
    C = lw.block(c, cl)
    acc = [x if x.type == acc_t else (b.fpext(x, acc_t) if adt.is_floating() else x) for x in C]
    mta, esa = mty(adt), esize(adt)
    mtb, esb = mty(bv.dtype), esize(bv.dtype)
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    a_regs, b_regs = lw.block(a, a_lay), lw.block(bv, b_lay)
    off_b = (m * k * esa + 15) // 16 * 16
    lw.smem_bytes = max(lw.smem_bytes, off_b + k * n * esb)
    lw.barrier()
    lw.smem_write(a_regs, a_lay, mta, esa)
    lw.smem_write(b_regs, b_lay, mtb, esb, base_elems=off_b // esb)
    lw.barrier()
    tA, tAm = lw.thread_flat(al)
    tB, tBm = lw.thread_flat(bl)
    coords = [cl.reg_coord(r) for r in range(cl.n_regs)]
    m_parts = sorted({mm for mm, _ in coords})
    n_parts = sorted({nn for _, nn in coords})
    kv = 1
    while kv * 2 <= k and kv * 2 * esa <= 16 and not (tAm & (kv * 2 - 1)):
        kv *= 2
    # runs of consecutive n owned by one thread → vector loads of B rows
    runs, i = [], 0
    while i < len(n_parts):
        j = i
        while j + 1 < len(n_parts) and n_parts[j + 1] == n_parts[j] + 1:
            j += 1
        start, length = n_parts[i], j - i + 1
        while length:
            v = 1
            while v * 2 <= length and v * 2 * esb <= 16 and start % (v * 2) == 0 and not (tBm & (v * 2 - 1)):
                v *= 2
            runs.append((start, v))
            start, length = start + v, length - v
        i = j + 1

    def vload(elem_off, count, mt, es):
        ptr = lw.smem_ptr(b.mul(elem_off, ll.Constant(I32, es)))
        if count == 1:
            return [b.load(ptr, typ=mt, align=es)]
        vv = b.load(ptr, typ=ll.VectorType(mt, count), align=es * count)
        return [b.extract_element(vv, ll.Constant(I32, j)) for j in range(count)]
    for k0 in range(0, k, kv):
        avals = {}
        for mm in m_parts:
            vals = vload(lw.combine_const(tA, tAm, al.flat((mm, k0))), kv, mta, esa)
            avals[mm] = [up_a(x) for x in vals]
        for kk in range(kv):
            kx = k0 + kk
            bvals = {}
            for start, v in runs:
                vals = vload(lw.combine_const(tB, tBm, bl.flat((kx, start)) + off_b // esb), v, mtb, esb)
                for j, x in enumerate(vals):
                    bvals[start + j] = up_b(x)
            for r, (mm, nn) in enumerate(coords):
                acc[r] = fma(avals[mm][kk], bvals[nn], acc[r])
    if lty(odt) != acc_t:
        acc = [b.fptrunc(x, lty(odt)) for x in acc]
    lw.set_block(res, cl, acc)


# ---- tensor cores ----------------------------------------------------------------------------


def lower_tensor_core_dot(lw, op):
    """Register operands → shared memory (between two barriers) → mma.sync or wgmma. Operands that
    a loop pinned in shared memory (pin_loop_invariant_operands) are not written again; wgmma takes
    A straight from registers when it is held in an accumulator layout (wgmma.a_from_registers)."""
    kind = mma_kind(op)
    a, bv = op.operands[0], op.operands[1]
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    on_wgmma = uses_wgmma(op, lw.options)
    pinned = [lw.pinned_tiles.get((id(op), i)) for i in (0, 1)]
    a_in_regs = on_wgmma and pinned[0] is None and wgmma.a_from_registers(op, a_lay, lw.options)
    ta, tb = operand_tiles(op, a_lay, b_lay, lw.options)
    if a_in_regs or pinned[0] is not None:   # B alone in the transient space
        tb = SmemTile(tb.shape, tb.cdim, tb.es, base=0, panels=on_wgmma)
    ta = _rebased(lw, pinned[0]) if pinned[0] is not None else (None if a_in_regs else ta)
    tb = _rebased(lw, pinned[1]) if pinned[1] is not None else tb
    writes = [(x, lay, t) for x, lay, t, pin in ((a, a_lay, ta, pinned[0]), (bv, b_lay, tb, pinned[1]))
              if t is not None and pin is None]
    mt = I32 if kind == "tf32" else lty(a.dtype)
    for _, _, t in writes:
        lw.smem_bytes = max(lw.smem_bytes, t.base + t.nbytes)
    values = [lw.block(x, lay) for x, lay, _ in writes]
    values = [_as_tile_values(lw, regs, kind) for regs in values]
    lw.barrier()
    for (_, lay, t), vals in zip(writes, values):
        write_tile(lw, vals, lay, t, mt)
    if on_wgmma:
        wgmma.proxy_fence(lw)
    lw.barrier()
    if a_in_regs:
        wgmma.dot_from_tiles(lw, op, None, tb, a_regs=lw.block(a, a_lay))
    else:
        dot_from_tiles(lw, op, ta, tb)


def _tile_values(lw, x, lay, kind):
    return _as_tile_values(lw, lw.block(x, lay), kind)


def _as_tile_values(lw, regs, kind):
    if kind == "tf32":   # round once, at the write (cvt.rna.tf32.f32), and keep the bits as i32
        return [lw.call("llvm.nvvm.f2tf32.rna", I32, [r]) for r in regs]
    return regs


def _rebased(lw, tile: SmemTile) -> SmemTile:
    """A pinned tile (absolute base) as seen from the current start of the transient space."""
    t = copy.copy(tile)
    t.base = tile.base - lw.smem_reserved
    return t


def pin_loop_invariant_operands(lw, loop, defer_tma_waits: bool = False) -> list:
    """Tensor-core dots in `loop`'s body whose operand is defined before the loop (attention's Q,
    the backward's K and V): write that operand into its own shared-memory tile once, before the
    loop, and keep the tile for the loop's duration — instead of keeping the block in registers and
    writing it again on every trip (a kernel-level value's tile stays for the rest of the kernel).
    A tile whose copy is still landing (pinned_tma.py) is waited for here, or by the caller
    (defer_tma_waits: pipeline.pipelined_loop, after its prologue's copies).
    Returns the keys to release with unpin()."""
    body = loop.regions[0]
    inside = {a.id for a in body.args}
    dots = []
    for o in body.walk():
        inside.update(r.id for r in o.results)
        if o.name == "dot" and mma_kind(o) is not None and not split_precision.is_split_kind(mma_kind(o)):
            dots.append(o)
    keys = []
    top = set(lw.fn.body.ops)
    for o in dots:
        on_wgmma = uses_wgmma(o, lw.options)
        for i in (0, 1):
            x = o.operands[i]
            if x.id in inside or (id(o), i) in lw.pinned_tiles:
                continue
            # a block landing straight in its pinned tile (pinned_tma.py) has no registers
            lay = lw.layout_of(x) if x.id in lw.vals else lw.want(x)
            if i == 0 and on_wgmma and wgmma.a_from_registers(o, lay, lw.options):
                continue
            # a value of the kernel's top level holds one block per program: pinned by a loop of
            # the top level too (so that the write runs before everything after it), its tile serves
            # every later loop (tutorial 06's causal forward: Q in both loops), and its registers
            # die at the first write
            kernel_level = (x.owner is None or x.owner in top) and loop in top
            if (x.owner is None or x.owner in top) and x.id in lw.kernel_pins:
                lw.pinned_tiles[(id(o), i)] = lw.kernel_pins[x.id]
                keys.append((id(o), i))
                continue
            kind = mma_kind(o)
            es = 4 if kind == "tf32" else x.dtype.itemsize
            start = lw.smem_reserved
            tile = SmemTile(x.shape, operand_cdim(o, i, lay), es, base=start, panels=on_wgmma)
            if start + tile.nbytes > PINNED_LIMIT:
                continue
            lw.smem_bytes = max(lw.smem_bytes, start - lw.smem_reserved + tile.nbytes)
            lw.barrier()
            write_tile(lw, _tile_values(lw, x, lay, kind), lay, _rebased(lw, tile), I32 if kind == "tf32" else lty(x.dtype))
            if on_wgmma:
                wgmma.proxy_fence(lw)
            lw.pinned_tiles[(id(o), i)] = tile
            # kept a multiple of 1024 bytes: tiles placed after it need 1024-byte-aligned bases
            # (the swizzle is a function of the address)
            lw.smem_reserved = (start + tile.nbytes + 1023) // 1024 * 1024
            if kernel_level:
                lw.kernel_pins[x.id] = tile
                lw.kernel_pins_end = lw.smem_reserved
            keys.append((id(o), i))
    if not defer_tma_waits:
        pinned_tma.wait_pending(lw)
    return keys


def unpin(lw, keys: list, reserved_before: int, barrier: bool = True):
    """The loop is done: its pinned tiles' space goes back to the transient uses after it, once
    every warp is past the loop (the bar.sync here, or one the caller has just made)."""
    if barrier:
        lw.barrier()
    for k in keys:
        del lw.pinned_tiles[k]
    lw.smem_reserved = max(reserved_before, lw.kernel_pins_end)


def dot_from_tiles(lw, op, ta: SmemTile, tb: SmemTile, dyn_base=None):
    """The dot over operand tiles already in shared memory (`dyn_base`: an i32 byte offset added
    to both tiles' bases, e.g. the pipeline stage): wgmma, waited for at once, or mma.sync."""
    if uses_wgmma(op, lw.options):
        return wgmma.dot_from_tiles(lw, op, ta, tb, dyn_base)
    return mma.dot_from_tiles(lw, op, ta, tb, dyn_base)
