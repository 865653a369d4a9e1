"""Which pointer arguments of a kernel it writes to and reads from, from its block IR.

    effects = pointer_effects(ir_fn)     # PointerEffects(stored={"out_ptr"}, loaded={"x_ptr", ...})

Used to describe a launch to the tuning service (which tensors are outputs to check, which are
read and written in place). The answer is exact or refused: every pointer that a `store` or an
atomic writes through is traced back to the kernel's pointer arguments — through address
arithmetic, block reshaping, `select`, casts, and the values carried by `for` / `while` / `if`.
A pointer that does not come from the arguments (read from memory, made from an integer that is
not derived from an argument) raises `Undetermined`, since the kernel may then write anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import ir

# a pointer whose origin is not a kernel argument (e.g. loaded from memory)
_UNKNOWN = "<unknown>"
# ops whose results are data read from memory, not addresses derived from their operands
_MEMORY_RESULTS = ("load", "atomic_rmw", "atomic_cas")
# ops whose results carry no address: comparisons, index generators, reductions of values
_NO_PROVENANCE = ("const", "arange", "program_id", "num_programs", "cmp", "reduce", "scan", "dot")
_CONTROL = ("for", "if", "while")
# custom reductions/scans and tl.map_elementwise: their region only combines the operands' values
_COMBINE_OPS = ("reduce_combine", "scan_combine", "map_elementwise")


class Undetermined(Exception):
    """The IR writes through a pointer that cannot be traced to the kernel's arguments."""


@dataclass
class PointerEffects:
    stored: set[str] = field(default_factory=set)   # pointer args written (store, atomics)
    loaded: set[str] = field(default_factory=set)   # pointer args read (load, atomics)


def _provenance(fn: ir.Function) -> dict[int, frozenset[str]]:
    """Value id → the pointer arguments (or _UNKNOWN) it may be derived from. A fixpoint, since
    loop-carried values depend on themselves."""
    prov: dict[int, frozenset[str]] = {}
    for name, arg in zip(fn.arg_names, fn.args):
        if ir.is_pointer(arg.type):
            prov[arg.id] = frozenset((name,))
    ops = list(fn.walk())

    def of(v: ir.Value | None) -> frozenset[str]:
        return prov.get(v.id, frozenset()) if v is not None else frozenset()

    def join(target: ir.Value, sources) -> bool:
        new = prov.get(target.id, frozenset()).union(*sources) if sources else prov.get(target.id, frozenset())
        if new != prov.get(target.id, frozenset()):
            prov[target.id] = new
            return True
        return False

    def yielded(block: ir.Block) -> list[ir.Value | None]:
        term = block.terminator
        if term is None:
            raise Undetermined("a region without a terminator")
        return term.operands if term.name == "yield" else term.operands[1:]   # condition(c, *fwd)

    changed = True
    while changed:
        changed = False
        for op in ops:
            name = op.name
            if name in _MEMORY_RESULTS:
                for r in op.results:
                    if ir.is_pointer(r.type):       # a pointer read from memory: could be anything
                        changed |= join(r, [frozenset((_UNKNOWN,))])
            elif name in _NO_PROVENANCE:
                continue
            elif name == "select":
                for r in op.results:
                    changed |= join(r, [of(op.operands[1]), of(op.operands[2])])
            elif name == "for":
                body = op.regions[0]
                init, nxt = op.operands[3:], yielded(body)
                for i, (a, r) in enumerate(zip(body.args[1:], op.results)):
                    srcs = [of(init[i]) if i < len(init) else frozenset(), of(nxt[i]) if i < len(nxt) else frozenset()]
                    changed |= join(a, srcs)
                    changed |= join(r, srcs)
            elif name == "if":
                outs = [yielded(r) for r in op.regions]
                for i, r in enumerate(op.results):
                    changed |= join(r, [of(o[i]) for o in outs if i < len(o)])
            elif name == "while":
                before, after = op.regions
                fwd, nxt = yielded(before), yielded(after)
                for i, a in enumerate(before.args):
                    changed |= join(a, [of(op.operands[i]) if i < len(op.operands) else frozenset(),
                                        of(nxt[i]) if i < len(nxt) else frozenset()])
                for i, a in enumerate(after.args):
                    changed |= join(a, [of(fwd[i])] if i < len(fwd) else [])
                for i, r in enumerate(op.results):
                    changed |= join(r, [of(fwd[i])] if i < len(fwd) else [])
            elif op.regions and name not in _COMBINE_OPS:
                raise Undetermined(f"unknown control flow op '{name}'")
            else:
                # address arithmetic, splat/broadcast/reshape/trans, casts (ptr <-> int), assume,
                # integer arithmetic on an address cast to an integer: all operands count
                srcs = [of(o) for o in op.operands]
                for r in op.results:
                    changed |= join(r, srcs)
    return prov


def pointer_effects(fn: ir.Function) -> PointerEffects:
    """The pointer arguments `fn` stores to / loads from (see the module doc)."""
    prov = _provenance(fn)
    out = PointerEffects()
    for op in fn.walk():
        if op.name not in ("load", "store", "atomic_rmw", "atomic_cas"):
            continue
        ptr = op.operands[0]
        targets = prov.get(ptr.id, frozenset()) if ptr is not None else frozenset()
        writes = op.name != "load"
        if _UNKNOWN in targets or not targets:
            if writes:
                raise Undetermined(f"{op.name} at {op.loc} writes through a pointer that is not derived from "
                                   "the kernel's pointer arguments")
            continue   # a read through such a pointer changes no output
        if writes:
            out.stored |= targets
        if op.name != "store":
            out.loaded |= targets
    return out


__all__ = ["pointer_effects", "PointerEffects", "Undetermined"]
