"""Rules for loads, stores and atomics on global memory.

Accesses are vectorized up to 16 bytes where the layout, the axis info (contiguity, divisibility)
and the mask's constancy allow it (`access_width`); masked, cached and volatile accesses are inline
PTX (predicated `ld.global` / `st.global`, `atom`), the others plain LLVM loads and stores.
"""
from __future__ import annotations

from llvmlite import ir as ll

from .. import ir
from .errors import BackendError
from .layouts import Layout
from .llvm_types import GPTR, I8, I16, I32, I64, esize, is_signed, lty, mty


def _pow2_floor(n: int) -> int:
    n = max(1, int(n))
    return 1 << (n.bit_length() - 1)


_SEM = {"acq_rel": ".acq_rel", "acquire": ".acquire", "release": ".release", "relaxed": ".relaxed", "": ".acq_rel", None: ".acq_rel"}
_SCOPE = {"gpu": ".gpu", "cta": ".cta", "sys": ".sys", "": ".gpu", None: ".gpu"}
_CACHE = {"": "", None: "", ".ca": ".ca", ".cg": ".cg", ".cs": ".cs", ".lu": ".lu", ".cv": ".cv", ".wb": ".wb", ".wt": ".wt",
          "ca": ".ca", "cg": ".cg", "cs": ".cs", "lu": ".lu", "cv": ".cv", "wb": ".wb", "wt": ".wt"}
_EVICT = {"evict_first": ".L1::evict_first", "evict_last": ".L1::evict_last", "evict_normal": ".L1::evict_normal",
          "no_allocate": ".L1::no_allocate"}


_L2_POLICY = {"evict_first": "evict_first", "evict_last": "evict_last"}


def _cache_qualifiers(op) -> str:
    """`.cg`-style cache operator, else an L1 eviction priority (PTX cannot combine the two: the
    cache operator wins). evict_first/evict_last also get an L2 cache hint (`_l2_policy`), as Triton
    emits; a volatile load takes neither."""
    if op.attrs.get("volatile"):
        return ""
    c = _CACHE.get(op.attrs.get("cache", ""), "")
    q = c or _EVICT.get(op.attrs.get("eviction", "") or "", "")
    return q + (".L2::cache_hint" if _l2_policy_kind(op) else "")


def _l2_policy_kind(op) -> str | None:
    return None if op.attrs.get("volatile") else _L2_POLICY.get(op.attrs.get("eviction", "") or "")


def _l2_policy(lw, op):
    """The 64-bit L2 eviction policy register for `.L2::cache_hint` (createpolicy.fractional, as
    Triton makes it: the whole access at that priority), or None."""
    kind = _l2_policy_kind(op)
    if kind is None:
        return None
    return lw.b.asm(ll.FunctionType(I64, []), f"createpolicy.fractional.L2::{kind}.b64 $0, 1.0;", "=l", [], False)


def _word_plan(es: int, vec: int):
    """(word bits, number of words) for a vector of `vec` elements of `es` bytes."""
    bits = es * 8 * vec
    if es * 8 >= 32:
        return es * 8, vec
    if bits >= 32:
        return 32, bits // 32
    return bits, 1


def _to_words(lw, elems, mt, wbits, nw):
    b = lw.b
    wt = ll.IntType(wbits)
    es_bits = mt.width if isinstance(mt, ll.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(mt)]
    per = wbits // es_bits
    words = []
    for w in range(nw):
        chunk = elems[w * per:(w + 1) * per]
        if per == 1:
            words.append(chunk[0] if isinstance(chunk[0].type, ll.IntType) and chunk[0].type.width == wbits else b.bitcast(chunk[0], wt))
        else:
            v = ll.Constant(ll.VectorType(mt, per), None)
            for j, e in enumerate(chunk):
                v = b.insert_element(v, e, ll.Constant(I32, j))
            words.append(b.bitcast(v, wt))
    return words


def _from_words(lw, words, mt, wbits):
    b = lw.b
    es_bits = mt.width if isinstance(mt, ll.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(mt)]
    per = wbits // es_bits
    out = []
    for w in words:
        if per == 1:
            out.append(w if w.type == mt else b.bitcast(w, mt))
        else:
            v = b.bitcast(w, ll.VectorType(mt, per))
            out.extend(b.extract_element(v, ll.Constant(I32, j)) for j in range(per))
    return out


def _reg_letter(bits):
    return {8: "h", 16: "h", 32: "r", 64: "l"}[bits]


def access_width(lw, lay: Layout, ptr: ir.Value, mask: ir.Value | None, es: int) -> int:
    if not lay.reg:
        return 1
    r0 = lay.reg[0]
    nz = [d for d, x in enumerate(r0) if x]
    if len(nz) != 1 or r0[nz[0]] != 1:
        return 1
    d = nz[0]
    k = 0
    while k < len(lay.reg) and lay.reg[k] == tuple((1 << k) if i == d else 0 for i in range(lay.rank)):
        k += 1
    v = 1 << k
    while v > 1 and any(bb[d] & (v - 1) for bb in lay.reg[k:] + lay.lane + lay.warp):
        v //= 2
    info = lw.axis.get(ptr)
    vec = min(v, info.contiguity[d], _pow2_floor(info.divisibility[d] // es) if info.divisibility[d] >= es else 1,
              max(1, 16 // es))
    if mask is not None:
        vec = min(vec, lw.axis.get(mask).constancy[d])
    return _pow2_floor(vec)


def _and_pred(b, p, q):
    if p is None:
        return q
    if q is None:
        return p
    return b.and_(p, q)


def _ld_asm(lw, ptr, pred, others, mt, es, vec, cache, volatile, policy=None):
    wbits, nw = _word_plan(es, vec)
    regbits = 16 if wbits == 8 else wbits
    rt = ll.IntType(regbits)
    letter = _reg_letter(wbits)
    b = lw.b
    ins, cons = [ptr], ["l"]
    lines = []
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        if others is not None:
            ow = _to_words(lw, others, mt, wbits, nw)
            if wbits == 8:
                ow = [b.zext(w, I16) for w in ow]
            for j, w in enumerate(ow):
                lines.append(f"mov.b{regbits} ${j}, ${nw + 2 + j};")
                ins.append(w)
                cons.append(letter)
        else:
            lines.extend(f"mov.b{regbits} ${j}, 0;" for j in range(nw))
    vs = {1: "", 2: ".v2", 4: ".v4"}[nw]
    ty = ".u8" if wbits == 8 else f".b{wbits}"
    op = "ld.volatile.global" if volatile else f"ld.global{cache}"
    regs = ", ".join(f"${j}" for j in range(nw))
    regs = f"{{ {regs} }}" if nw > 1 else regs
    p = f"@${nw + 1} " if pred is not None else ""
    hint = ""
    if policy is not None:
        hint = f", ${nw + len(ins)}"
        ins.append(policy)
        cons.append("l")
    lines.append(f"{p}{op}{vs}{ty} {regs}, [ ${nw} + 0 ]{hint};")
    ret = rt if nw == 1 else ll.LiteralStructType([rt] * nw)
    constraint = ",".join([f"={letter}"] * nw + cons)
    res = b.asm(ll.FunctionType(ret, [x.type for x in ins]), "\n\t".join(lines), constraint, ins, True)
    words = [res] if nw == 1 else [b.extract_value(res, j) for j in range(nw)]
    if wbits == 8:
        words = [b.trunc(w, I8) for w in words]
    return _from_words(lw, words, mt, wbits)


def _st_asm(lw, ptr, pred, vals, mt, es, vec, cache, policy=None):
    wbits, nw = _word_plan(es, vec)
    regbits = 16 if wbits == 8 else wbits
    letter = _reg_letter(wbits)
    b = lw.b
    words = _to_words(lw, vals, mt, wbits, nw)
    if wbits == 8:
        words = [b.zext(w, I16) for w in words]
    ins, cons = [], []
    p = ""
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        p = "@$0 "
    pi = len(ins)
    ins.append(ptr)
    cons.append("l")
    for w in words:
        ins.append(w)
        cons.append(letter)
    vs = {1: "", 2: ".v2", 4: ".v4"}[nw]
    ty = ".b8" if wbits == 8 else f".b{wbits}"
    regs = ", ".join(f"${pi + 1 + j}" for j in range(nw))
    regs = f"{{ {regs} }}" if nw > 1 else regs
    hint = ""
    if policy is not None:
        hint = f", ${len(ins)}"
        ins.append(policy)
        cons.append("l")
    text = f"{p}st.global{cache}{vs}{ty} [ ${pi} + 0 ], {regs}{hint};"
    b.asm(ll.FunctionType(ll.VoidType(), [x.type for x in ins]), text, ",".join(cons), ins, True)


def _plain_load(lw, ptr, mt, es, vec):
    b = lw.b
    if vec == 1:
        return [b.load(ptr, typ=mt, align=es)]
    v = b.load(ptr, typ=ll.VectorType(mt, vec), align=es * vec)
    return [b.extract_element(v, ll.Constant(I32, j)) for j in range(vec)]


def _plain_store(lw, ptr, vals, mt, es):
    b = lw.b
    vec = len(vals)
    if vec == 1:
        b.store(vals[0], ptr, align=es)
        return
    v = ll.Constant(ll.VectorType(mt, vec), None)
    for j, e in enumerate(vals):
        v = b.insert_element(v, e, ll.Constant(I32, j))
    b.store(v, ptr, align=es * vec)


def _to_mem(lw, vals, dt):
    if dt.name == "int1":
        return [lw.b.zext(x, I8) for x in vals]
    if dt.is_ptr():
        return [lw.b.ptrtoint(x, I64) for x in vals]
    return vals


def _from_mem(lw, vals, dt):
    if dt.name == "int1":
        return [lw.b.icmp_unsigned("!=", x, ll.Constant(I8, 0)) for x in vals]
    if dt.is_ptr():
        return [lw.b.inttoptr(x, GPTR) for x in vals]
    return vals


def _mem_type(dt):
    return I64 if dt.is_ptr() else mty(dt)


def lower_load(lw, op):
    p, mask, other = op.operands
    res = op.result
    dt = res.dtype
    mt, es = _mem_type(dt), esize(dt)
    cache = _cache_qualifiers(op)
    volatile = bool(op.attrs.get("volatile", False))
    policy = _l2_policy(lw, op)
    if not res.is_block:
        ptr = lw.scalar(p)
        pred = lw.scalar(mask) if mask is not None else None
        oth = _to_mem(lw, [lw.scalar(other)], dt) if other is not None else None
        if pred is None and not cache and not volatile:
            vals = _plain_load(lw, ptr, mt, es, 1)
        else:
            vals = _ld_asm(lw, ptr, pred, oth, mt, es, 1, cache, volatile, policy)
        lw.vals[res.id] = _from_mem(lw, vals, dt)[0]
        return
    lay = lw.want(res)
    ptrs = lw.block(p, lay)
    masks = lw.block(mask, lay) if mask is not None else None
    others = _to_mem(lw, lw.block(other, lay), dt) if other is not None else None
    vec = access_width(lw, lay, p, mask, es)
    out = []
    for g in range(0, lay.n_regs, vec):
        pred = masks[g] if masks is not None else None
        if pred is None and not cache and not volatile:
            out.extend(_plain_load(lw, ptrs[g], mt, es, vec))
        else:
            out.extend(_ld_asm(lw, ptrs[g], pred, others[g:g + vec] if others is not None else None, mt, es, vec, cache,
                               volatile, policy))
    lw.set_block(res, lay, _from_mem(lw, out, dt))


def lower_store(lw, op):
    p, v, mask = op.operands
    dt = v.dtype
    mt, es = _mem_type(dt), esize(dt)
    cache = _cache_qualifiers(op)
    policy = _l2_policy(lw, op)
    b = lw.b
    if not p.is_block:
        pred = _and_pred(b, lw.scalar(mask) if mask is not None else None, lw.owner_pred(None))
        _st_asm(lw, lw.scalar(p), pred, _to_mem(lw, [lw.scalar(v)], dt), mt, es, 1, cache, policy)
        return
    lay = lw.layout_of(p) if isinstance(lw.vals.get(p.id), tuple) else lw.want(p)
    lay = lw.assign.get(p) or lay
    ptrs = lw.block(p, lay)
    vals = _to_mem(lw, lw.block(v, lay), dt)
    masks = lw.block(mask, lay) if mask is not None else None
    owner = lw.owner_pred(lay)
    vec = access_width(lw, lay, p, mask, es)
    for g in range(0, lay.n_regs, vec):
        pred = _and_pred(b, masks[g] if masks is not None else None, owner)
        if pred is None and not cache:
            _plain_store(lw, ptrs[g], vals[g:g + vec], mt, es)
        else:
            _st_asm(lw, ptrs[g], pred, vals[g:g + vec], mt, es, vec, cache, policy)


# ---- atomics ---------------------------------------------------------------------------------

_ATOM_INT = {"add": "add", "max": "max", "min": "min", "xchg": "exch", "and": "and", "or": "or", "xor": "xor"}


def _atom_one(lw, kind, ptr, val, cmp, pred, dt, sem, scope):
    """One element's atomic through inline PTX; returns the old value."""
    b = lw.b
    bits = dt.primitive_bitwidth if not dt.is_ptr() else 64
    fl = dt.is_floating()
    if kind == "cas":
        opname, ty = "cas", f".b{bits}"
    elif kind == "add":
        if fl:
            opname, ty = ("add.noftz" if bits == 16 else "add"), {"fp16": ".f16", "bf16": ".bf16", "fp32": ".f32", "fp64": ".f64"}[dt.name]
        else:
            opname, ty = "add", f".u{bits}"
    elif kind in ("max", "min"):
        if fl and bits == 16:
            return _atom_half_minmax(lw, kind, ptr, val, pred, dt, sem, scope)
        if fl:
            return _atom_fminmax(lw, kind, ptr, val, pred, dt, sem, scope)
        opname, ty = kind, (f".s{bits}" if is_signed(dt) else f".u{bits}")
    elif kind in ("xchg", "and", "or", "xor"):
        opname, ty = _ATOM_INT[kind], f".b{bits}"
    else:
        raise BackendError(f"atomic kind {kind}")
    letter = {16: "h", 32: "r", 64: "l"}[bits]
    it = ll.IntType(bits)
    tobits = (lambda x: b.bitcast(x, it)) if fl else (lambda x: b.ptrtoint(x, it) if dt.is_ptr() else x)
    ins, cons = [], []
    text = []
    idx = 1
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        text.append(f"mov.b{bits} $0, 0;")
        pfx = f"@${idx} "
        idx += 1
    else:
        pfx = ""
    ins.append(ptr)
    cons.append("l")
    pi = idx
    idx += 1
    operands = [tobits(val)] if kind != "cas" else [tobits(cmp), tobits(val)]
    for x in operands:
        ins.append(x)
        cons.append(letter)
    args = ", ".join(f"${pi + 1 + j}" for j in range(len(operands)))
    text.append(f"{pfx}{_atom(kind, sem, scope)}.{opname}{ty} $0, [ ${pi} + 0 ], {args};")
    old = b.asm(ll.FunctionType(it, [x.type for x in ins]), "\n\t".join(text), ",".join([f"={letter}"] + cons), ins, True)
    if fl:
        return b.bitcast(old, lty(dt))
    if dt.is_ptr():
        return b.inttoptr(old, GPTR)
    return old


def _atom(kind, sem, scope) -> str:
    """`atom` with its state space, scope and ordering, in the order Triton's PTX has them (its tests
    look for "atom.global.gpu.acq_rel" and, for compare-and-swap, "atom.global.acq_rel"); ptxas
    takes the qualifiers in any order."""
    sem_s, scope_s = _SEM.get(sem, ".acq_rel"), _SCOPE.get(scope, ".gpu")
    return f"atom.global{sem_s}{scope_s}" if kind == "cas" else f"atom.global{scope_s}{sem_s}"


def _atom_half_minmax(lw, kind, ptr, val, pred, dt, sem, scope):
    """fp16/bf16 atomic min/max (a tensor descriptor's TMA reduction done element by element): PTX's
    atom has them only as vectors of aligned pairs, so a compare-and-swap loop on the element."""
    b = lw.b
    ty = ".f16" if dt.name == "fp16" else ".bf16"
    guard = "@!$1 bra DONE${:uid};" if pred is not None else ""
    ptr_i, val_i = ("$2", "$3") if pred is not None else ("$1", "$2")
    text = (f"{{\n\t.reg .pred %retry;\n\t.reg .b16 %seen, %want, %got;\n\tmov.b16 $0, 0;\n\t{guard}\n\t"
            f"ld.relaxed.gpu.global.b16 %seen, [{ptr_i}];\n"
            f"RETRY${{:uid}}:\n\t{kind}{ty} %want, %seen, {val_i};\n\t"
            f"{_atom('cas', sem, scope)}.cas.b16 %got, [{ptr_i}], %seen, %want;\n\t"
            f"setp.ne.b16 %retry, %got, %seen;\n\tmov.b16 %seen, %got;\n\t@%retry bra RETRY${{:uid}};\n\t"
            f"mov.b16 $0, %seen;\n"
            f"DONE${{:uid}}:\n\t}}")
    ins = ([pred] if pred is not None else []) + [ptr, b.bitcast(val, ll.IntType(16))]
    cons = "=h," + ("b," if pred is not None else "") + "l,h"
    old = b.asm(ll.FunctionType(ll.IntType(16), [x.type for x in ins]), text, cons, ins, True)
    return b.bitcast(old, lty(dt))


def _atom_fminmax(lw, kind, ptr, val, pred, dt, sem, scope):
    """fp32/fp64 atomic max/min with the sign trick (Triton): for val >= 0 the float order is the
    signed integer order; for val < 0 it is the reversed unsigned order."""
    b = lw.b
    bits = dt.primitive_bitwidth
    it = ll.IntType(bits)
    iv = b.bitcast(val, it)
    neg = b.icmp_signed("<", iv, ll.Constant(it, 0))
    pos = b.not_(neg)
    p_pos = _and_pred(b, pred, pos)
    p_neg = _and_pred(b, pred, neg)
    letter = {32: "r", 64: "l"}[bits]
    op_pos = f"{kind}.s{bits}"  # val >= 0: signed max / signed min
    op_neg = f"{'min' if kind == 'max' else 'max'}.u{bits}"  # val < 0: max → unsigned min, min → unsigned max
    atom = _atom(kind, sem, scope)
    text = (f"mov.b{bits} $0, 0;\n\t@$1 {atom}.{op_pos} $0, [ $3 + 0 ], $4;\n\t"
            f"@$2 {atom}.{op_neg} $0, [ $3 + 0 ], $4;")
    ins = [p_pos, p_neg, ptr, iv]
    old = b.asm(ll.FunctionType(it, [x.type for x in ins]), text, f"={letter},b,b,l,{letter}", ins, True)
    return b.bitcast(old, lty(dt))


def _atomic(lw, op, kind):
    res = op.result
    dt = res.dtype
    sem, scope = op.attrs.get("sem", "acq_rel"), op.attrs.get("scope", "gpu")
    if kind == "cas":
        p, cmp, v = op.operands
        mask = None
    else:
        p, v, mask = op.operands
        cmp = None
    b = lw.b
    used = bool(lw.uses.get(res.id))
    if not p.is_block:
        owner = lw.owner_pred(None)
        pred = _and_pred(b, lw.scalar(mask) if mask is not None else None, owner)
        old = _atom_one(lw, kind, lw.scalar(p), lw.scalar(v), lw.scalar(cmp) if cmp is not None else None, pred, dt, sem, scope)
        if used:  # broadcast thread 0's old value
            mt, es = _mem_type(dt), esize(dt)
            lw.smem_bytes = max(lw.smem_bytes, es)
            lw.barrier()
            ptr0 = lw.smem_ptr(ll.Constant(I32, 0))
            with b.if_then(lw.owner_pred(None)):
                b.store(_to_mem(lw, [old], dt)[0], ptr0, align=es)
            lw.barrier()
            old = _from_mem(lw, [b.load(ptr0, typ=mt, align=es)], dt)[0]
        lw.vals[res.id] = old
        return
    lay = lw.want(res)
    ptrs = lw.block(p, lay)
    vals = lw.block(v, lay)
    cmps = lw.block(cmp, lay) if cmp is not None else None
    masks = lw.block(mask, lay) if mask is not None else None
    owner = lw.owner_pred(lay)
    out = []
    for r in range(lay.n_regs):
        pred = _and_pred(b, masks[r] if masks is not None else None, owner)
        out.append(_atom_one(lw, kind, ptrs[r], vals[r], cmps[r] if cmps is not None else None, pred, dt, sem, scope))
    if used and owner is not None:  # replicated threads need the owner's old values
        mt, es = _mem_type(dt), esize(dt)
        lw.smem_bytes = max(lw.smem_bytes, lay.numel() * es)
        lw.barrier()
        lw.smem_write(_to_mem(lw, out, dt), lay, mt, es, pred=owner)
        lw.barrier()
        out = _from_mem(lw, lw.smem_read(lay, mt, es), dt)
    lw.set_block(res, lay, out)


def lower_atomic_rmw(lw, op):
    _atomic(lw, op, op.attrs["kind"])


def lower_atomic_cas(lw, op):
    _atomic(lw, op, "cas")
