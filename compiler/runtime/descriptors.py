"""Host tensor descriptors (compiler/tools/tensor_descriptor.py) as kernel arguments.

A descriptor argument `d` is specialized on its element type, block shape, padding and which shape
dims are multiples of 16 (so that bounds-checked accesses stay vectorized): the signature type
`tensordesc<fp16[64, 64]|zero|10>`. The compiled kernel takes it as separate parameters
`d.base`, `d.shape0…`, `d.stride0…` (the front end rebuilds the descriptor from them, see
frontend/block_pointers.py), and on sm_90 `d.tmap`, its CUtensorMap (tensor_maps.py); `expand`
turns the call's values into those parameters' values.
"""
from __future__ import annotations

from ..language import descriptor_type as DT
from ..language import dtypes as T
from ..tools.tensor_descriptor import TensorDescriptor
from . import allocator, tensor_maps


def is_descriptor(v) -> bool:
    return isinstance(v, TensorDescriptor)


def spec(v: TensorDescriptor, base_key, base_aligned: bool, name: str) -> tuple:
    """The key part of a descriptor argument (after checking Triton's TMA requirements)."""
    if not base_aligned:
        raise ValueError(f"argument '{name}': a tensor descriptor's base must be 16-byte aligned")
    es = T.from_host_dtype(v.base.dtype).primitive_bitwidth // 8
    for s in v.strides[:-1]:
        if (int(s) * es) % 16:
            raise ValueError(f"argument '{name}': tensor descriptor strides {list(v.strides)} must be multiples of "
                             f"16 bytes (except the last, which is 1)")
    block = tuple(int(b) for b in v.block_shape)
    div = "".join("1" if int(s) % 16 == 0 else "0" for s in v.shape)
    return ("tensordesc", base_key, block, v.padding, div)


def type_string(key: tuple, elt_name: str) -> str:
    _, _, block, padding, div = key
    return DT.type_string(elt_name, block, padding, div)


def expand(names: list[str], named: dict, pointer) -> list:
    """Values for the kernel parameters `names`, descriptor parts taken from their descriptor
    (`pointer(tensor)` gives what a base is passed as: the tensor itself, or its address)."""
    out = []
    for n in names:
        if n in named:
            out.append(named[n])
            continue
        owner, _, part = n.rpartition(".")
        d = named[owner]
        if part == "base":
            out.append(pointer(d.base))
        elif part == "tmap":
            out.append(tensor_maps.address(d))
        elif part.startswith("shape"):
            out.append(int(d.shape[int(part[5:])]))
        else:
            out.append(int(d.strides[int(part[6:])]))
    return out


def wrap_launcher(launch, call_names: list[str], expanded: list[str]):
    """`launch` takes values for `expanded`; the runner passes values for `call_names`. Generated
    Python (as pointer_maps' wrapper): each parameter an expression over the call's positions, so a
    launch reads each descriptor's parts directly instead of going through expand()'s name parsing."""
    pos = {n: i for i, n in enumerate(call_names)}
    exprs = []
    for n in expanded:
        if n in pos:
            exprs.append(f"v[{pos[n]}]")
            continue
        owner, _, part = n.rpartition(".")
        d = f"v[{pos[owner]}]"
        if part == "base":
            exprs.append(f"{d}.base.data_ptr()")
        elif part == "tmap":
            exprs.append(f"_tmap({d})")
        elif part.startswith("shape"):
            exprs.append(f"int({d}.shape[{int(part[5:])}])")
        else:
            exprs.append(f"int({d}.strides[{int(part[6:])}])")
    src = ("def launch_descriptors(g0, g1, g2, stream, *v):\n"
           f"    return launch(g0, g1, g2, stream, {', '.join(exprs)})")
    scope = {"launch": launch, "_tmap": tensor_maps.address}
    exec(src, scope)   # noqa: S102 - text built here from the kernel's own parameter names
    return scope["launch_descriptors"]


def with_global_scratch(launch, per_program: int):
    """`launch` takes the global scratch pointer after the other values (device-side descriptors'
    tensor maps, `per_program` bytes a program: num_ctas CTA slots, as Triton sizes it): each launch
    asks triton.set_allocator's allocator for it, as Triton does (the buffer may be freed after the
    call: a stream-ordered allocator hands it out again only to work queued after this kernel)."""
    def launch_with_scratch(g0, g1, g2, stream, *values):
        alloc = allocator.get_allocator() or allocator.default_allocator
        buf = alloc(per_program * int(g0) * int(g1) * int(g2), 128, stream)
        return launch(g0, g1, g2, stream, *values, _address(buf))
    return launch_with_scratch


def expand_names(call_names: list[str], signature: dict, passed=None) -> list[str]:
    """The kernel parameters of `call_names`: each descriptor's parts, its tensor map only where
    the kernel takes one (in `passed`, the compiled kernel's parameters)."""
    out = []
    for n in call_names:
        parsed = DT.parse(signature.get(n))
        if not parsed:
            out.append(n)
            continue
        out.extend(DT.part_names(n, len(parsed[1])))
        if passed is not None and DT.tensor_map_name(n) in passed:
            out.append(DT.tensor_map_name(n))
    return out


def _address(t) -> int:
    return t.data_ptr()
