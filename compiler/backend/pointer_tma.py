"""Pointer tiles of a wgmma K loop through the bulk tensor copy engine (TMA), on sm_90.

A `load` that feeds a tl.dot in a `for` loop becomes a `tma_load` of a tensor map the launch
builds from the kernel's arguments (a hidden parameter `<base>.tmap`, compiler/runtime/
pointer_maps.py) when the backend can prove the tile is a box of a row-major 2-D tensor:

  address   base + r[:, None] * s + c[None, :]     base and s kernel parameters (s may be a
            (+ n * adv, the pointer advanced by adv at each of the loop's n iterations so far)
            constant multiple of one), the inner stride the constant 1 (specialization), adv a
            loop-invariant multiple of s (the tile moves down) or a constant (it moves right)
  each dim  either a run `x0 + arange` bounded by the mask — a term `v < B` of the mask's `&` with
            `v = v0 + arange` and `B - v0 == D - x0 - n * shift`, so that the term is exactly
            "the element's coordinate < D" and the map's dim D (a linear form in the kernel's
            integer parameters) zero-fills what the mask sets to `other` = 0 — or a wrapped run
            `(x0 + arange) % D` (tutorial 03's `offs_am`), unmasked.

A wrapped run differs from the tile TMA copies only where `x0 + i >= D` (TMA zero-fills those rows,
the pointer load wraps them to row `x0 + i - D`), which is allowed only when nobody can see the
difference: the wrapped dim is the dot's M (A's rows) or N (B's columns), the accumulator is
carried through the loop by the dot alone, and after the loop every use of it is elementwise up to
stores whose mask has the term `x0' + arange < D` on that dim with x0' == x0 — the rows that differ
are never written. (Rows with `x0 + i < 0` would be an out-of-bounds access of the pointer load.)

Loads the rule does not prove stay as they are (the cp.async pipeline). The rule runs under
knobs.codegen.pointer_tma (on by default); BLOCKTUNE_POINTER_TMA=0 or BLOCKTUNE_NO_TMA=1 turns it off.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import ir, tensor_map
from ..language import dtypes as T
from .dot_layouts import uses_wgmma

MAP_SUFFIX = ".tmap"


# ---------------------------------------------------------------------------------------------
# linear forms over scalar SSA values: {atom value id (1 = the constant term): coefficient}

def _lin(v, atoms: dict) -> dict | None:
    op = v.owner
    if op is not None and op.name in ("splat",):
        return _lin(op.operands[0], atoms)
    if op is not None and op.name == "const" and isinstance(op.attrs.get("value"), int) \
            and not isinstance(op.attrs.get("value"), bool):
        return {1: Fraction(op.attrs["value"])}
    if op is not None and op.name in ("add", "sub") and op.operands[0].dtype.is_int():
        a, b = _lin(op.operands[0], atoms), _lin(op.operands[1], atoms)
        if a is None or b is None:
            return None
        return _combine(a, b, 1 if op.name == "add" else -1)
    if op is not None and op.name == "mul" and op.operands[0].dtype.is_int():
        a, b = _lin(op.operands[0], atoms), _lin(op.operands[1], atoms)
        if a is None or b is None:
            return None
        if set(a) == {1}:
            return {k: c * a[1] for k, c in b.items()}
        if set(b) == {1}:
            return {k: c * b[1] for k, c in a.items()}
    if v.is_block and op is not None and op.name != "splat":
        return None
    atoms[v.id] = v
    return {v.id: Fraction(1)}


def _combine(a: dict, b: dict, sign: int) -> dict:
    out = dict(a)
    for k, c in b.items():
        out[k] = out.get(k, Fraction(0)) + sign * c
    return {k: c for k, c in out.items() if c != 0}


def _run(v, atoms: dict) -> dict | None:
    """A 1-D int block `x0 + arange(0, n)`: x0's linear form, else None."""
    op = v.owner
    if op is None:
        return None
    if op.name == "arange":
        return {1: Fraction(op.attrs["start"])} if op.attrs["start"] else {}
    if op.name == "add":
        a, b = op.operands
        for x, y in ((a, b), (b, a)):
            r = _run(x, atoms)
            s = _lin(y, atoms) if (y.owner is not None and y.owner.name in ("splat", "const")) else None
            if r is not None and s is not None:
                return _combine(r, s, 1)
    return None


def _strip(v, names=("broadcast",)):
    while v.owner is not None and v.owner.name in names:
        v = v.owner.operands[0]
    return v


def _expanded(v, axis: int):
    """The 1-D value behind `x[:, None]` (axis 1) or `x[None, :]` (axis 0), through broadcasts."""
    v = _strip(v)
    op = v.owner
    if op is not None and op.name == "expand_dims" and op.attrs.get("axis") == axis:
        return op.operands[0]
    return None


def _conjuncts(m) -> list:
    m = _strip(m)
    if m.owner is not None and m.owner.name == "and":
        return _conjuncts(m.owner.operands[0]) + _conjuncts(m.owner.operands[1])
    return [m]


def _bound_terms(mask, atoms: dict) -> list | None:
    """[(dim, v0 linear form, bound linear form)] for a mask made of `v < B` terms, else None."""
    terms = []
    for t in ([] if mask is None else _conjuncts(mask)):
        op = t.owner
        if op is None or op.name != "cmp" or op.attrs.get("pred") != "lt" \
                or not op.operands[0].dtype.is_int_signed():
            return None   # a signed `<` (an unsigned one would take a negative bound as huge)
        for dim, axis in ((0, 1), (1, 0)):
            x = _expanded(op.operands[0], axis)
            if x is not None:
                break
        else:
            return None
        v0 = _run(x, atoms)
        bound = _lin(_strip(op.operands[1]), atoms)
        if v0 is None or bound is None:
            return None
        terms.append((dim, v0, bound))
    return terms


# ---------------------------------------------------------------------------------------------
# the address

def _dim_index(v, atoms):
    """(x0, None) for a run `x0 + arange`, (x0, D) for `(x0 + arange) % D`, else None."""
    op = v.owner
    if op is not None and op.name == "rem" and op.operands[1].owner is not None \
            and op.operands[1].owner.name == "splat":
        x0 = _run(op.operands[0], atoms)
        d = _lin(op.operands[1], atoms)
        return None if x0 is None or d is None else (x0, d)
    x0 = _run(v, atoms)
    return None if x0 is None else (x0, None)


def _address(p, atoms):
    """(base param, row index, col index, row stride linear form) of `base + r*s + c` (any
    grouping of the terms into addptrs and adds), else None."""
    terms = []
    p = _strip(p)
    while p.owner is not None and p.owner.name == "addptr":
        terms += _addends(p.owner.operands[1])
        p = _strip(p.owner.operands[0])
    base = _strip(p, ("splat",))
    if base.owner is not None or base.is_block or len(terms) != 2:
        return None
    row = col = stride = None
    for t in terms:
        top = t.owner
        if top is None:
            return None
        factor, x = {1: Fraction(1)}, t
        if top.name == "mul":
            a, b = top.operands
            x, f = (a, b) if _strip(b).owner is not None and _strip(b).owner.name in ("splat", "const") else (b, a)
            factor = _lin(_strip(f), atoms)
            if factor is None:
                return None
        r, c = _expanded(x, 1), _expanded(x, 0)
        if r is not None and row is None:
            row, stride = r, factor
        elif c is not None and col is None and factor == {1: Fraction(1)}:
            col = c
        else:
            return None
    if row is None or col is None:
        return None
    return base, row, col, stride


def _addends(v) -> list:
    """The terms of a sum of 2-D offsets (through broadcasts)."""
    v = _strip(v)
    if v.owner is not None and v.owner.name == "add" and len(v.shape) == 2:
        return _addends(v.owner.operands[0]) + _addends(v.owner.operands[1])
    return [v]


# ---------------------------------------------------------------------------------------------

# ops whose element [i, j] depends only on their operands' elements [i, j]
ELEMENTWISE = {"cast", "bitcast", "cmp", "and", "or", "xor", "not", "shl", "shr", "add", "sub", "mul", "fdiv", "div",
               "rem", "maximum", "minimum", "maximum_nan", "minimum_nan", "neg", "abs", "exp", "exp2", "log", "log2",
               "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "floor", "ceil", "fma", "select", "extern_elementwise"}


def _stores_mask_off(fn, use_table, v, dim: int, x0: dict, d: dict, atoms: dict, depth: int = 0) -> bool:
    """Every use of `v` (an accumulator-shaped tile) is elementwise up to stores whose mask has
    the term `x0 + arange < d` on `dim`: elements past d on that dim are never written."""
    if depth > 32:
        return False
    for user in use_table.get(v.id, []):
        if user.name == "store":
            if user.operands[1] is not v or any(o is v for o in (user.operands[0], user.operands[2])):
                return False
            terms = _bound_terms(user.operands[2], atoms) if user.operands[2] is not None else None
            if terms is None or (dim, x0, d) not in terms:
                return False
            continue
        if user.name not in ELEMENTWISE or len(user.results) != 1 or user.result.shape != v.shape:
            return False
        if not _stores_mask_off(fn, use_table, user.result, dim, x0, d, atoms, depth + 1):
            return False
    return True


@dataclass
class _Candidate:
    """A load the rule takes: its loop-carried pointer (body arg j), the map's parts, and per dim
    (kind "wrap" | "mask", the copy's coordinate as a linear form, the map's bound)."""
    load: ir.Op
    j: int
    base: ir.Value
    stride: dict
    dims: list
    block: tuple
    params: dict

    @property
    def wrapped(self) -> list:
        return [(dim, at, d) for dim, (kind, at, d) in enumerate(self.dims) if kind == "wrap"]


def _match(fn, for_op, load, dot_op, operand: int, use_table, atoms):
    body = for_op.regions[0]
    ptr, mask = load.operands[0], (load.operands[1] if len(load.operands) > 1 else None)
    other = load.operands[2] if len(load.operands) > 2 else None
    if not _is_zero(other) or load.attrs.get("volatile") or len(load.result.shape) != 2:
        return None
    if ptr not in body.args[1:]:
        return None
    j = body.args.index(ptr)
    yld = body.ops[-1]
    nxt = yld.operands[j - 1].owner
    if nxt is None or nxt.name != "addptr" or nxt.operands[0] is not ptr:
        return None
    if [u for u in use_table.get(ptr.id, []) if u is not load and u is not nxt] \
            or use_table.get(nxt.result.id, []) != [yld] or use_table.get(for_op.results[j - 1].id):
        return None   # the pointer tile is carried for these loads alone (it leaves the loop)
    adv = _lin(nxt.operands[1], atoms)
    init = for_op.operands[3 + j - 1]
    found = _address(init, atoms)
    if adv is None or found is None or any(k == body.args[0].id for k in adv):
        return None
    base, row, col, stride = found
    rows = _dim_index(row, atoms)
    cols = _dim_index(col, atoms)
    if rows is None or cols is None:
        return None
    # the advance: down (a multiple of the row stride) or right (a constant: the inner stride is 1)
    if set(adv) <= {1}:
        shift_dim, shift = 1, adv.get(1, Fraction(0))
    elif len(stride) == 1 and len(adv) == 1 and set(adv) == set(stride):
        (k, c), = adv.items()
        shift_dim, shift = 0, c / stride[k]
    else:
        return None
    if shift.denominator != 1:
        return None
    lb, step = _lin(for_op.operands[0], atoms), _lin(for_op.operands[2], atoms)
    if lb is None or step is None or set(step) - {1} or not step.get(1):
        return None
    iv = body.args[0]
    atoms[iv.id] = iv
    # n = (iv - lb) / step iterations so far: the coordinate moves by n * shift
    n = _combine({iv.id: Fraction(1)}, lb, -1)
    n = {k: c / step[1] for k, c in n.items()}
    moved = {k: c * shift for k, c in n.items()}
    terms = _bound_terms(mask, atoms)
    if terms is None:
        return None
    dims = []
    for dim, (x0, wrap) in enumerate((rows, cols)):
        mine = [t for t in terms if t[0] == dim]
        if wrap is not None:
            # the wrapped dim: unmasked, not the moving one, and the dot's M or N
            if mine or dim == shift_dim and shift or (operand, dim) not in ((0, 0), (1, 1)):
                return None
            dims.append(("wrap", x0, wrap))
            continue
        if len(mine) != 1:
            return None
        _, v0, bound = mine[0]
        at = _combine(x0, moved, 1) if dim == shift_dim else dict(x0)
        d = _combine(_combine(bound, v0, -1), at, 1)   # B - v0 + coordinate
        dims.append(("mask", at, d))
    if len(terms) != sum(k == "mask" for k, _, _ in dims):
        return None
    params = {a.id: i for i, a in enumerate(fn.args)}
    for _, at, _ in dims:   # the copies' coordinates: i32 arithmetic in the loop
        if any(c.denominator != 1 for c in at.values()) or any(k != 1 and atoms[k].type != T.int32 for k in at):
            return None
    for kind, _, d in dims:
        if any(k != 1 and k not in params for k in d) or any(c.denominator != 1 for c in d.values()):
            return None
    if base not in fn.args or any(k != 1 and k not in params for k in stride):
        return None
    es = load.result.dtype.primitive_bitwidth // 8
    block = tuple(load.result.shape)
    div = {a.id: (fn.arg_attrs[i].get("divisibility", 1) if i < len(fn.arg_attrs) else 1) for i, a in enumerate(fn.args)}
    if div.get(base.id, 1) % 16 or not _stride_aligned(stride, div, es):
        return None
    if not tensor_map.eligible(block, es, "sm_90"):
        return None
    return _Candidate(load, j, base, stride, dims, block, params)


def _stride_aligned(stride: dict, div: dict, es: int) -> bool:
    if len(stride) != 1:
        return False
    (k, c), = stride.items()
    if c.denominator != 1 or c <= 0:
        return False
    unit = 1 if k == 1 else div.get(k, 1)
    return (int(c) * unit * es) % 16 == 0


def _is_zero(v) -> bool:
    if v is None:
        return True
    op = _strip(v, ("splat", "broadcast")).owner
    return op is not None and op.name == "const" and not op.attrs.get("value")


# ---------------------------------------------------------------------------------------------
# the rewrite

def _form_value(body_ops: list, where: int, form: dict, atoms: dict, loc) -> tuple:
    """Ops computing the i32 scalar of a linear form (inserted at `where`), and the value."""
    new, acc = [], None
    for k, c in sorted(form.items(), key=lambda kc: (kc[0] != 1, kc[0])):
        assert c.denominator == 1
        cst = ir.Op("const", [], [T.int32], {"value": int(c if k == 1 else c)}, loc=loc)
        new.append(cst)
        term = cst.result
        if k != 1 and c == 1:
            new.pop()
            term = atoms[k]
        elif k != 1:
            m = ir.Op("mul", [atoms[k], cst.result], [T.int32], loc=loc)
            new.append(m)
            term = m.result
        if acc is None:
            acc = term
        else:
            a = ir.Op("add", [acc, term], [T.int32], loc=loc)
            new.append(a)
            acc = a.result
    if acc is None:
        z = ir.Op("const", [], [T.int32], {"value": 0}, loc=loc)
        new.append(z)
        acc = z.result
    body_ops[where:where] = new
    return acc


def _spec_form(form: dict, fn, params: dict) -> list:
    """A launch-time linear form: [[param name or None (constant), coefficient]]."""
    return [[None if k == 1 else fn.arg_names[params[k]], int(c)] for k, c in sorted(form.items(), key=lambda kc: str(kc[0]))]


def rewrite(fn: ir.Function, options) -> list[dict]:
    """Turn the provable pointer tiles of `fn`'s dot loops into `tma_load`s of hidden tensor-map
    parameters (appended to the function's arguments, in place); returns their launch specs. Only
    loops the pipeline takes (num_stages ≥ 2, a constant positive step) and 16-bit wgmma dots
    (`options`: the compile's LoweringOptions): there the copies run ahead of the wgmma (a tma_load
    outside a pipeline waits for its tile)."""
    specs: list[dict] = []
    for for_op in [op for op in fn.walk() if op.name == "for"]:
        body = for_op.regions[0]
        dots = [op for op in body.walk() if op.name == "dot"]   # one, at the body's top (as the plans take)
        step = for_op.operands[2].owner
        if len(dots) != 1 or (for_op.attrs.get("num_stages") or options.num_stages or 1) < 2 or step is None \
                or step.name != "const" or not isinstance(step.attrs.get("value"), int) or step.attrs["value"] <= 0:
            continue
        d = dots[0]
        if d not in body.ops or any(o is None or o.dtype.name not in ("fp16", "bf16") for o in d.operands[:2]) \
                or not uses_wgmma(d, options):
            continue
        use_table = ir.uses(fn)
        atoms: dict = {}
        cands = []
        for operand in (0, 1):
            lo = d.operands[operand].owner
            if lo is None or lo.name != "load" or lo not in body.ops or len(use_table.get(lo.result.id, [])) != 1:
                continue
            c = _match(fn, for_op, lo, d, operand, use_table, atoms)
            if c is not None:
                cands.append(c)
        cands = [c for c in cands if not c.wrapped or _wrap_invisible(fn, for_op, d, c, use_table, atoms)]
        if not cands:
            continue
        for c in sorted(cands, key=lambda c: -c.j):
            specs.append(_replace(fn, for_op, c, atoms))
    if specs:
        fn.dropped_ops += ir.eliminate_dead_code(fn)
    return specs


def _wrap_invisible(fn, for_op, d, c, use_table, atoms) -> bool:
    """The wrapped rows (or columns) only reach elements of the result that no store writes."""
    body = for_op.regions[0]
    if len(d.operands) < 3 or d.operands[2] is None or d.operands[2] not in body.args[1:]:
        return False
    acc = d.operands[2]
    k = body.args.index(acc)
    if use_table.get(acc.id, []) != [d] or use_table.get(d.result.id, []) != [body.ops[-1]] \
            or body.ops[-1].operands[k - 1] is not d.result:
        return False
    out = for_op.results[k - 1]
    return all(_stores_mask_off(fn, use_table, out, dim, x0, dd, atoms) for dim, x0, dd in c.wrapped)


def _replace(fn, for_op, c, atoms) -> dict:
    body = for_op.regions[0]
    lo = c.load
    loc = lo.loc
    name = fn.arg_names[fn.args.index(c.base)]
    map_name, k = f"{name}{MAP_SUFFIX}", 1
    while map_name in fn.arg_names:
        map_name, k = f"{name}{MAP_SUFFIX}{k}", k + 1
    tmap = fn.body.add_arg(T.pointer_type(T.int8), map_name)
    fn.arg_names.append(map_name)
    fn.arg_types.append(T.pointer_type(T.int8))
    # "pointer_map": the kernel prefetches its descriptor at entry (tma.prefetch_pointer_maps)
    fn.arg_attrs.append({"divisibility": 1, "tensor_map": True, "pointer_map": True})
    iv = body.args[0]
    outer = _parent_block(fn.body, for_op)
    coords = []
    for _, at, _ in c.dims:
        # the loop-invariant part before the loop, the induction variable's term in the body
        fixed = {k: v for k, v in at.items() if k != iv.id}
        x = _form_value(outer.ops, outer.ops.index(for_op), fixed, atoms, loc) if fixed or iv.id not in at else None
        if iv.id in at:
            moving = {iv.id: at[iv.id]}
            if x is not None:
                atoms[x.id] = x
                moving[x.id] = Fraction(1)
            x = _form_value(body.ops, body.ops.index(lo), moving, atoms, loc)
        coords.append(x)
    new = ir.Op("tma_load", [tmap, *coords], [lo.result.type], {"padding": "zero"}, loc=loc)
    new.results[0] = lo.result
    lo.result.owner = new
    body.ops[body.ops.index(lo)] = new
    _drop_iter_arg(for_op, c.j)
    return {"name": map_name, "base": name, "dtype": T.to_signature(lo.result.dtype),
            "dims": [_spec_form(dd, fn, c.params) for _, _, dd in c.dims],
            "row_stride": _spec_form(c.stride, fn, c.params), "block": list(c.block)}


def _parent_block(block: ir.Block, op) -> ir.Block:
    if op in block.ops:
        return block
    for o in block.ops:
        for r in o.regions:
            found = _parent_block(r, op)
            if found is not None:
                return found
    return None


def _drop_iter_arg(for_op, j: int) -> None:
    """Remove the loop-carried pointer tile (body arg j, its init, its yield, its result)."""
    body = for_op.regions[0]
    yld = body.ops[-1]
    del for_op.operands[3 + j - 1]
    del yld.operands[j - 1]
    del body.args[j]
    del for_op.results[j - 1]
    for i, a in enumerate(body.args):
        a.index = i
    for i, r in enumerate(for_op.results):
        r.index = i
