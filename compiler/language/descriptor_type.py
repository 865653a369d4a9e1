"""The signature type of a host tensor-descriptor argument, and the kernel parameters it becomes.

`tensordesc<fp16[64, 64]|zero|10>`: element type, block shape, padding, and per shape dim whether
it is a multiple of 16 (Triton spells the type `tensordesc<fp16[64, 64]>`, which reads as zero
padding and no known divisibility). The kernel takes the descriptor `d` as parameters `d.base`,
`d.shape0…`, `d.stride0…`, and where its accesses go through TMA (tensor_map.py) `d.tmap`, its
128-byte CUtensorMap (type `tmap`, passed by value).
"""
from __future__ import annotations

import re

from .dtypes import dtype, from_signature, int32, int64, pointer_type, to_signature

_TYPE = re.compile(r"tensordesc<(\w+)\[([\d, ]+)\](?:\|(zero|nan)\|([01]*))?>$")


def type_string(elt_name: str, block: tuple, padding: str, div: str) -> str:
    return f"tensordesc<{elt_name}[{', '.join(str(b) for b in block)}]|{padding}|{div}>"


def parse(text) -> tuple | None:
    """(element type, block shape, padding, shape dims divisible by 16), or None if `text` is not a
    descriptor type."""
    if not isinstance(text, str):
        return None
    m = _TYPE.match(text.strip())
    if m is None:
        return None
    block = tuple(int(b) for b in m.group(2).split(","))
    div = (m.group(4) or "").ljust(len(block), "0")
    return from_signature(m.group(1)), block, m.group(3) or "zero", tuple(c == "1" for c in div)


def part_names(name: str, rank: int) -> list[str]:
    return [f"{name}.base"] + [f"{name}.shape{i}" for i in range(rank)] + [f"{name}.stride{i}" for i in range(rank)]


TENSOR_MAP_TYPE = "tmap"
# the kernel parameter of the global scratch memory that device-side descriptors' maps are written
# to (`tl.make_tensor_descriptor` on sm_90; the launch asks triton.set_allocator's allocator for it)
GLOBAL_SCRATCH = "$global_scratch"


def tensor_map_name(name: str) -> str:
    return f"{name}.tmap"


def part_types(elt: dtype, rank: int) -> list:
    return [pointer_type(elt)] + [int32] * rank + [int64] * rank


def flat_signature(signature: dict) -> dict:
    """`signature` (name → type string) with each descriptor replaced by its parts' types."""
    out = {}
    for name, t in signature.items():
        desc = parse(t)
        if desc is None:
            out[name] = t
            continue
        elt, block = desc[0], desc[1]
        out.update(zip(part_names(name, len(block)), (to_signature(x) for x in part_types(elt, len(block)))))
        out[tensor_map_name(name)] = TENSOR_MAP_TYPE   # passed only where the kernel takes it
    return out
