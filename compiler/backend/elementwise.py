"""Layout-polymorphic rules: elementwise arithmetic, casts, math functions, index and shape ops.

Each rule is `rule(lw, op, layout | None) -> registers | scalar`: it computes the op's result in
the layout it is asked for (None: a scalar), which lets the lowering recompute cheap values in a
second layout rather than convert them (lowering.REMAT_OPS).
"""
from __future__ import annotations

import math

from llvmlite import ir as ll

from .. import ir
from . import fp8
from .errors import BackendError
from .llvm_types import CONTRACT, F32, F64, GPTR, I1, I32, I64, LN2, LOG2E, fsuffix, is_signed, lty, mty
from .lowering import Lowering, region_combiner


# ---- elementwise ops: one value per register (per aligned run of equal values) ---------------

def map_elementwise(lw: Lowering, op, lay, f):
    """`f` over the op's operands register by register (once when lay is None: a scalar), computed
    once per run of registers the axis info proves equal and reused for the others."""
    args = lw.operands(op, lay)
    if lay is None:
        return f(*[a[0] if a is not None else None for a in args])
    rep = _constant_runs(lw, op, lay)
    out = []
    for i in range(lay.n_regs):
        j = rep[i]
        out.append(out[j] if j != i else f(*[a[i] if a is not None else None for a in args]))
    return out


def _constant_runs(lw: Lowering, op, lay) -> list:
    """Register → the register holding the same value, from the result's constancy (axis info):
    a register bit whose basis moves less than the constancy along one dim stays inside an aligned
    run of equal values, so `cols < N` is compared once per vector, as Triton does."""
    n = lay.n_regs
    res = op.results[0] if op.results else None
    if res is None or not res.is_block:
        return list(range(n))
    k = lw.axis.get(res).constancy
    same = 0
    for bit, basis in enumerate(lay.reg):
        dims = [d for d, v in enumerate(basis) if v]
        if len(dims) == 1 and basis[dims[0]] < k[dims[0]]:
            same |= 1 << bit
    return [r & ~same for r in range(n)] if same else list(range(n))


# ---- constants, indices and shapes -----------------------------------------------------------

def lower_const(lw, op, lay):
    dt = op.result.dtype
    v = op.attrs["value"]
    if op.attrs.get("poison"):   # an undefined value (a function's fall-through return): LLVM's own
        c = ll.FormattedConstant(lty(dt), "poison")
    elif dt.name in ("fp16", "bf16"):
        c = lw.pb.fptrunc(ll.Constant(F32, float(v)), lty(dt))  # in the entry block: dominates all
    else:
        c = lw.const(dt, v)
    return c if lay is None else [c] * lay.n_regs


def lower_arange(lw, op, lay):
    start = op.attrs["start"]
    tv, m = lw.thread_coord(lay, 0)
    return [lw.combine_const(tv, m, lay.reg_coord(r)[0] + 0) if start == 0 else
            lw.b.add(lw.combine_const(tv, m, lay.reg_coord(r)[0]), ll.Constant(I32, start)) for r in range(lay.n_regs)]


def lower_splat(lw, op, lay):
    return [lw.scalar(op.operands[0])] * lay.n_regs


def lower_broadcast(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    sl = lay.project(src.shape)
    regs = lw.block(src, sl)
    idx = sl.reg_index_map()
    keep = [s != 1 or t == 1 for s, t in zip(src.shape, lay.shape)]
    out = []
    for r in range(lay.n_regs):
        c = tuple(x if k else 0 for x, k in zip(lay.reg_coord(r), keep))
        out.append(regs[idx[c]])
    return out


def lower_expand_dims(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    return list(lw.block(src, lay.squeeze(op.attrs["axis"])))


def lower_trans(lw, op, lay):
    perm = tuple(op.attrs["perm"])
    inv = tuple(perm.index(i) for i in range(len(perm)))
    return list(lw.block(op.operands[0], lay.trans(inv)))


def lower_reshape(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    if lay is None:  # a 1-element block to a scalar: every thread holds the element
        return lw.block(src, lw.layout_of(src))[0]
    return list(lw.block(src, lay.reshape(src.shape)))


def lower_assume(lw, op, lay):
    return map_elementwise(lw, op, lay, lambda x: x)


def lower_addptr(lw, op, lay):
    elt = mty(op.result.dtype.element_ty)
    return map_elementwise(lw, op, lay, lambda p, o: lw.b.gep(p, [o], source_etype=elt))


def lower_program_id(lw, op, lay):
    ax = "xyz"[op.attrs["axis"]]
    return lw.call(f"llvm.nvvm.read.ptx.sreg.ctaid.{ax}", I32, [])


def lower_num_programs(lw, op, lay):
    ax = "xyz"[op.attrs["axis"]]
    return lw.call(f"llvm.nvvm.read.ptx.sreg.nctaid.{ax}", I32, [])


# ---- arithmetic, comparisons, casts ----------------------------------------------------------

def binary(name):
    def rule(lw, op, lay):
        dt = op.result.dtype
        b = lw.b
        fl = dt.is_floating()
        half = dt.name in ("fp16", "bf16")
        sgn = is_signed(dt)
        t = lty(dt)
        contract = CONTRACT if lw.options.fp_fusion else ()

        def f(x, y):
            if name == "add":
                return b.fadd(x, y, flags=contract) if fl else b.add(x, y)
            if name == "sub":
                return b.fsub(x, y, flags=contract) if fl else b.sub(x, y)
            if name == "mul":
                return b.fmul(x, y, flags=contract) if fl else b.mul(x, y)
            if name == "fdiv":
                if dt.name == "fp32":
                    if op.attrs.get("ieee", False):
                        return b.fdiv(x, y)
                    return b.asm(ll.FunctionType(F32, [F32, F32]), "div.full.f32 $0, $1, $2;", "=r,r,r", [x, y], False)
                if half:
                    return lw.from_f32(b.fdiv(lw.to_f32(x, dt), lw.to_f32(y, dt)), dt)
                return b.fdiv(x, y)
            if name == "div":
                return b.sdiv(x, y) if sgn else b.udiv(x, y)
            if name == "rem":
                if fl:
                    if half:
                        return lw.from_f32(b.frem(lw.to_f32(x, dt), lw.to_f32(y, dt)), dt)
                    return b.frem(x, y)
                return b.srem(x, y) if sgn else b.urem(x, y)
            if name == "and":
                return b.and_(x, y)
            if name == "or":
                return b.or_(x, y)
            if name == "xor":
                return b.xor(x, y)
            if name == "shl":
                return b.shl(x, y)
            if name == "shr":
                return b.ashr(x, y) if sgn else b.lshr(x, y)
            if name in ("maximum", "minimum", "maximum_nan", "minimum_nan"):
                mx = name.startswith("maximum")
                if fl:
                    iname = ("llvm.maxnum" if mx else "llvm.minnum") if not name.endswith("_nan") else ("llvm.maximum" if mx else "llvm.minimum")
                    return lw.call(f"{iname}.{fsuffix(dt)}", t, [x, y])
                if dt.name == "int1":
                    return b.or_(x, y) if mx else b.and_(x, y)
                iname = ("llvm.smax" if mx else "llvm.smin") if sgn else ("llvm.umax" if mx else "llvm.umin")
                return lw.call(f"{iname}.i{dt.primitive_bitwidth}", t, [x, y])
            raise BackendError(f"binary op {name}", op.loc)
        return map_elementwise(lw, op, lay, f)
    return rule


def lower_cmp(lw, op, lay):
    dt = op.operands[0].dtype
    pred = op.attrs["pred"]
    b = lw.b
    sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[pred]

    def f(x, y):
        if dt.is_floating():
            return b.fcmp_unordered(sym, x, y) if pred == "ne" else b.fcmp_ordered(sym, x, y)
        if dt.is_ptr():
            x, y = b.ptrtoint(x, I64), b.ptrtoint(y, I64)
            return b.icmp_unsigned(sym, x, y)
        return b.icmp_signed(sym, x, y) if is_signed(dt) else b.icmp_unsigned(sym, x, y)
    return map_elementwise(lw, op, lay, f)


def lower_select(lw, op, lay):
    return map_elementwise(lw, op, lay, lambda c, x, y: lw.b.select(c, x, y))


def lower_fma(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        t = lty(dt)
        return map_elementwise(lw, op, lay, lambda x, y, z: lw.call(f"llvm.fma.{fsuffix(dt)}", t, [x, y, z]))
    return map_elementwise(lw, op, lay, lambda x, y, z: lw.b.add(lw.b.mul(x, y), z))


def lower_umulhi(lw, op, lay):
    dt = op.result.dtype
    n = dt.primitive_bitwidth
    w = ll.IntType(2 * n)
    b = lw.b
    if n in (32, 64):  # mul.hi.u32/u64 (what __nv_umulhi is); LLVM turns the wide form below into
        # a 64-bit multiply when one operand is a constant (Philox's multipliers)
        name, t = ("llvm.nvvm.mulhi.ui", I32) if n == 32 else ("llvm.nvvm.mulhi.ull", I64)
        return map_elementwise(lw, op, lay, lambda x, y: lw.call(name, t, [x, y]))

    def f(x, y):
        p = b.mul(b.zext(x, w), b.zext(y, w))
        return b.trunc(b.lshr(p, ll.Constant(w, n)), lty(dt))
    return map_elementwise(lw, op, lay, f)


def lower_cast(lw, op, lay):
    src, dst = op.operands[0].dtype, op.result.dtype
    rounding = op.attrs.get("rounding")
    if src.is_fp8() or dst.is_fp8():
        return map_elementwise(lw, op, lay, lambda x: fp8.cast(lw, x, src, dst, rounding))
    if rounding == "rtz":
        return map_elementwise(lw, op, lay, lambda x: fp8.round_toward_zero(lw, x, src, dst))
    merged = op.operands[0].owner is not None and op.operands[0].owner.name == "if"
    if merged and lay is not None and src.name == "fp32" and dst.name in ("fp16", "bf16") and lay.n_regs % 2 == 0:
        return _narrow_pairs(lw, op, lay, lty(dst))
    return map_elementwise(lw, op, lay, lambda x: cast_value(lw, x, src, dst))


def _narrow_pairs(lw, op, lay, half_t):
    """fp32 → fp16/bf16 of the values an `if` merges, two registers at a time (one vector fptrunc,
    cvt.rn.f16x2.f32 as Triton converts). Element by element, LLVM folds the conversions into the
    merge's phis when a branch yields a value converted up from 16 bits (tutorial 05 backward:
    `partial_db = dy` or `dy + load(DB)`), and ptxas keeps such 16-bit phis one per 32-bit register:
    live across the spin lock before the `if`, that cost 38 registers at N=8192 (166, one CTA per
    SM, against Triton's 128). Only there: elsewhere the scalar form gives the same code."""
    b = lw.b
    (xs,) = lw.operands(op, lay)
    pair_f, pair_h = ll.VectorType(F32, 2), ll.VectorType(half_t, 2)
    lane = [ll.Constant(I32, 0), ll.Constant(I32, 1)]
    out = []
    for i in range(0, lay.n_regs, 2):
        v = b.insert_element(b.insert_element(ll.Constant(pair_f, None), xs[i], lane[0]), xs[i + 1], lane[1])
        h = b.fptrunc(v, pair_h)
        out += [b.extract_element(h, lane[0]), b.extract_element(h, lane[1])]
    return out


def cast_value(lw, x, src, dst):
    b = lw.b
    if src == dst:
        return x
    st, dt_ = lty(src), lty(dst)
    if dst.is_ptr():
        if src.is_ptr():
            return x
        return b.inttoptr(b.sext(x, I64) if src.primitive_bitwidth < 64 else x, GPTR)
    if src.is_ptr():
        v = b.ptrtoint(x, I64)
        return b.trunc(v, dt_) if dst.primitive_bitwidth < 64 else v
    if dst.name == "int1":
        if src.is_floating():
            return b.fcmp_unordered("!=", x, ll.Constant(st, 0.0)) if src.name not in ("fp16", "bf16") else \
                b.fcmp_unordered("!=", b.fpext(x, F32), ll.Constant(F32, 0.0))
        return b.icmp_unsigned("!=", x, ll.Constant(st, 0))
    if src.is_floating() and dst.is_floating():
        if src.primitive_bitwidth < dst.primitive_bitwidth or (src.name, dst.name) in (("fp16", "bf16"), ("bf16", "fp16")):
            if (src.name, dst.name) in (("fp16", "bf16"), ("bf16", "fp16")):
                return b.fptrunc(b.fpext(x, F32), dt_)
            return b.fpext(x, dt_)
        if src.name == "fp64" and dst.name in ("fp16", "bf16"):
            return b.fptrunc(x, dt_)  # cvt.rn from f64 directly
        return b.fptrunc(x, dt_)
    if src.is_floating():
        xf = x
        if src.name in ("fp16", "bf16"):
            xf = b.fpext(x, F32)
        return b.fptosi(xf, dt_) if is_signed(dst) else b.fptoui(xf, dt_)
    if dst.is_floating():
        if dst.name in ("fp16", "bf16"):
            v = b.sitofp(x, F32) if is_signed(src) else b.uitofp(x, F32)
            return b.fptrunc(v, dt_)
        return b.sitofp(x, dt_) if is_signed(src) else b.uitofp(x, dt_)
    # int → int
    sb, db = src.primitive_bitwidth, dst.primitive_bitwidth
    if sb == db:
        return x
    if sb > db:
        return b.trunc(x, dt_)
    return b.sext(x, dt_) if is_signed(src) else b.zext(x, dt_)


def lower_bitcast(lw, op, lay):
    dst = lty(op.result.dtype)
    src = op.operands[0].dtype
    b = lw.b

    def f(x):
        if src.is_ptr():
            return b.ptrtoint(x, dst)
        if op.result.dtype.is_ptr():
            return b.inttoptr(x, dst)
        return b.bitcast(x, dst)
    return map_elementwise(lw, op, lay, f)


def lower_not(lw, op, lay):
    dt = op.result.dtype
    return map_elementwise(lw, op, lay, lambda x: lw.b.xor(x, ll.Constant(lty(dt), -1)))


def lower_neg(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        return map_elementwise(lw, op, lay, lambda x: lw.b.fneg(x))
    return map_elementwise(lw, op, lay, lambda x: lw.b.sub(ll.Constant(lty(dt), 0), x))


def lower_abs(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        return map_elementwise(lw, op, lay, lambda x: lw.call(f"llvm.fabs.{fsuffix(dt)}", lty(dt), [x]))
    return map_elementwise(lw, op, lay, lambda x: lw.call(f"llvm.abs.i{dt.primitive_bitwidth}", lty(dt), [x, ll.Constant(I1, 0)]))


# ---- math functions (fp32 through approximate PTX instructions or libdevice) -----------------

def _approx(lw, name, x):
    return lw.call(name, F32, [x])


def _exp2_f32(lw, x):
    return _approx(lw, "llvm.nvvm.ex2.approx.f", x)


def math_f32(lw, name, x, fast):
    """One fp32 math function (x: float)."""
    b = lw.b
    c = lambda v: ll.Constant(F32, v)  # noqa: E731
    if name == "exp":
        return _exp2_f32(lw, b.fmul(x, c(LOG2E)))
    if name == "exp2":
        # Triton's exp2 (libdevice's exp2f under ftz) flushes denormal results: one MUFU.EX2, where
        # the denormal-keeping ex2 costs a compare and two multiplies more (softmax's inner loop);
        # enable_reflect_ftz=False asks for the denormals
        if lw.options.reflect_ftz is False:
            return _approx(lw, "llvm.nvvm.ex2.approx.f", x)
        return _approx(lw, "llvm.nvvm.ex2.approx.ftz.f", x)
    if name == "log":
        return b.fmul(_approx(lw, "llvm.nvvm.lg2.approx.f", x), c(LN2))
    if name == "log2":
        return _approx(lw, "llvm.nvvm.lg2.approx.f", x)
    if name == "sqrt":
        if fast:
            return _approx(lw, "llvm.nvvm.sqrt.approx.f", x)
        return lw.call("llvm.sqrt.f32", F32, [x])
    if name == "rsqrt":
        return _approx(lw, "llvm.nvvm.rsqrt.approx.f", x)
    if name in ("sin", "cos", "erf", "tanh") and lw.has_libdevice():
        # precise, like Triton (libdevice); `fast` is not honoured here: sin.approx is wrong
        # for large arguments (rotary embeddings), and Triton's tl.sin is precise too
        return lw.call(f"__nv_{name}f", F32, [x])
    if name == "sin":
        return _approx(lw, "llvm.nvvm.sin.approx.f", x)
    if name == "cos":
        return _approx(lw, "llvm.nvvm.cos.approx.f", x)
    if name == "floor":
        return lw.call("llvm.floor.f32", F32, [x])
    if name == "ceil":
        return lw.call("llvm.ceil.f32", F32, [x])
    if name == "tanh":
        if fast:
            return _approx(lw, "llvm.nvvm.tanh.approx.f32", x)
        # |x| < 0.3: odd Taylor polynomial; else sign(x) * (1 - 2 / (exp(2|x|) + 1))
        ax = lw.call("llvm.fabs.f32", F32, [x])
        e = _exp2_f32(lw, b.fmul(ax, c(2 * LOG2E)))
        big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(e, c(1.0))))
        big = lw.call("llvm.copysign.f32", F32, [big, x])
        x2 = b.fmul(x, x)
        p = c(62.0 / 2835.0)
        for k in (-17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0):
            p = lw.call("llvm.fma.f32", F32, [p, x2, c(k)])
        small = lw.call("llvm.fma.f32", F32, [b.fmul(p, x2), x, x])
        return b.select(b.fcmp_ordered("<", ax, c(0.3)), small, big)
    if name == "erf":
        ax = lw.call("llvm.fabs.f32", F32, [x])
        # |x| < 0.5: Taylor series of erf; else Abramowitz–Stegun 7.1.26 (abs error < 1.5e-7)
        x2 = b.fmul(x, x)
        coef = [1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360]
        p = c(coef[-1])
        for k in reversed(coef[:-1]):
            p = lw.call("llvm.fma.f32", F32, [p, x2, c(k)])
        small = b.fmul(b.fmul(p, x), c(2.0 / math.sqrt(math.pi)))
        t = b.fdiv(c(1.0), lw.call("llvm.fma.f32", F32, [ax, c(0.3275911), c(1.0)]))
        q = c(1.061405429)
        for k in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            q = lw.call("llvm.fma.f32", F32, [q, t, c(k)])
        q = b.fmul(q, t)
        ex = _exp2_f32(lw, b.fmul(b.fneg(b.fmul(ax, ax)), c(LOG2E)))
        big = b.fsub(c(1.0), b.fmul(q, ex))
        big = lw.call("llvm.copysign.f32", F32, [big, x])
        return b.select(b.fcmp_ordered("<", ax, c(0.5)), small, big)
    raise BackendError(f"math function {name}")


def lower_math(lw, op, lay):
    name = op.name
    dt = op.result.dtype
    fast = bool(op.attrs.get("fast", False))
    if dt.name == "fp64":
        if name in ("sqrt", "floor", "ceil"):
            iname = {"sqrt": "llvm.sqrt.f64", "floor": "llvm.floor.f64", "ceil": "llvm.ceil.f64"}[name]
            return map_elementwise(lw, op, lay, lambda x: lw.call(iname, F64, [x]))
        if name == "rsqrt":
            return map_elementwise(lw, op, lay, lambda x: lw.call("llvm.nvvm.rsqrt.approx.d", F64, [x]) if fast else
                         lw.b.fdiv(ll.Constant(F64, 1.0), lw.call("llvm.sqrt.f64", F64, [x])))
        if not lw.has_libdevice():
            raise BackendError(f"tl.{name} on fp64 needs libdevice (libdevice.10.bc not found)", op.loc)
        return map_elementwise(lw, op, lay, lambda x: lw.call(f"__nv_{name}", F64, [x]))
    if not dt.is_floating():
        raise BackendError(f"tl.{name} needs a floating-point operand, got {dt}", op.loc)
    return map_elementwise(lw, op, lay, lambda x: lw.from_f32(math_f32(lw, name, lw.to_f32(x, dt), fast), dt))


# ---- libdevice calls and inline assembly -----------------------------------------------------

def lower_extern_elementwise(lw, op, lay):
    """A libdevice function per element; module_text copies its definition into the module."""
    symbol = op.attrs["symbol"]
    if not lw.has_libdevice():
        raise BackendError(f"{symbol} needs libdevice (libdevice.10.bc not found: install nvidia-cuda-nvcc "
                           "or set BLOCKTUNE_LIBDEVICE)", op.loc)
    ret = lty(op.result.dtype)
    return map_elementwise(lw, op, lay, lambda *xs: lw.call(symbol, ret, list(xs)))


def lower_map_elementwise(lw, op):
    """tl.map_elementwise: the region inlined once per `pack` consecutive registers of a thread (in
    the result's layout), so its branches are per element; a short last group repeats the last
    register and drops its extra results."""
    pack = op.attrs["pack"]
    lay = lw.want(op.results[0])
    n = lay.n_regs
    args = [lw.block(o, lay) for o in op.operands]
    call = region_combiner(lw, op.regions[0])
    values = [[] for _ in op.results]
    for g in range(-(-n // pack)):
        regs = [a[min(g * pack + j, n - 1)] for a in args for j in range(pack)]
        outs = call(regs, ())
        for k, vals in enumerate(values):
            vals.extend(outs[k * pack:(k + 1) * pack])
    for res, regs in zip(op.results, values):
        lw.set_block(res, lay, regs[:n])


def lower_inline_asm(lw, op):
    """Triton's elementwise inline asm: one asm instance per `pack` consecutive registers of a thread.
    As in Triton, each operand and result of an instance is pack / k registers, k = min(pack,
    max(1, 32 // bits)) elements each: with k > 1, a <k x T> bitcast to one integer register (four
    uint8 in one "r"), else one element per register (four int32: "r,r,r,r")."""
    b = lw.b
    pack = op.attrs["pack"]
    results = op.results
    lay = lw.want(results[0]) if results[0].is_block else None
    n = lay.n_regs if lay is not None else 1
    if lay is None and pack > 1:
        raise BackendError("tl.inline_asm_elementwise with pack > 1 needs block arguments", op.loc)
    groups = -(-n // pack)
    args = [lw.block(o, lay) if lay is not None else [lw.scalar(o)] for o in op.operands]

    def per_reg(dt) -> int:
        k = ir.inline_asm_elements_per_register(dt, pack)
        if k > 1 and dt.primitive_bitwidth * k not in (16, 32):
            raise BackendError(f"tl.inline_asm_elementwise: {k} elements of {dt} do not make one 16- or 32-bit "
                               "register", op.loc)
        return k

    def reg_types(dt):
        """(register type, vector type or None) of each of an instance's registers for `dt`."""
        k, t = per_reg(dt), lty(dt)
        return [(t, None) if k == 1 else (ll.IntType(dt.primitive_bitwidth * k), ll.VectorType(t, k))] * (pack // k)

    def pack_regs(regs, dt):
        """Per instance, its registers for this operand."""
        k = per_reg(dt)
        out = []
        for g in range(groups):
            elems = [regs[min(g * pack + j, n - 1)] for j in range(pack)]
            if k == 1:
                out.append(elems)
                continue
            group = []
            whole, vec = reg_types(dt)[0]
            for r in range(pack // k):
                v = ll.Constant(vec, ll.Undefined)
                for j in range(k):
                    v = b.insert_element(v, elems[r * k + j], ll.Constant(I32, j))
                group.append(b.bitcast(v, whole))
            out.append(group)
        return out

    ins = [pack_regs(a, o.dtype) for a, o in zip(args, op.operands)]
    outs = [reg_types(r.dtype) for r in results]
    flat_out = [t for regs in outs for t, _ in regs]
    ret = flat_out[0] if len(flat_out) == 1 else ll.LiteralStructType(flat_out)
    fty = ll.FunctionType(ret, [reg.type for a in ins for reg in a[0]])
    values = [[] for _ in results]
    for g in range(groups):
        r = b.asm(fty, op.attrs["asm"], op.attrs["constraints"], [reg for a in ins for reg in a[g]], not op.attrs["pure"])
        i = 0
        for k, regs in enumerate(outs):
            for whole, vec in regs:
                v = r if len(flat_out) == 1 else b.extract_value(r, i)
                i += 1
                if vec is None:
                    values[k].append(v)
                else:
                    v = b.bitcast(v, vec)
                    values[k].extend(b.extract_element(v, ll.Constant(I32, j)) for j in range(vec.count))
    for res, regs in zip(results, values):
        if lay is None:
            lw.vals[res.id] = regs[0]
        else:
            lw.set_block(res, lay, regs[:n])
