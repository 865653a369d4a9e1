"""Rules for the ops that move values between the elements of a block: `tl.join`, `tl.split` (in
registers), `tl.flip` and `tl.sort` (registers and shuffles, else shared memory), `tl.gather`
(through shared memory)."""
from __future__ import annotations

from llvmlite import ir as ll

from ..language import dtypes as T
from .layouts import log2, scalar_layout
from .llvm_types import I1, I8, I32, esize, is_signed, mty
from .reduction import shfl

# the register network unrolls registers × stages compare-and-swaps; beyond this, shared memory
SORT_UNROLL_LIMIT = 2048


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


# ---- through shared memory: gather and sort ------------------------------------------------------

def _to_smem(lw, x):
    """x's registers stored row-major in shared memory (barriers on both sides); returns the
    in-memory element type and size."""
    dt = x.dtype
    mt, es = mty(dt), esize(dt)
    regs = lw.block(x, lw.layout_of(x))
    if dt.name == "int1":
        regs = [lw.b.zext(r, I8) for r in regs]
    lw.smem_bytes = max(lw.smem_bytes, x.type.numel * es)
    lw.barrier()
    lw.smem_write(regs, lw.layout_of(x), mt, es)
    lw.barrier()
    return mt, es


def _from_mem(lw, v, dt):
    return lw.b.trunc(v, I1) if dt.name == "int1" else v


def lower_gather(lw, op):
    """The source goes to shared memory; each thread reads its result elements at the offsets its
    index registers name (wrapped into the dim: out-of-range indices are undefined in Triton)."""
    src, index = op.operands
    res = op.result
    axis = op.attrs["axis"]
    b = lw.b
    lay = lw.want(res)
    idx = lw.block(index, lay)  # first: a layout conversion would go through shared memory too
    n = src.shape[axis]

    def coord(r):
        i = idx[r]
        if i.type.width > 32:
            i = b.trunc(i, I32)
        elif i.type.width < 32:
            i = b.sext(i, I32) if is_signed(index.dtype) else b.zext(i, I32)
        return b.and_(i, ll.Constant(I32, n - 1))
    _read_moved(lw, src, res, lay, axis, coord)


def _read_moved(lw, src, res, lay, axis, coord):
    """res (in `lay`) = src with the `axis` coordinate of each result register r replaced by
    coord(r) (an i32), read from src's row-major copy in shared memory."""
    b = lw.b
    mt, es = _to_smem(lw, src)
    strides = _strides(src.shape)
    out = []
    for r in range(lay.n_regs):
        off = coord(r)
        if strides[axis] != 1:
            off = b.mul(off, ll.Constant(I32, strides[axis]))
        for d in range(lay.rank):
            if d != axis and src.shape[d] > 1:
                c = lw.index(lay, d, r)
                off = b.add(off, b.mul(c, ll.Constant(I32, strides[d])) if strides[d] != 1 else c)
        v = b.load(lw.smem_ptr(b.mul(off, ll.Constant(I32, es))), typ=mt, align=es)
        out.append(_from_mem(lw, v, src.dtype))
    lw.set_block(res, lay, out)


def lower_flip(lw, op):
    """Reversing dim d maps coordinate c to c ^ (n - 1): where the dim's bits are held by registers
    and lanes of the same warp, that is a register permutation and a butterfly shuffle; across
    warps, a read of the shared-memory copy at the flipped coordinates."""
    x = op.operands[0]
    res = op.result
    d = op.attrs["dim"]
    n = x.shape[d]
    lay = lw.layout_of(x)
    along = [bb for bb in lay.reg + lay.lane + lay.warp if bb[d]]
    in_warp = not any(bb[d] for bb in lay.warp)
    unit = all(sum(1 for v in bb if v) == 1 for bb in along)
    covered = 0
    for bb in along:
        covered ^= bb[d]
    if in_warp and unit and covered == n - 1:
        regs = lw.block(x, lay)
        rmask = sum(1 << i for i, bb in enumerate(lay.reg) if bb[d])
        lmask = sum(1 << i for i, bb in enumerate(lay.lane) if bb[d])
        out = [regs[r ^ rmask] for r in range(lay.n_regs)]
        if lmask:
            out = [shfl(lw, v, "bfly", ll.Constant(I32, lmask)) for v in out]
        lw.set_block(res, lay, out)
        return
    want = lw.want(res)
    _read_moved(lw, x, res, want, d, lambda r: lw.b.xor(lw.index(want, d, r), ll.Constant(I32, n - 1)))


def _strides(shape) -> tuple:
    s, acc = [], 1
    for n in reversed(shape):
        s.append(acc)
        acc *= n
    return tuple(reversed(s))


def _greater(lw, dt, a, c):
    """a > c, with NaN above every number (as numpy and torch sort)."""
    b = lw.b
    if dt.is_floating():
        gt = b.fcmp_ordered(">", a, c)
        return b.or_(gt, b.and_(b.fcmp_unordered("uno", a, a), b.fcmp_ordered("ord", c, c)))
    if is_signed(dt):
        return b.icmp_signed(">", a, c)
    return b.icmp_unsigned(">", a, c)


def lower_sort(lw, op):
    """A bitonic sorting network on the registers: at each stage (merge size k, distance j) every
    element meets its partner at coordinate c ^ j along the dim and keeps the smaller or the larger.
    The partner is another register of the thread, a lane of the warp (a butterfly shuffle), or,
    when bit j lives in the warps, comes through shared memory. Blocks with many elements per
    thread run the network over shared memory instead (_sort_in_shared_memory): unrolled, the
    register network would grow as registers × stages."""
    x = op.operands[0]
    res = op.result
    dim, descending = op.attrs["dim"], bool(op.attrs["descending"])
    lay = lw.layout_of(x)
    n = x.shape[dim]
    stages = log2(n) * (log2(n) + 1) // 2
    if lay.n_regs * stages > SORT_UNROLL_LIMIT:
        _sort_in_shared_memory(lw, op, dim, descending)
        return
    b = lw.b
    dt = x.dtype
    regs = list(lw.block(x, lay))
    inner = _strides(x.shape)[dim]
    cmp_dt = T.uint8 if dt.name == "int1" else dt
    coords = [lw.index(lay, dim, r) for r in range(lay.n_regs)]

    def holder(j):
        unit = tuple(j if i == dim else 0 for i in range(lay.rank))
        for kind, group in (("reg", lay.reg), ("lane", lay.lane)):
            for i, bb in enumerate(group):
                if bb == unit:
                    return kind, i
        return None, None
    k = 2
    while k <= n:
        j = k // 2
        while j >= 1:
            kind, i = holder(j)
            if kind == "reg":
                partner = [regs[r ^ (1 << i)] for r in range(lay.n_regs)]
            elif kind == "lane":
                partner = [shfl(lw, v, "bfly", ll.Constant(I32, 1 << i)) for v in regs]
            else:
                partner = _exchange(lw, lay, regs, dt, j * inner)
            new = []
            for r, (v, p) in enumerate(zip(regs, partner)):
                c = coords[r]
                lower = b.icmp_unsigned("==", b.and_(c, ll.Constant(I32, j)), ll.Constant(I32, 0))
                up = b.icmp_unsigned("==", b.and_(c, ll.Constant(I32, k)), ll.Constant(I32, 0)) if k < n else ll.Constant(I1, 1)
                if descending:
                    up = b.not_(up)
                # the lower element of an ascending pair (the upper of a descending one) keeps the smaller
                take_min = b.icmp_unsigned("==", lower, up)
                g = _greater(lw, cmp_dt, v, p)
                new.append(b.select(take_min, b.select(g, p, v), b.select(g, v, p)))
            regs = new
            j //= 2
        k *= 2
    lw.set_block(res, lay, regs)


def _sort_in_shared_memory(lw, op, dim, descending):
    """The bitonic network over the row-major copy in shared memory: every stage, each thread
    compares and swaps its share of the N/2 pairs (a loop when they are many), then the program
    meets at a barrier."""
    x = op.operands[0]
    res = op.result
    b = lw.b
    dt = x.dtype
    mt, es = _to_smem(lw, x)
    shape = x.shape
    n = shape[dim]
    inner = _strides(shape)[dim]
    numel = x.type.numel
    ln, li = log2(n), log2(inner)
    cmp_dt = T.uint8 if dt.name == "int1" else dt
    k = 2
    while k <= n:
        j = k // 2
        while j >= 1:
            def stage(p, j=j, k=k):
                # p → (outer o, pair q along the dim, inner i); c = q with a zero bit inserted at j
                i = b.and_(p, ll.Constant(I32, inner - 1))
                q = b.and_(b.lshr(p, ll.Constant(I32, li)), ll.Constant(I32, n // 2 - 1))
                o = b.lshr(p, ll.Constant(I32, li + ln - 1))
                lj = log2(j)
                c = b.or_(b.shl(b.lshr(q, ll.Constant(I32, lj)), ll.Constant(I32, lj + 1)), b.and_(q, ll.Constant(I32, j - 1)))
                f1 = b.or_(b.or_(b.shl(o, ll.Constant(I32, ln + li)), b.shl(c, ll.Constant(I32, li))), i)
                f2 = b.add(f1, ll.Constant(I32, j * inner))
                p1 = lw.smem_ptr(b.mul(f1, ll.Constant(I32, es)))
                p2 = lw.smem_ptr(b.mul(f2, ll.Constant(I32, es)))
                v1 = b.load(p1, typ=mt, align=es)
                v2 = b.load(p2, typ=mt, align=es)
                up = b.icmp_unsigned("==", b.and_(c, ll.Constant(I32, k)), ll.Constant(I32, 0)) if k < n else ll.Constant(I1, 1)
                if descending:
                    up = b.not_(up)
                swap = b.select(up, _greater(lw, cmp_dt, v1, v2), _greater(lw, cmp_dt, v2, v1))
                b.store(b.select(swap, v2, v1), p1, align=es)
                b.store(b.select(swap, v1, v2), p2, align=es)
            lw.each_thread_share(numel // 2, stage)
            lw.barrier()
            j //= 2
        k *= 2
    lay = lw.want(res)
    out = lw.smem_read(lay, mt, es)
    lw.set_block(res, lay, [_from_mem(lw, v, dt) for v in out])


def _exchange(lw, lay, regs, dt, xor_offset: int) -> list:
    """Each register's partner at row-major offset (its own ^ xor_offset), through shared memory."""
    b = lw.b
    mt, es = mty(dt), esize(dt)
    vals = [b.zext(r, I8) for r in regs] if dt.name == "int1" else regs
    lw.smem_bytes = max(lw.smem_bytes, lay.numel() * es)
    lw.barrier()
    lw.smem_write(vals, lay, mt, es)
    lw.barrier()
    tv, tm = lw.thread_flat(lay)
    out = []
    for r in range(lay.n_regs):
        off = b.xor(lw.combine_const(tv, tm, lay.flat(lay.reg_coord(r))), ll.Constant(I32, xor_offset))
        out.append(_from_mem(lw, b.load(lw.smem_ptr(b.mul(off, ll.Constant(I32, es))), typ=mt, align=es), dt))
    return out
