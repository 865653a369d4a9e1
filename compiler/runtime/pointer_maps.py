"""Tensor maps the backend asked for on pointer tiles (backend/pointer_tma.py), built at launch.

A compiled kernel's metadata lists them (`pointer_maps`): each names its hidden parameter, the
pointer parameter it reads through, its element type, block, and its dims and row stride as linear
forms over the kernel's integer parameters ([[name or None, coefficient], ...]). The launcher is
wrapped so that each call evaluates those forms on its arguments and appends the maps' addresses;
maps are encoded once per (address, dims, stride, block) and cached, so a repeated launch costs a
few dictionary look-ups.

A dim that evaluates to 0 or less (K = 0) has no element in range: every load through the map is
masked off to 0 in the kernel's own terms, so the map is encoded over a zeroed 16-byte buffer with
every dim 1 (the driver takes no empty dim) and reads zeros wherever it reads.
"""
from __future__ import annotations

import threading

from ..language import dtypes as T
from . import tensor_maps

_CACHE_LIMIT = 4096
_cache: dict = {}
_lock = threading.Lock()


def _value(form, values: dict) -> int:
    return sum(c * (1 if n is None else int(values[n])) for n, c in form)


def _address_of(v) -> int:
    return v.data_ptr() if hasattr(v, "data_ptr") else int(v)


def address(spec: dict, values: dict) -> int:
    """The host address of the CUtensorMap `spec` needs for these argument values."""
    base = _address_of(values[spec["base"]])
    dims = tuple(_value(f, values) for f in spec["dims"])
    stride = _value(spec["row_stride"], values)
    key = (base, dims, stride, spec["dtype"], tuple(spec["block"]))   # as wrap_launcher's
    hit = _cache.get(key)
    return (hit or _encode(spec, key, values[spec["base"]]))[1]


def _encode(spec: dict, key: tuple, base_arg) -> tuple:
    """Encode the map of `key` (address, dims, row stride, dtype, block; `base_arg` the argument the
    address is of) and cache it: (owner, address)."""
    base, dims, stride = key[:3]
    if min(dims) <= 0:
        base, dims, stride = _zeros(base_arg), (1,) * len(dims), 16
    try:
        entry = tensor_maps.encode_raw(base, T.from_signature(spec["dtype"]), dims, (stride, 1), spec["block"], "zero")
    except ValueError as exc:
        raise ValueError(f"the kernel loads '{spec['base']}' through TMA (knobs.codegen.pointer_tma, on by "
                         f"default) and its tensor map does not encode for this launch: {exc}; set "
                         "BLOCKTUNE_POINTER_TMA=0 to load it with pointers") from exc
    with _lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()   # cuLaunchKernel copies parameters at the call: no launch holds one
        _cache[key] = entry
    return entry


_zero_buffers: dict = {}


def _zeros(like) -> int:
    """A zeroed 16-byte device buffer on `like`'s device (kept for the process)."""
    import torch  # noqa: PLC0415 - the GPU launch path only

    dev = like.device if hasattr(like, "device") else torch.device("cuda", torch.cuda.current_device())
    buf = _zero_buffers.get(str(dev))
    if buf is None:
        buf = _zero_buffers.setdefault(str(dev), torch.zeros(16, dtype=torch.uint8, device=dev))
    return buf.data_ptr()


def names(metadata) -> list[str]:
    return [s["name"] for s in metadata.get("pointer_maps") or ()]


def wrap_launcher(launch, call_names: list[str], specs: list[dict]):
    """`launch` takes values for `call_names` and then the maps; the wrapper takes the former. It
    is generated Python (as launcher.py's): the forms become expressions over the arguments'
    positions, so a launch whose maps are cached costs one tuple and one look-up per map."""
    pos = {n: i for i, n in enumerate(call_names)}

    def expr(form) -> str:
        terms = [str(c) if n is None else (f"v[{pos[n]}]" if c == 1 else f"{c} * v[{pos[n]}]") for n, c in form]
        return " + ".join(terms) or "0"

    lines = ["def launch_pointer_maps(g0, g1, g2, stream, *v):"]
    for k, spec in enumerate(specs):
        dims = ", ".join(expr(f) for f in spec["dims"])
        lines += [f"    b = v[{pos[spec['base']]}]",
                  f"    k{k} = (b if type(b) is int else b.data_ptr(), ({dims},), {expr(spec['row_stride'])}, "
                  f"{spec['dtype']!r}, {tuple(spec['block'])!r})",
                  f"    h{k} = _get(k{k})",
                  f"    if h{k} is None:",   # only this map is encoded (a new address: about the driver's call)
                  f"        h{k} = _encode(specs[{k}], k{k}, b)"]
    lines += ["    return launch(g0, g1, g2, stream, *v, " + ", ".join(f"h{k}[1]" for k in range(len(specs))) + ")"]
    scope = {"_get": _cache.get, "launch": launch, "_encode": _encode, "specs": specs}
    exec("\n".join(lines), scope)   # noqa: S102 - text built here from the compiled kernel's own metadata
    return scope["launch_pointer_maps"]
