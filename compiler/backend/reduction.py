"""Rules for reductions (`tl.sum`, `tl.max`, `tl.argmax`, …) and scans (`tl.cumsum`, …) along one axis.

In registers first, then across the lanes of a warp with shuffles, then across warps through shared
memory — the order of the layout's bits along the axis.
"""
from __future__ import annotations

import re

from llvmlite import ir as ll

from ..language import dtypes as T
from .errors import BackendError
from .layouts import Layout, blocked, default_layout
from .lowering import region_combiner
from .llvm_types import BF16, F16, F32, F64, FULL_MASK, I1, I8, I16, I32, I64, esize, fsuffix_of, is_signed, lty, mty


def component_bases(nbytes: list[int], align: int = 16) -> tuple[list[int], int]:
    """Byte offsets of a tuple's component arrays laid one after another in shared memory, each
    aligned (an int8 array of 2 bytes followed by int32 indices would put them at byte 2: a
    misaligned address at run time), and the bytes they take."""
    bases, end = [], 0
    for n in nbytes:
        end = (end + align - 1) // align * align
        bases.append(end)
        end += n
    return bases, end


def shfl(lw, x, mode: str, lane_arg):
    """shfl.sync.<mode> of any ≤64-bit value."""
    b = lw.b
    t = x.type
    if t == I32 or t == F32:
        sfx = "i32" if t == I32 else "f32"
        return lw.call(f"llvm.nvvm.shfl.sync.{mode}.{sfx}", t, [FULL_MASK, x, lane_arg, ll.Constant(I32, 31 if mode in ("bfly", "down", "idx") else 0)])
    if t == I64 or t == F64:
        iv = b.bitcast(x, I64) if t == F64 else x
        lo = b.trunc(iv, I32)
        hi = b.trunc(b.lshr(iv, ll.Constant(I64, 32)), I32)
        lo, hi = shfl(lw, lo, mode, lane_arg), shfl(lw, hi, mode, lane_arg)
        r = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ll.Constant(I64, 32)))
        return b.bitcast(r, F64) if t == F64 else r
    if isinstance(t, ll.IntType):
        r = shfl(lw, b.zext(x, I32), mode, lane_arg)
        return b.trunc(r, t)
    if t in (F16, BF16):
        r = shfl(lw, b.zext(b.bitcast(x, I16), I32), mode, lane_arg)
        return b.bitcast(b.trunc(r, I16), t)
    raise BackendError(f"shuffle of {t}")


def _combiner(lw, kind, dt):
    """Combine function over tuples (value,) or (value, index)."""
    b = lw.b
    fl = dt.is_floating()
    t = lty(dt)
    if kind in ("sum", "xor_sum", "max", "min", "prod"):
        def f(a, c):
            x, y = a[0], c[0]
            if kind == "sum":
                return (b.fadd(x, y) if fl else b.add(x, y),)
            if kind == "prod":
                return (b.fmul(x, y) if fl else b.mul(x, y),)
            if kind == "xor_sum":
                return (b.xor(x, y),)
            mx = kind == "max"
            if fl:
                return (lw.call(f"llvm.{'maxnum' if mx else 'minnum'}.{fsuffix_of(x.type)}", x.type, [x, y]),)
            if dt.name == "int1":
                return (b.or_(x, y) if mx else b.and_(x, y),)
            nm = ("smax" if mx else "smin") if is_signed(dt) else ("umax" if mx else "umin")
            return (lw.call(f"llvm.{nm}.i{dt.primitive_bitwidth}", t, [x, y]),)
        return f

    mx = kind == "argmax"

    def g(a, c):
        (va, ia), (vc, ic) = a, c
        if fl:
            better = b.fcmp_ordered(">" if mx else "<", vc, va)
            # NaN counts as the extreme (like torch.argmax)
            better = b.or_(better, b.and_(b.fcmp_unordered("uno", vc, vc), b.fcmp_ordered("ord", va, va)))
            eq = b.or_(b.fcmp_ordered("==", vc, va), b.and_(b.fcmp_unordered("uno", vc, vc), b.fcmp_unordered("uno", va, va)))
        else:
            sym = ">" if mx else "<"
            better = b.icmp_signed(sym, vc, va) if is_signed(dt) else b.icmp_unsigned(sym, vc, va)
            eq = b.icmp_signed("==", vc, va)
        take = b.or_(better, b.and_(eq, b.icmp_signed("<", ic, ia)))
        return (b.select(take, vc, va), b.select(take, ic, ia))
    return g


def _axis_bits(bases, axis):
    """(bits along axis, bits not along axis, mixed?)."""
    along, other, mixed = [], [], False
    for i, bb in enumerate(bases):
        a = bb[axis] != 0
        o = any(x for d, x in enumerate(bb) if d != axis)
        if a and o:
            mixed = True
        (along if a else other).append(i)
    return along, other, mixed


def _reduce_layout(lw, x, axis) -> Layout:
    lay = lw.layout_of(x)
    if any(_axis_bits(g, axis)[2] for g in (lay.reg, lay.lane, lay.warp)):
        lay = default_layout(x.shape, lw.num_warps)
    return lay


def lower_reduce(lw, op):
    x = op.operands[0]
    axis, kind = op.attrs["axis"], op.attrs["kind"]
    res = op.result
    dt = x.dtype
    lay = _reduce_layout(lw, x, axis)
    regs = lw.block(x, lay)
    b = lw.b
    arg = kind in ("argmax", "argmin")
    work_dt = dt
    if kind == "sum" and dt.name in ("fp16", "bf16"):
        work_dt = T.float32
        regs = [b.fpext(r, F32) for r in regs]
    comb = _combiner(lw, kind, work_dt)
    vals = [(r, lw.index(lay, axis, i)) if arg else (r,) for i, r in enumerate(regs)]
    acc, out_lay = _reduce_tuples(lw, lay, axis, vals, comb, [work_dt] + ([T.int32] if arg else []))
    outs = [a[1] if arg else a[0] for a in acc]
    if work_dt != dt and not arg:
        outs = [b.fptrunc(v, lty(dt)) for v in outs]
    if not res.is_block:
        lw.vals[res.id] = outs[0]
    else:
        lw.set_block(res, out_lay, outs)


def lower_reduce_combine(lw, op):
    """tl.reduce with a @jit combine function over one or more inputs (tuples of registers)."""
    xs = op.operands
    axis = op.attrs["axis"]
    lay = _reduce_layout(lw, xs[0], axis)
    cols = [lw.block(x, lay) for x in xs]
    vals = [tuple(c[r] for c in cols) for r in range(lay.n_regs)]
    acc, out_lay = _reduce_tuples(lw, lay, axis, vals, region_combiner(lw, op.regions[0]), [x.dtype for x in xs])
    for k, res in enumerate(op.results):
        if not res.is_block:
            lw.vals[res.id] = acc[0][k]
        else:
            lw.set_block(res, out_lay, [a[k] for a in acc])


def _reduce_tuples(lw, lay, axis, vals, comb, dts):
    """Reduce tuples of registers (one tuple per register of `lay`, components of types `dts`) along
    `axis`: in registers, across lanes, across warps. Returns (tuples per register of the sliced
    layout, the sliced layout)."""
    b = lw.b
    ra, ro, _ = _axis_bits(lay.reg, axis)
    acc = []
    for oi in range(1 << len(ro)):
        base = sum(1 << ro[j] for j in range(len(ro)) if oi >> j & 1)
        a = None
        for ai in range(1 << len(ra)):
            r = base | sum(1 << ra[j] for j in range(len(ra)) if ai >> j & 1)
            a = vals[r] if a is None else comb(a, vals[r])
        acc.append(a)
    la, _, _ = _axis_bits(lay.lane, axis)
    for i in la:
        acc = [comb(a, tuple(shfl(lw, v, "bfly", ll.Constant(I32, 1 << i)) for v in a)) for a in acc]
    out_lay = lay.slice(axis)
    wa, _, _ = _axis_bits(lay.warp, axis)
    if wa:
        nw = 1 << len(wa)
        n_out = out_lay.numel()
        parts = [lty(d) for d in dts]
        sizes = [esize(d) for d in dts]
        base_bytes, total = component_bases([n_out * nw * s for s in sizes])
        lw.smem_bytes = max(lw.smem_bytes, total + 16)
        lw.barrier()
        pb = lw.pb
        widx = None
        for j, i in enumerate(wa):
            bit = pb.and_(pb.lshr(lw.warp, ll.Constant(I32, i)), ll.Constant(I32, 1))
            if j:
                bit = pb.shl(bit, ll.Constant(I32, j))
            widx = bit if widx is None else pb.or_(widx, bit)
        tv, tm = lw.thread_flat(out_lay)
        offs = []
        for k in range(len(acc)):
            flat = lw.combine_const(tv, tm, out_lay.flat(out_lay.reg_coord(k)))
            offs.append(b.mul(flat, ll.Constant(I32, nw)))
        for k, a in enumerate(acc):
            for p, (v, t, s, bb) in enumerate(zip(a, parts, sizes, base_bytes)):
                off = b.add(b.mul(b.add(offs[k], widx), ll.Constant(I32, s)), ll.Constant(I32, bb))
                vv = b.zext(v, I8) if t == I1 else v
                b.store(vv, lw.smem_ptr(off), align=s)
        lw.barrier()
        new = []
        for k in range(len(acc)):
            a = None
            for w in range(nw):
                items = []
                for p, (t, s, bb) in enumerate(zip(parts, sizes, base_bytes)):
                    off = b.add(b.mul(b.add(offs[k], ll.Constant(I32, w)), ll.Constant(I32, s)), ll.Constant(I32, bb))
                    v = b.load(lw.smem_ptr(off), typ=I8 if t == I1 else t, align=s)
                    items.append(b.trunc(v, I1) if t == I1 else v)
                a = tuple(items) if a is None else comb(a, tuple(items))
            new.append(a)
        acc = new
    return acc, out_lay


def _scan_ok(lay: Layout, axis: int) -> bool:
    seq = []
    for kind, group in (("r", lay.reg), ("l", lay.lane), ("w", lay.warp)):
        along, _, mixed = _axis_bits(group, axis)
        if mixed:
            return False
        for i in along:
            v = group[i][axis]
            if v & (v - 1):
                return False
            seq.append((v, kind, i))
    seq.sort()
    kinds = "".join(k for _, k, _ in seq)
    if not re.fullmatch(r"r*l*w*r*", kinds):
        return False
    for k in "lw":
        pos = [i for _, kk, i in seq if kk == k]
        if pos and pos != list(range(pos[0], pos[0] + len(pos))):
            return False
    return True


def lower_scan(lw, op):
    x = op.operands[0]
    _scan(lw, op, [x], _combiner(lw, op.attrs["kind"], x.dtype))


def lower_scan_combine(lw, op):
    """tl.associative_scan with a @jit combine function over one or more inputs."""
    _scan(lw, op, list(op.operands), region_combiner(lw, op.regions[0]))


def _scan(lw, op, xs, comb):
    """Inclusive scan of tuples of registers (one component per input) with `comb`: in registers,
    across lanes (Hillis–Steele with shuffles), then across warps and register chunks through shared
    memory. `comb(earlier, later)` keeps the order of its operands in scan order: along the axis, or
    from the end when reversed (Triton's reverse scan is the forward scan of the flipped block, so
    there the higher elements are the left operand)."""
    x = xs[0]
    axis, rev = op.attrs["axis"], bool(op.attrs.get("reverse", False))
    dts = [v.dtype for v in xs]
    lay = lw.layout_of(x)
    if not _scan_ok(lay, axis):
        order = (axis,) + tuple(d for d in reversed(range(x.type.numel and len(x.shape))) if d != axis)
        lay = blocked(x.shape, order, 1, lw.num_warps)
    cols = [list(lw.block(v, lay)) for v in xs]
    regs = [tuple(c[r] for c in cols) for r in range(lay.n_regs)]
    b = lw.b

    def select(c, p, q):
        return tuple(b.select(c, pi, qi) for pi, qi in zip(p, q))

    def shfl_all(t, mode, lane_arg):
        return tuple(shfl(lw, v, mode, lane_arg) for v in t)
    # axis bits in increasing value
    reg_axis = sorted((lay.reg[i][axis], i) for i in _axis_bits(lay.reg, axis)[0])
    lane_axis = sorted((lay.lane[i][axis], i) for i in _axis_bits(lay.lane, axis)[0])
    warp_axis = sorted((lay.warp[i][axis], i) for i in _axis_bits(lay.warp, axis)[0])
    lane_min = lane_axis[0][0] if lane_axis else None
    warp_min = warp_axis[0][0] if warp_axis else None
    thr_min = min(v for v in (lane_min, warp_min) if v is not None) if (lane_min or warp_min) else None
    low = [i for v, i in reg_axis if thr_min is None or v < thr_min]
    high = [i for v, i in reg_axis if thr_min is not None and v > thr_min]
    other = _axis_bits(lay.reg, axis)[1]

    def reg_of(o, lo, hi):
        r = sum(1 << other[j] for j in range(len(other)) if o >> j & 1)
        r |= sum(1 << low[j] for j in range(len(low)) if lo >> j & 1)
        r |= sum(1 << high[j] for j in range(len(high)) if hi >> j & 1)
        return r
    n_o, n_lo, n_hi = 1 << len(other), 1 << len(low), 1 << len(high)
    lo_order = list(range(n_lo))[::-1] if rev else list(range(n_lo))
    # 1. in-thread inclusive scan over the low register bits
    for o in range(n_o):
        for h in range(n_hi):
            prev = None
            for lo in lo_order:
                r = reg_of(o, lo, h)
                if prev is not None:
                    regs[r] = comb(regs[prev], regs[r])
                prev = r
    last_lo = lo_order[-1]
    # 2. across lanes (Hillis–Steele on the chunk totals)
    pb = lw.pb
    if lane_axis:
        nl = len(lane_axis)
        lb0 = lane_axis[0][1]
        lidx = pb.and_(pb.lshr(lw.lane, ll.Constant(I32, lb0)), ll.Constant(I32, (1 << nl) - 1))
        for o in range(n_o):
            for h in range(n_hi):
                tot = regs[reg_of(o, last_lo, h)]
                incl = tot
                for s in range(nl):
                    delta = 1 << (lb0 + s)
                    if rev:
                        other_v = shfl_all(incl, "down", ll.Constant(I32, delta))
                        ok = b.icmp_unsigned("<", lidx, ll.Constant(I32, (1 << nl) - (1 << s)))
                    else:
                        other_v = shfl_all(incl, "up", ll.Constant(I32, delta))
                        ok = b.icmp_unsigned(">=", lidx, ll.Constant(I32, 1 << s))
                    incl = select(ok, comb(other_v, incl), incl)
                # exclusive prefix from the neighbouring lane
                d1 = 1 << lb0
                if rev:
                    ex = shfl_all(incl, "down", ll.Constant(I32, d1))
                    has = b.icmp_unsigned("<", lidx, ll.Constant(I32, (1 << nl) - 1))
                else:
                    ex = shfl_all(incl, "up", ll.Constant(I32, d1))
                    has = b.icmp_unsigned(">", lidx, ll.Constant(I32, 0))
                for lo in range(n_lo):
                    r = reg_of(o, lo, h)
                    regs[r] = select(has, comb(ex, regs[r]), regs[r])
    # 3. across warps and 4. across high register chunks, through shared memory
    if warp_axis or high:
        nwa = 1 << len(warp_axis)
        ess = [esize(d) for d in dts]
        mts = [mty(d) for d in dts]
        sl = lay.slice(axis)
        n_other = sl.numel()
        bases, total = component_bases([n_other * n_hi * nwa * es for es in ess])
        lw.smem_bytes = max(lw.smem_bytes, total)
        widx = ll.Constant(I32, 0)
        for j, (_, i) in enumerate(warp_axis):
            bit = pb.and_(pb.lshr(lw.warp, ll.Constant(I32, i)), ll.Constant(I32, 1))
            widx = pb.or_(widx, pb.shl(bit, ll.Constant(I32, j)) if j else bit)
        # the warp's chunk total: the value held by the last lane along the axis
        if lane_axis:
            nl = len(lane_axis)
            lb0 = lane_axis[0][1]
            amask = ((1 << nl) - 1) << lb0
            src_lane = pb.and_(lw.lane, ll.Constant(I32, ~amask & 31)) if rev else pb.or_(lw.lane, ll.Constant(I32, amask))
        tv, tm = lw.thread_flat(sl)
        lw.barrier()
        slot = {}

        def smem_at(base, w, k):
            off = b.mul(b.add(base, w), ll.Constant(I32, ess[k]))
            return lw.smem_ptr(b.add(off, ll.Constant(I32, bases[k])) if bases[k] else off)
        for o in range(n_o):
            flat = lw.combine_const(tv, tm, sl.flat(sl.reg_coord(o)))
            for h in range(n_hi):
                tot = regs[reg_of(o, last_lo, h)]
                if lane_axis:
                    tot = shfl_all(tot, "idx", src_lane)
                base = b.mul(b.add(b.mul(flat, ll.Constant(I32, n_hi)), ll.Constant(I32, h)), ll.Constant(I32, nwa))
                slot[(o, h)] = base
                for k, (v, dt) in enumerate(zip(tot, dts)):
                    b.store(b.zext(v, I8) if dt.name == "int1" else v, smem_at(base, widx, k), align=ess[k])
        lw.barrier()
        for o in range(n_o):
            carry = None  # combined totals of all earlier (h, w) chunks
            hs = list(range(n_hi))[::-1] if rev else list(range(n_hi))
            for h in hs:
                tots = []
                for w in range(nwa):
                    t = []
                    for k, dt in enumerate(dts):
                        v = b.load(smem_at(slot[(o, h)], ll.Constant(I32, w), k), typ=mts[k], align=ess[k])
                        t.append(b.trunc(v, I1) if dt.name == "int1" else v)
                    tots.append(tuple(t))
                # exclusive prefix over the warps before mine (after mine when reversed)
                ex, has = None, None
                if nwa > 1:
                    order_w = list(range(nwa))[::-1] if rev else list(range(nwa))
                    run, pref = None, {}
                    for w in order_w:
                        run = tots[w] if run is None else comb(run, tots[w])
                        pref[w] = run
                    # ex = pref[widx - 1] (forward) / pref[widx + 1] (reverse)
                    for w in order_w[:-1]:
                        tgt = w - 1 if rev else w + 1
                        sel = b.icmp_unsigned("==", widx, ll.Constant(I32, tgt))
                        ex = pref[w] if ex is None else select(sel, pref[w], ex)
                    has = b.icmp_unsigned("<", widx, ll.Constant(I32, nwa - 1)) if rev else b.icmp_unsigned(">", widx, ll.Constant(I32, 0))
                for lo in range(n_lo):
                    r = reg_of(o, lo, h)
                    if ex is not None:
                        pre = select(has, comb(carry, ex), carry) if carry is not None else None
                        regs[r] = comb(pre, regs[r]) if pre is not None else select(has, comb(ex, regs[r]), regs[r])
                    elif carry is not None:
                        regs[r] = comb(carry, regs[r])
                chunk_total = None
                for w in range(nwa):
                    chunk_total = tots[w] if chunk_total is None else (comb(tots[w], chunk_total) if rev else comb(chunk_total, tots[w]))
                # carry holds the chunks before this one in scan order (higher ones when reversed),
                # so it stays the left operand in both directions
                carry = chunk_total if carry is None else comb(carry, chunk_total)
    for k, res in enumerate(op.results):
        lw.set_block(res, lay, [t[k] for t in regs])
