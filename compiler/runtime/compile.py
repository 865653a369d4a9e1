"""`compiler.compile`: one specialization of a kernel → `CompiledKernel`, with memory and disk caches.

    ck = compiler.compile(kernel, signature={"x_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 1024},
                          num_warps=4, num_stages=3, target="sm_90", divisible_by_16=("x_ptr",))
    ck.asm["ptx"]; ck.metadata["shared"]; ck.launch((nblocks, 1, 1), [x, n])

Cache key: sha256 over the kernel's fingerprint (its normalized source, the @jit functions it
calls, the compiler version), the compiler's own source (`compiler_source_hash`: a changed
front end or backend never reuses stale PTX), the specialization (types, constexpr values,
divisibility, equal-to-1), num_warps, num_stages, the target and every codegen knob
(`knobs.codegen.key()`). Disk cache: `knobs.cache.dir` ($BLOCKTUNE_CACHE_DIR), else the
platform's user cache dir + "/blocktune"; one JSON file per compiled kernel, written atomically
(temp file + os.replace). `stats` counts compiles and hits (tests use it).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import tempfile
import threading
from typing import Any

from .. import __version__, knobs
from ..errors import CompilationError
from ..language import dtypes as T
from ..language.core import constexpr

stats = {"compiled": 0, "memory_hits": 0, "disk_hits": 0, "disk_writes": 0, "ir_built": 0}
_memory: dict[str, "CompiledKernel"] = {}
_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------
# Cache directory

def cache_dir() -> str:
    d = knobs.cache.dir
    if not d:
        import platformdirs  # noqa: PLC0415
        d = os.path.join(platformdirs.user_cache_dir(), "blocktune")
    return d


def _disk_enabled() -> bool:
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
    with _lock:
        _memory.clear()


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
        return f"dtype:{v.name}"
    if isinstance(v, T.block_type):
        return f"block:{v.element_ty.name}:{v.shape}"
    if isinstance(v, (tuple, list)):
        return f"{type(v).__name__}(" + ",".join(canon(x) for x in v) + ")"
    fp = getattr(v, "fingerprint", None)
    if isinstance(fp, str):  # a @jit function passed as a constexpr
        return f"jit:{fp}"
    if hasattr(v, "__blocktune_builtin__"):
        return f"builtin:{v.__blocktune_builtin__}"
    name = getattr(v, "__module__", "") + "." + getattr(v, "__qualname__", getattr(v, "__name__", ""))
    if name != ".":
        return f"obj:{name}"
    raise TypeError(f"cannot use {v!r} (type {type(v).__name__}) as a compile-time constant")


def _type_str(t) -> str:
    if isinstance(t, T.dtype):
        return T.to_signature(t)
    s = str(t).strip()
    return T.to_signature(T.from_signature(s))


# ---------------------------------------------------------------------------------------------
# Normalizing the arguments of compile()

def _as_jit(fn):
    from .jit import JITFunction  # noqa: PLC0415
    obj = fn
    for _ in range(8):  # Autotuner / Heuristics wrap the JITFunction in `.fn`
        if isinstance(obj, JITFunction):
            return obj
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    if callable(fn) and hasattr(fn, "__code__"):
        return JITFunction(fn)
    raise TypeError(f"compile() needs a @jit function, got {type(fn).__name__}")


def normalize_signature(fn, signature, constexprs: dict) -> dict[str, str]:
    """dict name → type string, in the kernel's parameter order. Accepts a dict, Triton's
    positional "*fp32,i32" string, or a list of type strings (positional over the parameters that
    are not constexprs and have no value in `constexprs`)."""
    if isinstance(signature, str):
        signature = [s for s in (x.strip() for x in signature.split(",")) if s]
    if isinstance(signature, (list, tuple)):
        runtime = [p for p in fn.arg_names if p not in fn.constexpr_names and p not in constexprs]
        if len(signature) != len(runtime):
            raise ValueError(f"signature has {len(signature)} types but {fn.__name__}() has {len(runtime)} "
                             f"runtime parameters ({', '.join(runtime)})")
        signature = dict(zip(runtime, signature))
    if not isinstance(signature, dict):
        raise TypeError("signature must be a dict {name: type}, a '*fp32,i32' string or a list of types")
    unknown = [k for k in signature if k not in fn.arg_names]
    if unknown:
        raise ValueError(f"{fn.__name__}() has no parameter(s) {unknown}")
    out = {}
    for p in fn.arg_names:
        if p in signature:
            try:
                out[p] = _type_str(signature[p])
            except (ValueError, KeyError) as e:
                raise ValueError(f"parameter {p}: {e}") from None
    return out


def default_target() -> str:
    from . import driver  # noqa: PLC0415
    return driver.default_target()


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
    import importlib.util  # noqa: PLC0415
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.origin:
        return ""
    site = os.path.dirname(os.path.dirname(spec.origin))
    try:
        return ",".join(sorted(n for n in os.listdir(site) if n.startswith("llvmlite-") and n.endswith("-info")))
    except OSError:
        return ""


def cache_key(fn, signature: dict, constexprs: dict, num_warps: int, num_stages: int, target: str,
              divisible_by_16, equal_to_1) -> str:
    h = hashlib.sha256()
    parts = [
        "blocktune-kernel", __version__, compiler_source_hash(), fn.fingerprint, fn.__name__,
        ";".join(f"{k}:{v}" for k, v in signature.items()),
        ";".join(f"{k}={canon(constexprs[k])}" for k in sorted(constexprs)),
        "div16:" + ",".join(sorted(divisible_by_16)), "eq1:" + ",".join(sorted(equal_to_1)),
        f"w{int(num_warps)}", f"s{int(num_stages)}", str(target),
        knobs.codegen.key(),              # every switch that changes the generated code
        f"debug={int(debug_mode(fn))}",
    ]
    h.update("\x00".join(parts).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# The front end and the backend

def build_ir(fn, signature: dict, constexprs: dict, divisible_by_16=(), equal_to_1=()):
    """Run the front end. Integers equal to 1 become constexprs (not passed at launch)."""
    from ..frontend import generate_ir  # noqa: PLC0415
    sig = {k: v for k, v in signature.items() if k not in equal_to_1}
    cx = dict(constexprs)
    for k in equal_to_1:
        cx[k] = 1
    attrs = {k: {"divisibility": 16} for k in divisible_by_16 if k in sig}
    stats["ir_built"] += 1
    return generate_ir(fn, sig, cx, attrs)


def debug_mode(fn) -> bool:
    """`@jit(debug=True)`, or knobs.codegen.debug (TRITON_DEBUG=1 / BLOCKTUNE_DEBUG=1): device_assert
    is checked on the GPU."""
    return bool(getattr(fn, "debug", None)) or knobs.codegen.debug


def _backend_compile(ir_fn, num_warps: int, num_stages: int, target: str, debug: bool = False) -> dict:
    from ..backend.nvptx import compile_ir  # noqa: PLC0415
    return compile_ir(ir_fn, num_warps=num_warps, num_stages=num_stages, target=target, debug=debug)


# ---------------------------------------------------------------------------------------------

class CompiledKernel:
    """One compiled specialization. Picklable (the loaded CUDA module is not part of the state).

    `.asm`: {"ir", "llir", "ptx"} (plus "cubin" bytes when assembled with ptxas);
    `.metadata`: name, num_warps, num_stages, shared, target, arg_names, arg_types, passed
    (the parameters the kernel takes at launch, in order), constexprs, divisible_by_16,
    equal_to_1, cache_key, and what the backend reported.
    """

    def __init__(self, name: str, asm: dict, metadata: dict):
        self.name = name
        self.asm = asm
        self.metadata = metadata
        self._loaded: dict[int, Any] = {}
        self._launchers: dict[tuple, Any] = {}
        self._plans: dict[int, tuple] = {}

    # Triton-compatible conveniences
    @property
    def num_warps(self) -> int:
        return self.metadata["num_warps"]

    @property
    def num_stages(self) -> int:
        return self.metadata["num_stages"]

    @property
    def shared(self) -> int:
        return self.metadata.get("shared", 0)

    @property
    def n_regs(self) -> int | None:
        lf = next(iter(self._loaded.values()), None)
        return lf.num_regs if lf is not None else None

    def __getstate__(self):
        return {"name": self.name, "asm": self.asm, "metadata": self.metadata}

    def __setstate__(self, state):
        self.name, self.asm, self.metadata = state["name"], state["asm"], state["metadata"]
        self._loaded, self._launchers, self._plans = {}, {}, {}

    def __repr__(self) -> str:
        m = self.metadata
        return (f"<CompiledKernel {self.name} {m.get('target')} num_warps={m.get('num_warps')} "
                f"num_stages={m.get('num_stages')} shared={m.get('shared')}>")

    # -- loading --------------------------------------------------------------------------------
    def _image(self):
        """What to hand to the driver: a cubin when one is there (or BLOCKTUNE_PTXAS_AOT=1 and
        ptxas exists — then it is made once and kept in the disk cache), else the PTX."""
        cubin = self.asm.get("cubin")
        if cubin:
            return cubin
        if knobs.runtime.ptxas_aot:
            from . import driver  # noqa: PLC0415
            if driver.ptxas_path():
                cubin = driver.ptxas_compile(self.asm["ptx"], self.metadata["target"])
                self.asm["cubin"] = cubin
                key = self.metadata.get("cache_key")
                if key and _disk_enabled():
                    try:
                        atomic_write(os.path.join(cache_dir(), key[:2], key + ".cubin"), cubin)
                    except OSError:
                        pass
                return cubin
        return self.asm["ptx"]

    def load(self, device: int | None = None):
        """Load into `device`'s context (the current one by default); cached per device."""
        from . import driver  # noqa: PLC0415
        dev = driver.current_device() if device is None else int(device)
        lf = self._loaded.get(dev)
        if lf is None:
            with _lock:
                lf = self._loaded.get(dev)
                if lf is None:
                    lf = driver.load_module(self._image(), self.name, self.metadata.get("shared", 0), dev)
                    self._loaded[dev] = lf
        return lf

    def make_launcher(self, device: int, call_names: list[str]):
        """A fast `launch(g0, g1, g2, stream, *values)` taking values for `call_names` (cached)."""
        key = (device, tuple(call_names))
        fn = self._launchers.get(key)
        if fn is None:
            from .launcher import make_launcher  # noqa: PLC0415
            lf = self.load(device)
            m = self.metadata
            passed = {n: m["arg_types"][m["arg_names"].index(n)] for n in m["passed"]}
            fn = make_launcher(lf, list(call_names), passed, m["num_warps"], m.get("shared", 0), self.name)
            self._launchers[key] = fn
        return fn

    # -- the public, checked launch -------------------------------------------------------------
    def launch(self, grid, args, stream: int = 0) -> None:
        """Launch on the GPU. `args`: values for every signature parameter (in signature order), or
        for the passed ones only (equal-to-1 integers left out). Tensors (torch CUDA or
        `__cuda_array_interface__`) or raw device addresses for pointers. Raises ValueError when an
        argument breaks the divisibility / equal-to-1 assumptions this kernel was compiled with."""
        plan = self._plans.get(len(args))
        if plan is None:
            plan = self._plan(len(args))
        convs, div_pos, eq1_pos, passed_pos = plan
        values = [conv(v) for conv, v in zip(convs, args)]
        for i, n in div_pos:
            if values[i] % 16:
                raise ValueError(f"{self.name}: argument '{n}' = {values[i]:#x} is not divisible by 16, but the "
                                 "kernel was compiled assuming it is")
        for i, n in eq1_pos:
            if values[i] != 1:
                raise ValueError(f"{self.name}: argument '{n}' = {values[i]} but the kernel was compiled for the "
                                 "value 1")
        if type(grid) is not tuple:
            grid = tuple(grid) if isinstance(grid, list) else (grid,)
        n = len(grid)
        if not 1 <= n <= 3:
            raise ValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
        g0 = int(grid[0])
        g1 = int(grid[1]) if n > 1 else 1
        g2 = int(grid[2]) if n > 2 else 1
        if g0 <= 0 or g1 <= 0 or g2 <= 0:
            return
        dev = _current_device()
        fn = self._launchers.get((dev, self._passed_key))
        if fn is None:
            fn = self.make_launcher(dev, self.metadata["passed"])
        fn(g0, g1, g2, stream or 0, *[values[i] for i in passed_pos])

    def _plan(self, nargs: int):
        m = self.metadata
        names = m["arg_names"]
        if nargs == len(names):
            order = list(names)
        elif nargs == len(m["passed"]):
            order = list(m["passed"])
        else:
            raise ValueError(f"{self.name}: expected {len(names)} arguments ({', '.join(names)}) "
                             f"or {len(m['passed'])} ({', '.join(m['passed'])}), got {nargs}")
        convs = [functools.partial(_launch_value, name=n, ty=m["arg_types"][names.index(n)]) for n in order]
        div_pos = [(order.index(n), n) for n in m.get("divisible_by_16", ()) if n in order]
        eq1_pos = [(order.index(n), n) for n in m.get("equal_to_1", ()) if n in order]
        passed_pos = [order.index(n) for n in m["passed"]]
        plan = (convs, div_pos, eq1_pos, passed_pos)
        self._plans[nargs] = plan
        return plan

    @property
    def _passed_key(self):
        return tuple(self.metadata["passed"])

    def __getitem__(self, grid):
        """Triton-style `compiled[grid](*args)` on the current stream."""
        return lambda *args, stream=0: self.launch(grid, args, stream)


def _current_device() -> int:
    from . import driver  # noqa: PLC0415
    return driver.current_device()


def _launch_value(v, name: str, ty: str):
    if type(v) is int:
        return v
    if ty.startswith("*"):
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        dp = getattr(v, "data_ptr", None)
        if dp is not None:
            if getattr(v, "is_cuda", True) is False:
                raise ValueError(f"argument '{name}' is a CPU tensor; the GPU needs a CUDA tensor")
            return int(dp())
        cai = getattr(v, "__cuda_array_interface__", None)
        if cai is not None:
            return int(cai["data"][0])
        raise TypeError(f"argument '{name}' ({ty}): expected a CUDA tensor or a device address, got {type(v).__name__}")
    if ty.startswith("fp") or ty.startswith("bf") or ty.startswith("f"):
        return float(v)
    if hasattr(v, "item") and not isinstance(v, int):
        v = v.item()
    return int(v)


# ---------------------------------------------------------------------------------------------

def _load_disk(key: str) -> CompiledKernel | None:
    if not _disk_enabled():
        return None
    path = os.path.join(cache_dir(), key[:2], key + ".json")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
        ck = CompiledKernel(data["name"], data["asm"], data["metadata"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cub = os.path.join(cache_dir(), key[:2], key + ".cubin")
    if os.path.exists(cub):
        try:
            with open(cub, "rb") as f:
                ck.asm["cubin"] = f.read()
        except OSError:
            pass
    return ck


def _store_disk(key: str, ck: CompiledKernel) -> None:
    if not _disk_enabled():
        return
    asm = {k: v for k, v in ck.asm.items() if isinstance(v, str)}
    try:
        data = json.dumps({"name": ck.name, "asm": asm, "metadata": ck.metadata}, default=_json_default).encode()
        atomic_write(os.path.join(cache_dir(), key[:2], key + ".json"), data)
        stats["disk_writes"] += 1
    except (OSError, TypeError, ValueError):
        pass  # a cache we cannot write is only slower


def _json_default(o):
    if isinstance(o, constexpr):
        return o.value
    if isinstance(o, (T.dtype, T.block_type)):
        return str(o)
    if isinstance(o, tuple):
        return list(o)
    return repr(o)


def compile(fn, signature, constexprs: dict | None = None, num_warps: int = 4, num_stages: int = 3,
            target: str | None = None, divisible_by_16=(), equal_to_1=()) -> CompiledKernel:
    """Compile one specialization of `fn` (a @jit function) for the GPU. See the module doc."""
    fn = _as_jit(fn)
    constexprs = {k: (v.value if isinstance(v, constexpr) else v) for k, v in dict(constexprs or {}).items()}
    unknown = [k for k in constexprs if k not in fn.arg_names]
    if unknown:
        raise ValueError(f"{fn.__name__}() has no parameter(s) {unknown}")
    sig = normalize_signature(fn, signature, constexprs)
    divisible_by_16 = tuple(divisible_by_16 or ())
    equal_to_1 = tuple(equal_to_1 or ())
    for n in divisible_by_16 + equal_to_1:
        if n not in sig:
            raise ValueError(f"'{n}' is in divisible_by_16/equal_to_1 but not in the signature")
    for n in equal_to_1:
        if sig[n].startswith("*") or sig[n].startswith("fp") or sig[n] == "bf16":
            raise ValueError(f"'{n}' is {sig[n]}: only integers can be specialized to 1")
    num_warps, num_stages = int(num_warps), int(num_stages)
    if num_warps < 1 or num_warps & (num_warps - 1) or num_warps > 32:
        raise ValueError(f"num_warps must be a power of two from 1 to 32, got {num_warps}")
    if target is None:
        target = default_target()
    key = cache_key(fn, sig, constexprs, num_warps, num_stages, target, divisible_by_16, equal_to_1)
    ck = _memory.get(key)
    if ck is not None:
        stats["memory_hits"] += 1
        return ck
    ck = _load_disk(key)
    if ck is not None:
        stats["disk_hits"] += 1
    else:
        ir_fn = build_ir(fn, sig, constexprs, divisible_by_16, equal_to_1)
        out = _backend_compile(ir_fn, num_warps, num_stages, target, debug_mode(fn))
        stats["compiled"] += 1
        out = dict(out)
        name = out.pop("name", ir_fn.name)
        asm = {"ir": str(ir_fn), "llir": out.pop("llir"), "ptx": out.pop("ptx")}
        if isinstance(out.get("cubin"), (bytes, bytearray)):
            asm["cubin"] = bytes(out.pop("cubin"))
        metadata = {
            "name": name,
            "num_warps": int(out.pop("num_warps", num_warps)),
            "num_stages": num_stages,
            "shared": int(out.pop("shared", 0) or 0),
            "target": out.pop("target", target),
            "arg_names": list(sig),
            "arg_types": list(sig.values()),
            "passed": [n for n in sig if n not in equal_to_1],
            "constexprs": {k: _jsonable(v) for k, v in constexprs.items()},
            "divisible_by_16": list(divisible_by_16),
            "equal_to_1": list(equal_to_1),
            "kernel": fn.__name__,
            "fingerprint": fn.fingerprint,
            "compiler_version": __version__,
            "cache_key": key,
        }
        params = out.pop("params", None)
        if isinstance(params, list) and all(isinstance(p, dict) and "name" in p for p in params):
            # the backend's own account of the kernel's parameters wins (names, order)
            names = [p["name"] for p in params]
            if names != metadata["passed"]:
                if not set(names) <= set(sig):
                    raise RuntimeError(f"backend parameter list {names} does not match the signature {list(sig)}")
                metadata["passed"] = names
            metadata["params"] = _jsonable(params)
        for k, v in out.items():  # whatever else the backend reports (e.g. needs sm_90a)
            metadata.setdefault(k, _jsonable(v))
        ck = CompiledKernel(name, asm, metadata)
        _store_disk(key, ck)
    with _lock:
        ck = _memory.setdefault(key, ck)
    return ck


def _jsonable(v):
    if isinstance(v, constexpr):
        v = v.value
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (T.dtype, T.block_type)):
        return str(v)
    fp = getattr(v, "fingerprint", None)
    if isinstance(fp, str):
        return f"<jit {getattr(v, '__name__', '?')}>"
    return repr(v)


__all__ = ["compile", "CompiledKernel", "CompilationError", "cache_dir", "stats", "canon", "build_ir"]
