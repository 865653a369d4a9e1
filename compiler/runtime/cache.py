"""The kernel cache: keys, the in-memory cache of this process and the disk cache across processes.

Key (`cache_key`): sha256 over the kernel's fingerprint (its normalized source, the @jit functions
it calls, the compiler version), the compiler's own source (`compiler_source_hash`: a changed
front end or backend never reuses stale PTX), the specialization (types, constexpr values,
divisibility, equal-to-1), num_warps, num_stages, the target, debug mode and every codegen knob
(`knobs.codegen.key()`).

Disk: `knobs.cache.dir` ($BLOCKTUNE_CACHE_DIR), else the platform's user cache dir + "/blocktune";
one JSON file per compiled kernel (and its cubin beside it, when one was assembled), written
atomically (temp file + os.replace). `memory` holds this process's CompiledKernels by key.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import importlib.util
import json
import os
import struct
import tempfile
import threading
from typing import Any

import platformdirs

from .. import knobs
from ..language import dtypes as T
from ..language.core import constexpr
from ..version import __version__

memory: dict[str, Any] = {}      # key → CompiledKernel
lock = threading.Lock()


def cache_dir() -> str:
    d = knobs.cache.dir
    if not d:
        d = os.path.join(platformdirs.user_cache_dir(), "blocktune")
    return d


def disk_enabled() -> bool:
    return not knobs.cache.disabled


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically (a reader sees the old file or the whole new one)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def clear_memory_cache() -> None:
    """Forget compiled kernels held in this process (the disk cache stays)."""
    with lock:
        memory.clear()


# ---------------------------------------------------------------------------------------------
# Canonical text of constexpr values (for cache keys and fingerprints)

def canon(v: Any) -> str:
    """A stable text for a compile-time value: same value → same text across processes."""
    if isinstance(v, constexpr):
        return canon(v.value)
    if v is None or isinstance(v, (bool, int, str)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, float):
        return f"float:{struct.pack('<d', v).hex()}"
    if isinstance(v, T.dtype):
        return f"dtype:{v.sig_name}"
    if isinstance(v, T.block_type):
        return f"block:{v.element_ty.sig_name}:{v.shape}"
    if isinstance(v, (tuple, list)):
        return f"{type(v).__name__}(" + ",".join(canon(x) for x in v) + ")"
    if isinstance(v, enum.Enum):  # tl.PropagateNan.ALL: members have no __qualname__ of their own
        return f"enum:{type(v).__module__}.{type(v).__qualname__}.{v.name}"
    fp = getattr(v, "fingerprint", None)
    if isinstance(fp, str):  # a @jit function passed as a constexpr
        return f"jit:{fp}"
    if hasattr(v, "__blocktune_builtin__"):
        return f"builtin:{v.__blocktune_builtin__}"
    name = getattr(v, "__module__", "") + "." + getattr(v, "__qualname__", getattr(v, "__name__", ""))
    if name != ".":
        return f"obj:{name}"
    raise TypeError(f"cannot use {v!r} (type {type(v).__name__}) as a compile-time constant")


# ---------------------------------------------------------------------------------------------
# Keys

@functools.lru_cache(maxsize=1)
def compiler_source_hash() -> str:
    """sha256 over the compiler's own source files (front end, IR, backend, language) and the
    llvmlite version, so that a changed compiler never reuses PTX cached by an older one (as
    Triton keys its cache on its own source)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for sub in ("", "frontend", "backend", "language"):
        d = os.path.join(root, sub)
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".py"))
        except OSError:
            continue
        for n in names:
            try:
                with open(os.path.join(d, n), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            h.update(f"{sub}/{n}:{len(data)}\n".encode())
            h.update(data)
    h.update(_llvmlite_version().encode())
    return h.hexdigest()


def _llvmlite_version() -> str:
    """llvmlite's version without importing it (or importlib.metadata: both cost tens of ms)."""
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.origin:
        return ""
    site = os.path.dirname(os.path.dirname(spec.origin))
    try:
        return ",".join(sorted(n for n in os.listdir(site) if n.startswith("llvmlite-") and n.endswith("-info")))
    except OSError:
        return ""


def debug_mode(fn) -> bool:
    """`@jit(debug=True)`, or knobs.codegen.debug (TRITON_DEBUG=1 / BLOCKTUNE_DEBUG=1): device_assert
    is checked on the GPU."""
    return bool(getattr(fn, "debug", None)) or knobs.codegen.debug


def _kernel_name(fn, signature, constexprs, equal_to_1) -> str:
    """The compiled kernel's name (`@jit(repr=...)` may make it depend on the specialization)."""
    name_of = getattr(fn, "kernel_name", None)
    return name_of(signature, constexprs, equal_to_1) if name_of is not None else fn.__name__


def cache_key(fn, signature: dict, constexprs: dict, num_warps: int, num_stages: int, target: str,
              divisible_by_16, equal_to_1, options=()) -> str:
    h = hashlib.sha256()
    parts = [
        "blocktune-kernel", __version__, compiler_source_hash(), fn.fingerprint, _kernel_name(fn, signature, constexprs, equal_to_1),
        ";".join(f"{k}:{v}" for k, v in signature.items()),
        ";".join(f"{k}={canon(constexprs[k])}" for k in sorted(constexprs)),
        "div16:" + ",".join(sorted(divisible_by_16)), "eq1:" + ",".join(sorted(equal_to_1)),
        f"w{int(num_warps)}", f"s{int(num_stages)}", str(target),
        knobs.codegen.key(),              # every switch that changes the generated code
        f"debug={int(debug_mode(fn))}",
    ]
    if options:                           # the launch's compile options (build.compile_options)
        parts.append(";".join(f"{k}={v!r}" for k, v in options))
    h.update("\x00".join(parts).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Disk

def load(key: str) -> dict | None:
    """A compiled kernel from the disk cache: {"name", "asm", "metadata"}, or None."""
    if not disk_enabled():
        return None
    path = os.path.join(cache_dir(), key[:2], key + ".json")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
        entry = {"name": data["name"], "asm": data["asm"], "metadata": data["metadata"]}
        if not isinstance(entry["asm"], dict):
            raise TypeError("asm")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cub = os.path.join(cache_dir(), key[:2], key + ".cubin")
    if os.path.exists(cub):
        try:
            with open(cub, "rb") as f:
                entry["asm"]["cubin"] = f.read()
        except OSError:
            pass
    return entry


def store(key: str, name: str, asm: dict, metadata: dict) -> None:
    """Write a compiled kernel to the disk cache (the text parts of `asm`); a cache that cannot be
    written is only slower."""
    if not disk_enabled():
        return
    asm = {k: v for k, v in asm.items() if isinstance(v, str)}
    try:
        data = json.dumps({"name": name, "asm": asm, "metadata": metadata}, default=_json_default).encode()
        atomic_write(os.path.join(cache_dir(), key[:2], key + ".json"), data)
    except (OSError, TypeError, ValueError):
        pass  # a cache we cannot write is only slower


def store_cubin(key: str, cubin: bytes) -> None:
    """Keep a kernel's cubin beside its JSON (BLOCKTUNE_PTXAS_AOT, the tuner's compile pool)."""
    if disk_enabled():
        try:
            atomic_write(os.path.join(cache_dir(), key[:2], key + ".cubin"), cubin)
        except OSError:
            pass


def _json_default(o):
    if isinstance(o, constexpr):
        return o.value
    if isinstance(o, (T.dtype, T.block_type)):
        return str(o)
    if isinstance(o, tuple):
        return list(o)
    return repr(o)
