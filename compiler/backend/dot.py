"""The `dot` rule: tensor cores (mma.sync, mma.py; wgmma, wgmma.py) where dot_layouts.py says they
fit, else FMAs from shared memory.

Operands that arrive in registers are written to swizzled shared-memory tiles (`write_tile`) and
read back by the tensor-core instructions; the pipeline (pipeline.py) fills the tiles with cp.async
instead and calls `dot_from_tiles` directly.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..language import dtypes as T
from . import fp8, mma, wgmma
from .errors import BackendError
from .dot_layouts import SmemTile, mma_kind, operand_tiles, tiles_end, uses_wgmma
from .layouts import dot_operand
from .llvm_types import F32, F64, I32, esize, is_signed, lty, mty
from .smem_tiles import write_tile


def check_dot_shapes(fn) -> None:
    """NVIDIA's dots need every dim ≥ 16 (Triton's min_dot_size on CUDA); the front end accepts
    smaller ones because interpret mode runs them."""
    for op in fn.walk():
        if op.name == "dot":
            (m, k), n = op.operands[0].shape, op.result.shape[1]
            if min(m, n, k) < 16:
                raise BackendError(f"tl.dot: every dimension must be at least 16 on NVIDIA GPUs, got M={m}, N={n}, K={k} "
                                   "(smaller dots run in interpret mode only)", op.loc)


def lower_dot(lw, op):
    """FMA dot: A and B go to shared memory (row-major), then for each k every thread loads the
    A values of its C rows and the B values of its C columns (vectorized along k for A and along n
    for B) and does the outer-product FMAs. Register use stays at acc + a few operands.
    fp16/bf16/fp8 (and fp32 as tf32) dots go to tensor cores instead (mma.py, wgmma.py)."""
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
    """Register operands → shared memory (between two barriers) → mma.sync or wgmma."""
    kind = mma_kind(op)
    a, bv = op.operands[0], op.operands[1]
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    a_regs, b_regs = lw.block(a, a_lay), lw.block(bv, b_lay)
    ta, tb = operand_tiles(op, a_lay, b_lay, lw.options)
    if kind == "tf32":   # round once, at the write (cvt.rna.tf32.f32), and keep the bits as i32
        a_regs = [lw.call("llvm.nvvm.f2tf32.rna", I32, [x]) for x in a_regs]
        b_regs = [lw.call("llvm.nvvm.f2tf32.rna", I32, [x]) for x in b_regs]
        mt = I32
    else:
        mt = lty(a.dtype)
    lw.smem_bytes = max(lw.smem_bytes, tiles_end(ta, tb))
    lw.barrier()
    write_tile(lw, a_regs, a_lay, ta, mt)
    write_tile(lw, b_regs, b_lay, tb, mt)
    if uses_wgmma(op, lw.options):
        wgmma.proxy_fence(lw)
    lw.barrier()
    dot_from_tiles(lw, op, ta, tb)


def dot_from_tiles(lw, op, ta: SmemTile, tb: SmemTile, dyn_base=None):
    """The dot over operand tiles already in shared memory (`dyn_base`: an i32 byte offset added
    to both tiles' bases, e.g. the pipeline stage): wgmma, waited for at once, or mma.sync."""
    if uses_wgmma(op, lw.options):
        return wgmma.dot_from_tiles(lw, op, ta, tb, dyn_base)
    return mma.dot_from_tiles(lw, op, ta, tb, dyn_base)
