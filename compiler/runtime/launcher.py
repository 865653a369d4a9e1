"""Generated launchers: one small Python function per (compiled kernel, device, argument list).

A launcher packs the kernel's parameters into storage allocated once (ctypes scalars, with a
`void*[n]` array of their addresses) and calls `cuLaunchKernel` through ctypes — no per-call
allocation, no cuda-python marshalling. Calls from a thread other than the one that created the
launcher get fresh storage (the shared storage would race), so launching from several threads is
safe, just slower.

Parameter storage: integers, booleans and pointers go in 8-byte slots (zero-extended, so a kernel
that reads an i8/i32 parameter sees the low bytes on little-endian); fp32 in a c_float; fp64 in a
c_double; fp16/bf16 in a 16-bit slot holding the bits.
"""
from __future__ import annotations

import ctypes
import struct
import threading

from . import driver

_SLOT = {"fp32": ctypes.c_float, "f32": ctypes.c_float, "fp64": ctypes.c_double, "f64": ctypes.c_double,
         "fp16": ctypes.c_uint16, "bf16": ctypes.c_uint16}


def _f16_bits(v) -> int:
    return struct.unpack("<H", struct.pack("<e", float(v)))[0]


def _bf16_bits(v) -> int:
    return struct.unpack("<I", struct.pack("<f", float(v)))[0] >> 16   # truncating conversion


def slot_type(ty: str):
    return _SLOT.get(ty, ctypes.c_uint64)


def _converter(ty: str) -> str:
    """Python expression turning parameter `{v}` into the slot's value."""
    if ty == "fp16":
        return "_f16_bits({v})"
    if ty == "bf16":
        return "_bf16_bits({v})"
    if ty in ("fp32", "f32", "fp64", "f64"):
        return "{v}"
    return "{v}"


def make_launcher(lf: "driver.LoadedFunction", call_names: list[str], passed: dict[str, str],
                  num_warps: int, shared: int, kernel_name: str):
    """Build `launch(g0, g1, g2, stream, *values_for_call_names)`.

    `call_names`: the parameter names, in the order the caller will pass them.
    `passed`: name → type string for the parameters the kernel actually takes, in kernel order
    (names of `call_names` missing from it are accepted and ignored: constexpr-specialized).
    """
    lib = driver.libcuda()
    order = list(passed)
    missing = [n for n in order if n not in call_names]
    if missing:
        raise ValueError(f"launcher for {kernel_name}: no value for kernel parameter(s) {missing}")
    types = [passed[n] for n in order]
    slots = [slot_type(t)() for t in types]
    params = (ctypes.c_void_p * max(1, len(slots)))(*[ctypes.addressof(s) for s in slots])
    vars_ = {n: f"_v{i}" for i, n in enumerate(call_names)}
    ns = {
        "_L": lib.cuLaunchKernel, "_h": ctypes.c_void_p(lf.handle), "_bx": num_warps * 32,
        "_sh": shared, "_pa": params, "_ident": threading.get_ident, "_owner": threading.get_ident(),
        "_f16_bits": _f16_bits, "_bf16_bits": _bf16_bits, "_ctypes": ctypes, "_driver": driver,
        "_lf": lf, "_name": kernel_name, "_nw": num_warps,
    }
    for i, s in enumerate(slots):
        ns[f"_s{i}"] = s
    for i, t in enumerate(types):
        ns[f"_T{i}"] = slot_type(t)
    args = ", ".join(vars_[n] for n in call_names)
    sig = "_g0, _g1, _g2, _stream" + (", " + args if args else "")
    lines = [f"def launch({sig}):",
             "    if _ident() != _owner:",
             f"        return _fresh({sig})"]
    for i, n in enumerate(order):
        lines.append(f"    _s{i}.value = " + _converter(types[i]).format(v=vars_[n]))
    lines += ["    _r = _L(_h, _g0, _g1, _g2, _bx, 1, 1, _sh, _stream, _pa, None)",
              "    if _r:",
              "        _retry(_r, _pa, _g0, _g1, _g2, _stream)",
              "",
              f"def _fresh({sig}):"]
    # another thread: its own storage
    for i, n in enumerate(order):
        lines.append(f"    _t{i} = _T{i}(" + _converter(types[i]).format(v=vars_[n]) + ")")
    addrs = ", ".join(f"_ctypes.addressof(_t{i})" for i in range(len(order)))
    lines += [f"    _p = (_ctypes.c_void_p * {max(1, len(order))})({addrs})",
              "    _r = _L(_h, _g0, _g1, _g2, _bx, 1, 1, _sh, _stream, _p, None)",
              "    if _r:",
              "        _retry(_r, _p, _g0, _g1, _g2, _stream)",
              "",
              "def _retry(_r, _p, _g0, _g1, _g2, _stream):",
              "    if _r == 201:  # no current context on this thread",
              "        _driver.ensure_context(_lf.device)",
              "        _r = _L(_h, _g0, _g1, _g2, _bx, 1, 1, _sh, _stream, _p, None)",
              "    if _r:",
              "        _driver.raise_launch_error(_r, _name, _nw, _lf)",
              ""]
    code = "\n".join(lines)
    exec(compile(code, f"<blocktune launcher {kernel_name}>", "exec"), ns)  # noqa: S102 - our own generated code
    fn = ns["launch"]
    fn.__blocktune_source__ = code
    return fn
