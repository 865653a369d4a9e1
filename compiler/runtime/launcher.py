"""Generated launchers: one small Python function per (compiled kernel, device, argument list).

A launcher stores the kernel's parameters into ctypes scalars allocated once (one 8-byte slot per
parameter, and a `void*[n]` array of their addresses) and calls `cuLaunchKernel` through ctypes —
no per-call allocation, no cuda-python marshalling, and no ctypes `argtypes` (whose per-argument
conversion costs ~0.3 µs each): every argument handed to ctypes is already an int below 2**31, a
prebuilt `c_void_p` or the array. (Setting 4 ctypes scalars measured faster than one
`struct.pack_into`.)

Slots: integers and booleans are c_int64 (sign-extended), so a kernel reading an i1/i8/i32
parameter sees the right low bytes on little-endian; pointers and u64 c_uint64; fp32 c_float;
fp64 c_double; fp16/bf16 their 16-bit patterns in a c_uint64. A tensor map (`tmap`, 128 bytes by
value) arrives as the host address of its bytes, which goes into the address array itself.

Calls from a thread other than the one that made the launcher use a fresh buffer (ctypes releases
the GIL during the call, so a shared buffer could be overwritten mid-launch).
"""
from __future__ import annotations

import ctypes
import struct
import threading

from . import driver, native


def _f16_bits(v) -> int:
    return struct.unpack("<H", struct.pack("<e", float(v)))[0]


def _bf16_bits(v) -> int:
    bits = struct.unpack("<I", struct.pack("<f", float(v)))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF   # round to nearest even


class _ByAddress(ctypes.c_uint64):
    """The slot of a by-value parameter whose bytes the caller holds (its address is the value)."""


# type string → (ctypes slot type, converter expression template)
def _slot(ty: str):
    if ty == "tmap":
        return _ByAddress, "{v}"
    if ty.startswith("*") or ty in ("u64", "u32", "u16", "u8"):
        return ctypes.c_uint64, "{v}"
    if ty in ("fp32", "f32"):
        return ctypes.c_float, "{v}"
    if ty in ("fp64", "f64"):
        return ctypes.c_double, "{v}"
    if ty == "fp16":
        return ctypes.c_uint64, "_f16_bits({v})"
    if ty == "bf16":
        return ctypes.c_uint64, "_bf16_bits({v})"
    return ctypes.c_int64, "{v}"          # i1 i8 i16 i32 i64 (sign-extended)


_STREAMS: dict = {0: None, None: None}


def _stream_obj(stream):
    """A c_void_p for a stream handle (cached: a process uses few streams)."""
    if not stream:
        return None
    if hasattr(stream, "cuda_stream"):
        stream = stream.cuda_stream
    v = ctypes.c_void_p(int(stream))
    if len(_STREAMS) < 4096:
        _STREAMS[stream] = v
    return v


def _unprototyped(lib, name):
    """A fresh function object for `name` with no argtypes (restype int)."""
    f = lib[name]          # indexing makes a new _FuncPtr each time, with its own argtypes
    f.restype = ctypes.c_int
    return f


class _Buffer:
    """One 8-byte-aligned ctypes scalar per parameter + the array of their addresses."""

    def __init__(self, types: list):
        self.slots = [t() for t in types]
        self.params = (ctypes.c_void_p * max(1, len(types)))(*([ctypes.addressof(x) for x in self.slots] or [None]))


_NATIVE_KINDS = {ctypes.c_int64: "q", ctypes.c_uint64: "Q", ctypes.c_float: "f", ctypes.c_double: "d", _ByAddress: "m"}


def make_launcher(lf: "driver.LoadedFunction", call_names: list[str], passed: dict[str, str],
                  num_warps: int, shared: int, kernel_name: str):
    """Build `launch(g0, g1, g2, stream, *values_for_call_names)`.

    `call_names`: the parameter names, in the order the caller will pass them.
    `passed`: name → type string of the parameters the kernel takes, in kernel order (names of
    `call_names` not in it are accepted and ignored: they were specialized away).

    The native launcher (launch.c, see native.py) when it could be built, else the ctypes one;
    fp16/bf16 scalar parameters (rare) always take the ctypes one.
    """
    order = list(passed)
    missing = [n for n in order if n not in call_names]
    if missing:
        raise ValueError(f"launcher for {kernel_name}: no value for kernel parameter(s) {missing}")
    ct = make_ctypes_launcher(lf, call_names, passed, num_warps, shared, kernel_name)
    kinds = "".join(_NATIVE_KINDS.get(_slot(passed[n])[0], "?") if _slot(passed[n])[1] == "{v}" else "?"
                    for n in order)
    mod = native.module() if "?" not in kinds else None
    if mod is None:
        return ct

    def on_error(code, g0, g1, g2, stream, values):
        if code == 201:  # CUDA_ERROR_INVALID_CONTEXT: this thread has no current context yet
            return ct(g0, g1, g2, stream, *values)   # the ctypes launcher makes it current and retries
        driver.raise_launch_error(code, kernel_name, num_warps, lf)

    def on_bad(i, value):
        _bad_value((value,), [order[i]], passed, kernel_name)

    fn_addr = ctypes.cast(driver.libcuda()["cuLaunchKernel"], ctypes.c_void_p).value
    return mod.Launcher(fn_addr, lf.handle, num_warps * 32, int(shared), len(call_names),
                        tuple(call_names.index(n) for n in order), kinds, on_error, on_bad)


def make_ctypes_launcher(lf: "driver.LoadedFunction", call_names: list[str], passed: dict[str, str],
                         num_warps: int, shared: int, kernel_name: str):
    """The ctypes launcher (same call as make_launcher's)."""
    lib = driver.libcuda()
    order = list(passed)
    slots = [_slot(passed[n]) for n in order]
    types = [t for t, _ in slots]
    buf = _Buffer(types)
    vars_ = {n: f"_v{i}" for i, n in enumerate(call_names)}
    ns = {
        "_L": _unprototyped(lib, "cuLaunchKernel"), "_h": ctypes.c_void_p(lf.handle), "_bx": num_warps * 32,
        "_sh": int(shared), "_buf": buf, "_pa": buf.params, "_types": types,
        "_ident": threading.get_ident, "_owner": threading.get_ident(), "_Buffer": _Buffer,
        "_f16_bits": _f16_bits, "_bf16_bits": _bf16_bits, "_driver": driver, "_lf": lf, "_name": kernel_name,
        "_nw": num_warps, "_streams": _STREAMS, "_stream_obj": _stream_obj, "_ArgErr": ctypes.ArgumentError,
        "_order": order, "_passed": passed, "_bad": _bad_value,
    }
    for i, x in enumerate(buf.slots):
        ns[f"_s{i}"] = x
    args = ", ".join(vars_[n] for n in call_names)
    sig = "_g0, _g1, _g2, _stream" + (", " + args if args else "")
    conv = [c.format(v=vars_[n]) for n, (_, c) in zip(order, slots)]
    vals_tuple = f"({', '.join(conv)},)" if order else "()"
    sets = "\n        ".join(f"_pa[{i}] = {c}" if t is _ByAddress else f"_s{i}.value = {c}"
                              for i, (c, t) in enumerate(zip(conv, types))) or "pass"
    sets_b = "\n        ".join(f"_b.params[{i}] = {c}" if t is _ByAddress else f"_b.slots[{i}].value = {c}"
                                for i, (c, t) in enumerate(zip(conv, types))) or "pass"
    code = f"""
def launch({sig}):
    if _ident() != _owner:
        return _fresh({sig})
    try:
        {sets}
    except TypeError:
        _bad({vals_tuple}, _order, _passed, _name)
    _sv = _streams.get(_stream)
    if _sv is None: _sv = _stream_obj(_stream)
    try:
        _r = _L(_h, _g0, _g1, _g2, _bx, 1, 1, _sh, _sv, _pa, None)
    except _ArgErr:
        _r = _L(_h, int(_g0), int(_g1), int(_g2), _bx, 1, 1, _sh, _sv, _pa, None)
    if _r:
        _retry(_r, _pa, _g0, _g1, _g2, _stream)

def _fresh({sig}):
    _b = _Buffer(_types)
    try:
        {sets_b}
    except TypeError:
        _bad({vals_tuple}, _order, _passed, _name)
    _r = _L(_h, int(_g0), int(_g1), int(_g2), _bx, 1, 1, _sh, _stream_obj(_stream), _b.params, None)
    if _r:
        _retry(_r, _b.params, _g0, _g1, _g2, _stream)

def _retry(_r, _p, _g0, _g1, _g2, _stream):
    if _r == 201:  # CUDA_ERROR_INVALID_CONTEXT: no current context on this thread
        _driver.ensure_context(_lf.device)
        _r = _L(_h, int(_g0), int(_g1), int(_g2), _bx, 1, 1, _sh, _stream_obj(_stream), _p, None)
    if _r:
        _driver.raise_launch_error(_r, _name, _nw, _lf)
"""
    exec(compile(code, f"<blocktune launcher {kernel_name}>", "exec"), ns)  # noqa: S102 - our own generated code
    fn = ns["launch"]
    fn.__blocktune_source__ = code
    return fn


def _bad_value(values, order, passed, name):
    for n, v in zip(order, values):
        t = _slot(passed[n])[0]
        try:
            t(v)
        except TypeError:
            raise ValueError(f"{name}: argument '{n}' = {v!r} does not fit the kernel's parameter type "
                             f"{passed[n]}") from None
    raise ValueError(f"{name}: cannot pack the arguments {values!r}")
