"""`tl.device_print` and `tl.device_assert` on the GPU, as Triton lowers them.

Print: one `vprintf` per element.
Each line reads `pid (x, y, z) idx (i, j) prefix: value`, the interpreter's format (compiler/ir.py
print_text), each index padded to the width of its dim's largest, as Triton pads them. Every
element is printed once: a register whose element another register of the same thread holds is
skipped, and only the first holder among threads that replicate an element prints it (the
layout's owner predicate); a scalar, and a print without values, is printed by every thread, as
Triton does. Floats are
printed with `%f` (varargs promote them to double), integers with `%d`/`%u`/`%lld`/`%llu`,
pointers and `hex=True` values as zero-padded hex. `vprintf` is resolved by the driver when it
loads the module, as for CUDA C's printf.

Assert (only compiled in debug mode: `@jit(debug=True)`, TRITON_DEBUG=1 or BLOCKTUNE_DEBUG=1, as
Triton): a thread holding a false element calls `__assertfail(message, file, line, function, 1)`,
CUDA C's assert: the kernel stops with CUDA_ERROR_ASSERT after printing where.
"""
from __future__ import annotations

from llvmlite import ir as ll

from .. import ir
from .llvm_types import F64, I32, I64

_PTR = ll.PointerType()


def _vprintf(lw) -> ll.Function:
    f = lw.module.globals.get("vprintf")
    if f is None:
        f = ll.Function(lw.module, ll.FunctionType(I32, [_PTR, _PTR]), name="vprintf")
    return f


def _string(lw, text: str) -> ll.Value:
    data = bytearray(text.encode()) + b"\0"
    cache = lw.strings
    g = cache.get(text)
    if g is None:
        ty = ll.ArrayType(ll.IntType(8), len(data))
        g = ll.GlobalVariable(lw.module, ty, name=f"printf_fmt_{len(cache)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ll.Constant(ty, data)
        cache[text] = g
    return lw.b.gep(g, [ll.Constant(I32, 0), ll.Constant(I32, 0)], inbounds=True)


def _value(lw, x: ll.Value, dt, hexa: bool) -> tuple[str, ll.Value]:
    """printf conversion and the argument for one element."""
    b = lw.b
    if ir.is_pointer(dt):
        return "0x%016llx", b.ptrtoint(x, I64)
    bits = dt.primitive_bitwidth
    if dt.is_floating():
        if hexa:
            return f"0x%0{bits // 4}{'ll' if bits == 64 else ''}x", _widen(b, b.bitcast(x, ll.IntType(bits)), bits, False)
        return "%f", x if bits == 64 else b.fpext(x, F64)
    if hexa:
        return f"0x%0{max(1, bits // 4)}{'ll' if bits == 64 else ''}x", _widen(b, x, bits, False)
    if dt.is_bool():
        return "%d", b.zext(x, I32)
    signed = dt.is_int_signed()
    if bits == 64:
        return ("%lld" if signed else "%llu"), x
    return ("%d" if signed else "%u"), _widen(b, x, bits, signed)


def _widen(b, x, bits: int, signed: bool):
    if bits == 64:
        return x
    if bits == 32:
        return x
    return b.sext(x, I32) if signed else b.zext(x, I32)


def _emit(lw, fmt: str, args: list, pred) -> None:
    """vprintf(fmt, &{args}) under `pred` (None: always)."""
    b = lw.b

    def call():
        st = ll.LiteralStructType([a.type for a in args])
        buf = lw.pb.alloca(st)            # in the entry block: one slot per call site
        for i, a in enumerate(args):
            b.store(a, b.gep(buf, [ll.Constant(I32, 0), ll.Constant(I32, i)], inbounds=True))
        b.call(_vprintf(lw), [_string(lw, fmt), buf])

    if pred is None:
        call()
    else:
        with b.if_then(pred):
            call()


def lower_print(lw, op) -> None:
    text = ir.print_text(op.attrs.get("prefix", ""), len(op.operands))
    hexa = bool(op.attrs.get("hex", False))
    pid = [lw.call(f"llvm.nvvm.read.ptx.sreg.ctaid.{a}", I32, []) for a in "xyz"]
    head = "pid (%d, %d, %d) idx ("
    many = len(op.operands) > 1
    if not op.operands:      # every thread prints it, without an index, as in Triton
        _emit(lw, f"pid (%d, %d, %d){text}".rstrip() + "\n", pid, None)
        return
    for k, v in enumerate(op.operands):
        tag = f"(operand {k}) " if many else ""
        dt = v.dtype
        if not v.is_block:   # every thread prints a scalar, as in Triton
            conv, arg = _value(lw, lw.scalar(v), dt, hexa)
            _emit(lw, f"{head}){text}{tag}{conv}\n", pid + [arg], None)
            continue
        lay = lw.want(v)
        regs = lw.block(v, lay)
        owner = lw.owner_pred(lay)
        seen = set()
        for r, x in enumerate(regs):
            coord = lay.reg_coord(r)
            # registers whose bits select a zero basis hold an element another register has
            key = tuple(coord)
            if any((r >> j) & 1 and not any(bv) for j, bv in enumerate(lay.reg)) or key in seen:
                continue
            seen.add(key)
            idx = [lw.index(lay, d, r) for d in range(len(v.shape))]
            conv, arg = _value(lw, x, dt, hexa)
            # each index as wide as the dim's largest (Triton's `idx ( 7)` for 128 elements)
            widths = [len(str(max(n - 1, 0))) for n in v.shape]
            fmt = f"{head}{', '.join(f'%{w}d' for w in widths)}){text}{tag}{conv}\n"
            _emit(lw, fmt, pid + idx + [arg], owner)


def _assertfail(lw) -> ll.Function:
    f = lw.module.globals.get("__assertfail")
    if f is None:
        f = ll.Function(lw.module, ll.FunctionType(ll.VoidType(), [_PTR, _PTR, I32, _PTR, I64]),
                        name="__assertfail")
    return f


def lower_assert(lw, op) -> None:
    if not lw.options.debug:   # compiled in debug mode only, as in Triton
        return
    b = lw.b
    (cond,) = op.operands
    regs = lw.block(cond, lw.want(cond)) if cond.is_block else [lw.scalar(cond)]
    bad = None
    for x in regs:
        x = x if x.type == ll.IntType(1) else b.icmp_unsigned("!=", x, ll.Constant(x.type, 0))
        nx = b.not_(x)
        bad = nx if bad is None else b.or_(bad, nx)
    loc = op.loc
    with b.if_then(bad, likely=False):
        b.call(_assertfail(lw), [_string(lw, str(op.attrs.get("message", ""))), _string(lw, str(loc.file)),
                                 ll.Constant(I32, int(loc.line)), _string(lw, str(loc.fn or lw.fn.name)),
                                 ll.Constant(I64, 1)])
