"""Rules for the shape ops that move values between the elements of a block: `tl.join`, `tl.split`."""
from __future__ import annotations

from llvmlite import ir as ll

from .layouts import scalar_layout
from .llvm_types import I32


def lower_join(lw, op, lay):
    """r[..., k] = (a, b)[k]: the operands in `lay` without its minor dim; a register whose minor
    coordinate depends on the thread picks between them with a select."""
    a, c = op.operands
    last = lay.rank - 1
    sl = lay.slice(last)
    if a.is_block:
        ra, rc = lw.block(a, sl), lw.block(c, sl)
    else:
        ra, rc = [lw.scalar(a)] * sl.n_regs, [lw.scalar(c)] * sl.n_regs
    idx = sl.reg_index_map()
    tv, tm = lw.thread_coord(lay, last)
    out = []
    for r in range(lay.n_regs):
        co = lay.reg_coord(r)
        j = idx[co[:-1]]
        if tv is None:
            out.append(rc[j] if co[-1] else ra[j])
        else:
            k = lw.combine_const(tv, tm, co[-1])
            out.append(lw.b.select(lw.b.icmp_unsigned("==", k, ll.Constant(I32, 0)), ra[j], rc[j]))
    return out


def lower_split(lw, op):
    """Bring x into a layout whose minor dim (size 2) is the first register bit over the results'
    layout: then r0 and r1 are the even and odd registers."""
    x = op.operands[0]
    r0, r1 = op.results
    out_lay = lw.want(r0) if r0.is_block else scalar_layout(lw.num_warps)
    regs = lw.block(x, out_lay.with_minor_pair())
    for k, res in enumerate((r0, r1)):
        vals = regs[k::2]
        if res.is_block:
            lw.set_block(res, out_lay, vals)
        else:
            lw.vals[res.id] = vals[0]
