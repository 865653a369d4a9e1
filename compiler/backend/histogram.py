"""Rule for `tl.histogram`: counts in shared memory, one atomic add per element that its thread owns."""
from __future__ import annotations

from llvmlite import ir as ll

from .llvm_types import I32, is_signed


def lower_histogram(lw, op):
    x, mask = op.operands
    res = op.result
    nb = op.attrs["num_bins"]
    b = lw.b
    lay = lw.layout_of(x)
    vals = lw.block(x, lay)
    masks = lw.block(mask, lay) if mask is not None else None
    lw.smem_bytes = max(lw.smem_bytes, 4 * nb)
    lw.barrier()
    lw.each_thread_share(nb, lambda p: b.store(ll.Constant(I32, 0), lw.smem_ptr(b.mul(p, ll.Constant(I32, 4))), align=4))
    lw.barrier()
    owner = lw.owner_pred(lay)  # replicated copies of an element count once
    signed = is_signed(x.dtype)
    for r, v in enumerate(vals):
        if v.type.width < 32:
            v = b.sext(v, I32) if signed else b.zext(v, I32)
        # one unsigned compare checks 0 <= v < nb for signed values too
        ok = b.icmp_unsigned("<", v, ll.Constant(v.type, nb))
        if masks is not None:
            ok = b.and_(ok, masks[r])
        if owner is not None:
            ok = b.and_(ok, owner)
        with b.if_then(ok):
            i = b.trunc(v, I32) if v.type.width > 32 else v
            b.atomic_rmw("add", lw.smem_ptr(b.mul(i, ll.Constant(I32, 4))), ll.Constant(I32, 1), "monotonic")
    lw.barrier()
    out_lay = lw.want(res)
    lw.set_block(res, out_lay, lw.smem_read(out_lay, I32, 4))
