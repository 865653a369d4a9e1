"""Axis info: per-dim contiguity, divisibility and constancy of integer/pointer block values.

Like Triton's AxisInfo (lib/Analysis/AxisInfo.cpp), for each dim d of a value:
  contiguity[d]  — length of runs along d whose values increase by 1 (elements, also for pointers)
  divisibility[d]— the first value of every such run is a multiple of this (bytes for pointers)
  constancy[d]   — length of runs along d with equal values
Scalars are treated as rank-1 values of size 1. `value` is the constant, when known.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from .. import ir

MAX_DIV = 1 << 30


def pow2_div(v: int) -> int:
    """Largest power of two dividing v (capped)."""
    if v == 0:
        return MAX_DIV
    return min(v & -v, MAX_DIV)


@dataclass(frozen=True)
class AxisInfo:
    contiguity: tuple
    divisibility: tuple
    constancy: tuple
    value: int | None = None

    @property
    def rank(self) -> int:
        return len(self.contiguity)

    def elem_div(self, d: int) -> int:
        """Divisibility of every element along d (a run longer than 1 has odd members)."""
        return self.divisibility[d] if self.contiguity[d] == 1 else 1


def _shape(v: ir.Value) -> tuple:
    return v.shape or (1,)


def join(a: AxisInfo, b: AxisInfo) -> AxisInfo:
    """What holds for a value that is either a or b."""
    if a.rank != b.rank:
        return unknown((1,) * max(a.rank, b.rank))
    return AxisInfo(tuple(gcd(x, y) for x, y in zip(a.contiguity, b.contiguity)),
                    tuple(gcd(x, y) for x, y in zip(a.divisibility, b.divisibility)),
                    tuple(gcd(x, y) for x, y in zip(a.constancy, b.constancy)),
                    a.value if a.value == b.value else None)


def unknown(shape) -> AxisInfo:
    r = len(shape)
    return AxisInfo((1,) * r, (1,) * r, (1,) * r)


def constant(shape, value: int | None, div: int = 1) -> AxisInfo:
    r = len(shape)
    d = pow2_div(value) if value is not None else div
    return AxisInfo((1,) * r, (d,) * r, tuple(shape), value)


class AxisAnalysis:
    def __init__(self, fn: ir.Function):
        self.info: dict[int, AxisInfo] = {}
        for i, a in enumerate(fn.args):
            attrs = fn.arg_attrs[i] if i < len(fn.arg_attrs) else {}
            if attrs.get("equal_to_1"):
                self.info[a.id] = constant((1,), 1)
            else:
                self.info[a.id] = constant((1,), None, int(attrs.get("divisibility", 1) or 1))
        self._block(fn.body)

    def get(self, v: ir.Value) -> AxisInfo:
        i = self.info.get(v.id)
        return i if i is not None else unknown(_shape(v))

    # ---------------------------------------------------------------------------------------
    def _block(self, block: ir.Block):
        for op in block.ops:
            for r in op.regions:
                for a in r.args:
                    self.info.setdefault(a.id, unknown(_shape(a)))
            if op.name == "for":
                self._for(op)
                continue
            for r in op.regions:
                self._block(r)
            if op.name == "if" and op.results:
                ys = [r.terminator for r in op.regions if r.terminator is not None]
                for i, res in enumerate(op.results):
                    infos = [self.get(y.operands[i]) for y in ys if i < len(y.operands)]
                    if len(infos) == 2:
                        self.info[res.id] = join(*infos)
                continue
            if len(op.results) == 1:
                try:
                    res = self._visit(op)
                except Exception:  # analysis is advisory only
                    res = None
                if res is not None:
                    self.info[op.result.id] = res

    def _for(self, op: ir.Op):
        """Loop-carried values: the join of the init and the yielded info, to a fixed point."""
        lb, ub, step = (self.get(o) for o in op.operands[:3])
        body = op.regions[0]
        d = gcd(lb.divisibility[0], step.divisibility[0])
        self.info[body.args[0].id] = constant((1,), None, d)
        cur = [self.get(o) for o in op.operands[3:]]
        y = body.terminator
        for _ in range(4):
            for a, c in zip(body.args[1:], cur):
                self.info[a.id] = c
            self._block(body)
            if y is None:
                break
            new = [join(c, self.get(v)) for c, v in zip(cur, y.operands)]
            if new == cur:
                break
            cur = new
        else:
            cur = [unknown(_shape(a)) for a in body.args[1:]]
            for a, c in zip(body.args[1:], cur):
                self.info[a.id] = c
            self._block(body)
        for r, c in zip(op.results, cur):
            self.info[r.id] = c

    def _visit(self, op: ir.Op) -> AxisInfo | None:
        name = op.name
        out = op.result
        shape = _shape(out)
        r = len(shape)
        ins = [self.get(o) if o is not None else None for o in op.operands]
        elt = out.dtype
        if name == "const":
            v = op.attrs["value"]
            if isinstance(v, bool) or not isinstance(v, int):
                return constant(shape, None, 1)
            return constant(shape, v)
        if name == "arange":
            start = op.attrs["start"]
            return AxisInfo((shape[0],), (pow2_div(start),), (1,))
        if name in ("program_id", "num_programs"):
            return unknown(shape)
        if name == "splat":
            a = ins[0]
            return AxisInfo((1,) * r, (a.divisibility[0],) * r, tuple(shape), a.value)
        if name == "broadcast":
            a = ins[0]
            src = _shape(op.operands[0])
            c, dv, k = [], [], []
            for d in range(r):
                if src[d] == 1 and shape[d] != 1:
                    c.append(1); dv.append(a.elem_div(d) if a.rank == r else a.divisibility[0]); k.append(shape[d])
                else:
                    c.append(a.contiguity[d]); dv.append(a.divisibility[d]); k.append(a.constancy[d])
            return AxisInfo(tuple(c), tuple(dv), tuple(k), a.value)
        if name == "expand_dims":
            a = ins[0]
            ax = op.attrs["axis"]
            if not op.operands[0].shape:  # scalar → [1]
                return AxisInfo((1,), a.divisibility[:1], (1,), a.value)
            ed = min(a.elem_div(d) for d in range(a.rank))
            return AxisInfo(a.contiguity[:ax] + (1,) + a.contiguity[ax:], a.divisibility[:ax] + (ed,) + a.divisibility[ax:],
                            a.constancy[:ax] + (1,) + a.constancy[ax:], a.value)
        if name == "trans":
            a = ins[0]
            p = op.attrs["perm"]
            return AxisInfo(tuple(a.contiguity[i] for i in p), tuple(a.divisibility[i] for i in p),
                            tuple(a.constancy[i] for i in p), a.value)
        if name == "assume":
            a = ins[0]
            c, dv = list(a.contiguity), list(a.divisibility)
            mo, mc = op.attrs.get("multiple_of"), op.attrs.get("max_contiguous")
            if mo:
                mo = tuple(mo) if isinstance(mo, (tuple, list)) else (mo,)
                for d in range(min(r, len(mo))):
                    dv[d] = max(dv[d], int(mo[d]))
            if mc:
                mc = tuple(mc) if isinstance(mc, (tuple, list)) else (mc,)
                for d in range(min(r, len(mc))):
                    c[d] = max(c[d], int(mc[d]))
            return AxisInfo(tuple(c), tuple(dv), a.constancy, a.value)
        if name == "cast":
            src = op.operands[0].dtype
            if (src.is_int() or src.is_ptr()) and (elt.is_int() or elt.is_ptr()) and not elt.is_bool():
                return ins[0]
            return AxisInfo((1,) * r, (1,) * r, ins[0].constancy)
        if name in ("add", "sub", "addptr"):
            a, b = ins
            scale = elt.element_ty.itemsize if name == "addptr" else 1
            c, dv, k = [], [], []
            for d in range(r):
                if name == "sub":
                    c.append(gcd(a.contiguity[d], b.constancy[d]))
                else:
                    c.append(max(gcd(a.contiguity[d], b.constancy[d]), gcd(a.constancy[d], b.contiguity[d])))
                dv.append(gcd(a.divisibility[d], min(b.divisibility[d] * scale, MAX_DIV)))
                k.append(gcd(a.constancy[d], b.constancy[d]))
            val = None
            if a.value is not None and b.value is not None and name != "addptr":
                val = a.value + b.value if name == "add" else a.value - b.value
                return constant(shape, val)
            return AxisInfo(tuple(c), tuple(dv), tuple(k), val)
        if name == "mul":
            a, b = ins
            c, dv, k = [], [], []
            for d in range(r):
                ca = a.contiguity[d] if b.value == 1 else 1
                cb = b.contiguity[d] if a.value == 1 else 1
                c.append(max(ca, cb, 1))
                da = a.divisibility[d] if b.value == 1 else a.elem_div(d)
                db = b.divisibility[d] if a.value == 1 else b.elem_div(d)
                dv.append(min(da * db, MAX_DIV))
                k.append(gcd(a.constancy[d], b.constancy[d]))
            if a.value is not None and b.value is not None:
                return constant(shape, a.value * b.value)
            return AxisInfo(tuple(c), tuple(dv), tuple(k))
        if name in ("div", "rem") and elt.is_int():
            a, b = ins
            c, dv, k = [], [], []
            for d in range(r):
                kk = gcd(a.constancy[d], b.constancy[d])
                uniform = b.constancy[d] >= shape[d] or (b.value is not None)
                bdiv = pow2_div(b.value) if b.value is not None else b.divisibility[d]
                if uniform and (b.value is None or b.value > 0):
                    run = gcd(a.contiguity[d], gcd(a.divisibility[d], bdiv))
                    if name == "div":
                        # a contiguous run starting at a multiple of `run` stays in one quotient
                        kk = max(kk, run)
                        c.append(1)
                        dv.append(1)
                    else:
                        c.append(run)
                        dv.append(gcd(a.divisibility[d], bdiv))
                else:
                    c.append(1)
                    dv.append(1)
                k.append(kk)
            return AxisInfo(tuple(c), tuple(dv), tuple(k))
        if name == "cmp":
            a, b = ins
            pred = op.attrs["pred"]
            k = []
            for d in range(r):
                kk = gcd(a.constancy[d], b.constancy[d])
                if pred in ("lt", "le", "gt", "ge"):
                    # contiguous lhs vs. constant rhs: constant over runs aligned to gcd(divisibilities)
                    if b.constancy[d] >= shape[d] and a.contiguity[d] > 1:
                        kk = max(kk, gcd(a.contiguity[d], gcd(a.divisibility[d], b.divisibility[d])))
                    if a.constancy[d] >= shape[d] and b.contiguity[d] > 1:
                        kk = max(kk, gcd(b.contiguity[d], gcd(a.divisibility[d], b.divisibility[d])))
                k.append(kk)
            return AxisInfo((1,) * r, (1,) * r, tuple(k))
        if name in ("and", "or", "xor", "maximum", "minimum", "shl", "shr"):
            a, b = ins
            k = tuple(gcd(x, y) for x, y in zip(a.constancy, b.constancy))
            if name == "shl" and b.value is not None and 0 <= b.value < 31:
                return AxisInfo((1,) * r, tuple(min(a.elem_div(d) << b.value, MAX_DIV) for d in range(r)), k)
            return AxisInfo((1,) * r, (1,) * r, k)
        if name == "select":
            cnd, a, b = ins
            k = tuple(gcd(gcd(x, y), z) for x, y, z in zip(cnd.constancy, a.constancy, b.constancy))
            c = tuple(gcd(x, y) if z >= s else 1 for x, y, z, s in zip(a.contiguity, b.contiguity, cnd.constancy, shape))
            dv = tuple(gcd(x, y) for x, y in zip(a.divisibility, b.divisibility))
            return AxisInfo(c, dv, k)
        if name in ("not", "neg", "abs") or name in ir.UNARY_OPS:
            return AxisInfo((1,) * r, (1,) * r, ins[0].constancy)
        return None
