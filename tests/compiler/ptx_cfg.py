"""The loops of a PTX kernel, read from its control-flow graph (tests only).

LLVM lays loops out in any order (a rotated loop's header can follow its body), so a loop is not a
range of lines: this splits the kernel into basic blocks at labels and branches, computes dominators,
and gives the natural loop of every back edge (an edge to a block that dominates its source), with
the text of its blocks and the loops around it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_LABEL = re.compile(r"^\s*(\$L__\w+):")
_BRANCH = re.compile(r"^\s*(@!?%p\d+\s+)?bra(\.uni)?\s+(\$L__\w+);")


@dataclass
class Block:
    name: str
    lines: list = field(default_factory=list)
    succ: list = field(default_factory=list)


@dataclass
class Loop:
    header: str
    blocks: set
    text: str
    parents: list = field(default_factory=list)   # the loops strictly containing this one, innermost first


def _body(ptx: str) -> list[str]:
    start = ptx.index("{", ptx.index(".entry"))
    return ptx[start + 1:].splitlines()


def blocks(ptx: str) -> list[Block]:
    out = [Block("entry")]
    for line in _body(ptx):
        m = _LABEL.match(line)
        if m:
            out.append(Block(m.group(1)))
            continue
        out[-1].lines.append(line)
        b = _BRANCH.match(line)
        if b or re.match(r"^\s*(@!?%p\d+\s+)?ret;", line):
            out.append(Block(f"after{len(out)}"))
    for i, blk in enumerate(out):
        last = next((ln for ln in reversed(blk.lines) if ln.strip() and not ln.strip().startswith("//")), "")
        b = _BRANCH.match(last)
        if b:
            blk.succ.append(b.group(3))
        conditional = b is not None and b.group(1) is not None
        ends = (b is not None and not conditional) or re.match(r"^\s*ret;", last)
        if not ends and i + 1 < len(out):
            blk.succ.append(out[i + 1].name)
    # only what the entry reaches (the split leaves empty blocks after unconditional branches)
    by_name = {blk.name: blk for blk in out}
    seen, work = {"entry"}, ["entry"]
    while work:
        for s in by_name[work.pop()].succ:
            if s not in seen:
                seen.add(s)
                work.append(s)
    return [blk for blk in out if blk.name in seen]


def loops(ptx: str) -> list[Loop]:
    """Natural loops, innermost first; loops sharing a header are merged."""
    bl = blocks(ptx)
    names = [b.name for b in bl]
    succ = {b.name: b.succ for b in bl}
    pred = {n: [] for n in names}
    for n in names:
        for s in succ[n]:
            pred[s].append(n)
    dom = {n: set(names) for n in names}
    dom["entry"] = {"entry"}
    changed = True
    while changed:
        changed = False
        for n in names[1:]:
            ps = [dom[p] for p in pred[n]]
            new = ({n} | set.intersection(*ps)) if ps else {n}
            if new != dom[n]:
                dom[n], changed = new, True
    by_header: dict[str, set] = {}
    for n in names:
        for h in succ[n]:
            if h in dom[n]:                      # back edge n → h
                body, work = {h, n}, ([n] if n != h else [])
                while work:
                    x = work.pop()
                    for p in pred[x]:
                        if p not in body:
                            body.add(p)
                            work.append(p)
                by_header.setdefault(h, set()).update(body)
    text = {b.name: "\n".join(b.lines) for b in bl}
    found = [Loop(h, body, "\n".join(text[n] for n in names if n in body)) for h, body in by_header.items()]
    found.sort(key=lambda lp: len(lp.blocks))
    for lp in found:
        lp.parents = [o for o in found if o is not lp and lp.blocks < o.blocks]
    return found


def innermost_loop_with(ptx: str, needle: str) -> Loop:
    for lp in loops(ptx):
        if needle in lp.text:
            return lp
    raise AssertionError(f"no loop contains {needle!r}")
