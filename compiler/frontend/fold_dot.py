"""`acc += tl.dot(a, b)` → `acc = tl.dot(a, b, acc)` (Triton's combine pattern on the IR).

Tutorial 08 and many user kernels accumulate with `+=`: lowered as written, that is a dot into a
fresh zero accumulator plus a block add, which doubles the accumulator's registers (spills at
128×128 tiles) and hides the loop from the dot pipelining. The fold makes the sum the dot's own
accumulator when the dot's zero-accumulator result has no other use, as Triton does — integer
(int8 → int32) dots too.
"""
from __future__ import annotations

from .. import ir


def _zero_const(v: ir.Value) -> bool:
    op = v.owner
    return op is not None and op.name == "const" and op.attrs.get("value") in (0, 0.0) and not op.regions


def _movable_const(op: ir.Op) -> bool:
    return op.name == "const" and not op.operands and not op.regions


def _fold_block(block: ir.Block, uses: dict) -> dict:
    """Fold in `block` (and nested blocks); returns {old add result id: dot result} to substitute."""
    replaced = {}
    position = {id(op): i for i, op in enumerate(block.ops)}
    for op in block.ops:
        for r in op.regions:
            replaced.update(_fold_block(r, uses))
        if op.name != "add" or len(op.operands) != 2:
            continue
        for mine, other in ((0, 1), (1, 0)):
            d, acc = op.operands[mine], op.operands[other]
            dot = d.owner if d is not None else None
            if dot is None or dot.name != "dot" or id(dot) not in position or not _zero_const(dot.operands[2]):
                continue
            if len(uses.get(d.id, ())) != 1 or acc is None or acc.type != d.type:
                continue
            owner = acc.owner
            late = owner is not None and id(owner) in position and position[id(owner)] > position[id(dot)]
            if late and not _movable_const(owner):
                continue  # the other addend is computed after the dot: it cannot feed it
            if late:   # a constant (`d = tl.dot(a, b); d = d + c` with c a constant): made before the dot
                block.ops.remove(owner)
                block.ops.insert(block.ops.index(dot), owner)
                position = {id(o): i for i, o in enumerate(block.ops)}
            dot.operands[2] = acc
            replaced[op.result.id] = d
            break
    return replaced


def fold_dot_accumulate(fn: ir.Function) -> None:
    replaced = _fold_block(fn.body, ir.uses(fn))
    if not replaced:
        return
    for op in fn.walk():
        op.operands = [replaced.get(o.id, o) if o is not None else None for o in op.operands]
