"""LLVM loop metadata on a loop's back edge: `llvm.licm.disable` for the loops that ask for it
(`tl.range(..., disable_licm=True)`, `while tl.condition(c, disable_licm=True)`), as Triton emits it.

A loop ID must be a distinct node whose first operand is itself, which llvmlite cannot spell: the
node is made with a placeholder string first (unique, so that llvmlite does not merge two loops'
nodes) and `finish` rewrites it in the module's text.
"""
from __future__ import annotations

import re

from llvmlite import ir as ll

_SELF = "blocktune.loop.self"
_PLACEHOLDER = re.compile(r'^(!\d+) = !\{ !"' + re.escape(_SELF) + r'\.\d+"', re.M)


def annotate(lw, back_edge, op) -> None:
    """Attach `op`'s loop options (if it has any) to the branch that closes its loop."""
    if not op.attrs.get("disable_licm"):
        return
    m = lw.module
    options = [m.add_metadata([ll.MetaDataString(m, "llvm.licm.disable")])]
    loop_id = m.add_metadata([ll.MetaDataString(m, f"{_SELF}.{len(m.metadata)}"), *options])
    back_edge.set_metadata("llvm.loop", loop_id)


def finish(text: str) -> str:
    """The module's text with each placeholder loop ID made a distinct node that names itself."""
    return _PLACEHOLDER.sub(lambda mt: f"{mt.group(1)} = distinct !{{ {mt.group(1)}", text)
