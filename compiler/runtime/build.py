"""One specialization of a @jit kernel → `CompiledKernel`: the front end, the backend, through the cache.

    ck = compile_jit(kernel, signature={"x_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 1024},
                     num_warps=4, num_stages=3, target="sm_90", divisible_by_16=("x_ptr",))

`compiler.compile` (compile.py) takes any @jit or plain function; the @jit runner calls this
directly. `stats` counts compiles and hits (tests use it).
"""
from __future__ import annotations

import os

from .. import knobs
from ..errors import ArgumentError, CompilationError, OutOfResources
from ..language import descriptor_type as DT
from ..language import dtypes as T
from ..language.core import constexpr
from ..version import __version__
from . import cache, driver, ir_override
from .kernel import CompiledKernel

stats = {"compiled": 0, "memory_hits": 0, "disk_hits": 0, "disk_writes": 0, "ir_built": 0}


def _type_str(t) -> str:
    if isinstance(t, T.dtype):
        return T.to_signature(t)
    s = str(t).strip()
    if DT.parse(s):
        return s
    return T.to_signature(T.from_signature(s))


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
    from ..frontend.tuple_args import root  # noqa: PLC0415 - import time: the front end loads at the first compile
    unknown = [k for k in signature if root(k) not in fn.arg_names]
    if unknown:
        raise ValueError(f"{fn.__name__}() has no parameter(s) {unknown}")
    out = {}
    for p in fn.arg_names:
        for k in signature:        # `p`, or the leaves `p.0`, `p.1.0`... of a tuple parameter
            if root(k) != p:
                continue
            try:
                out[k] = _type_str(signature[k])
            except (ValueError, KeyError) as e:
                raise ValueError(f"parameter {k}: {e}") from None
    return out


def default_target() -> str:
    return driver.default_target()


def build_ir(fn, signature: dict, constexprs: dict, divisible_by_16=(), equal_to_1=(), target: str | None = None,
             num_warps: int | None = None):
    """Run the front end. Integers equal to 1 become constexprs (not passed at launch). `target`:
    the GPU it compiles for, where host tensor descriptors may use TMA (knobs.codegen.tma);
    `num_warps`: the launch's (tl.extra.cuda.num_warps() reads it)."""
    from ..frontend import generate_ir  # noqa: PLC0415 - import time: the front end loads at the first compile
    both = [n for n in fn.constexpr_names if n in fn.do_not_specialize]
    if both:
        raise CompilationError(f"{both[0]} marked as constexpr and listed in do_not_specialize: a constexpr is "
                               "always specialized (drop it from do_not_specialize)",
                               fn.definition_loc(), fn.source_line(fn.first_lineno))
    sig = {k: v for k, v in signature.items() if k not in equal_to_1}
    cx = dict(constexprs)
    for k in equal_to_1:
        cx[k] = 1
    attrs = {k: {"divisibility": 16} for k in divisible_by_16 if k in sig}
    stats["ir_built"] += 1
    ir_fn = generate_ir(fn, sig, cx, attrs, tma_target=target if knobs.codegen.tma else None, num_warps=num_warps,
                        device_functions=target is not None, gpu_target=target)
    if getattr(fn, "_repr", None) is not None:      # @jit(repr=...) names the kernel
        ir_fn.name = fn.kernel_name(signature, constexprs, equal_to_1)
    return ir_fn


# Triton's compile options a launch (or compile()) may give besides num_warps/num_stages, with the
# value that means "not given"; each changes the code, so a given one is part of the cache key.
COMPILE_OPTIONS = {"enable_fp_fusion": None, "maxnreg": None, "enable_reflect_ftz": None, "ir_override": None,
                   "num_ctas": None}


def compile_options(**given) -> tuple:
    """The given compile options (their non-default values), as a sorted tuple for keys."""
    unknown = sorted(set(given) - set(COMPILE_OPTIONS))
    if unknown:
        raise ValueError(f"unknown compile option(s) {unknown} (blocktune has {sorted(COMPILE_OPTIONS)})")
    if given.get("maxnreg") is not None and (not isinstance(given["maxnreg"], int) or given["maxnreg"] < 16):
        raise ArgumentError(f"maxnreg must be an int of at least 16 (registers per thread), got {given['maxnreg']!r}")
    for flag in ("enable_fp_fusion", "enable_reflect_ftz"):
        if given.get(flag) is not None:
            given[flag] = bool(given[flag])
    if given.get("num_ctas") == 1:   # the default, compiled as no option
        given["num_ctas"] = None
    if given.get("ir_override") is not None:
        ir_override.stage_of(given["ir_override"])     # a file of a stage blocktune has, or why not
        given["ir_override"] = os.path.abspath(os.fspath(given["ir_override"]))
    return tuple(sorted((k, v) for k, v in given.items() if v is not COMPILE_OPTIONS[k]))


def _backend_compile(ir_fn, num_warps: int, num_stages: int, target: str, debug: bool = False, options=()) -> dict:
    from ..backend.nvptx import compile_ir  # noqa: PLC0415 - import time: llvmlite loads at the first compile
    from ..backend.llvm_target import llir_to_ptx  # noqa: PLC0415 - (the same)
    options = dict(options)
    override = options.pop("ir_override", None)
    out = compile_ir(ir_fn, num_warps=num_warps, num_stages=num_stages, target=target, debug=debug, **options)
    if override is not None:   # Triton's ir_override: the file replaces its stage (ir_override.py)
        out = ir_override.apply(out, override, lambda llir: llir_to_ptx(llir, cpu=out["target"]))
    return out


def compile_jit(fn, signature, constexprs: dict | None = None, num_warps: int = 4, num_stages: int = 3,
                target: str | None = None, divisible_by_16=(), equal_to_1=(), options=()) -> CompiledKernel:
    """Compile one specialization of the JITFunction `fn` (see compiler.compile); `options`:
    compile_options(...)'s tuple."""
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
    if num_warps < 1 or num_warps & (num_warps - 1):
        raise ArgumentError(f"num_warps must be a power of 2 (1 to 32), got {num_warps}")
    if num_warps > 32:   # as Triton: a resource error, which @autotune scores as a failed config
        raise OutOfResources(num_warps * 32, 1024, "threads")
    if target is None:
        target = default_target()
    keyed = options   # an ir_override file is keyed by its contents too (it may be edited between runs)
    if dict(options).get("ir_override") is not None:
        keyed = tuple(options) + (("ir_override_sha256", ir_override.digest(dict(options)["ir_override"])),)
    key = cache.cache_key(fn, sig, constexprs, num_warps, num_stages, target, divisible_by_16, equal_to_1, keyed)
    ck = cache.memory.get(key)
    if ck is not None:
        stats["memory_hits"] += 1
        return ck
    entry = cache.load(key)
    if entry is not None:
        ck = CompiledKernel(entry["name"], entry["asm"], entry["metadata"])
        stats["disk_hits"] += 1
    else:
        ir_fn = build_ir(fn, sig, constexprs, divisible_by_16, equal_to_1, target, num_warps)
        out = _backend_compile(ir_fn, num_warps, num_stages, target, cache.debug_mode(fn), options)
        stats["compiled"] += 1
        out = dict(out)
        name = out.pop("name", ir_fn.name)
        asm = {"ir": str(ir_fn), "llir": out.pop("llir"), "ptx": out.pop("ptx")}
        if isinstance(out.get("cubin"), (bytes, bytearray)):
            asm["cubin"] = bytes(out.pop("cubin"))
        flat = DT.flat_signature(sig)  # host descriptors: the kernel takes their parts
        for spec in out.get("pointer_maps") or ():   # tensor maps of pointer tiles (pointer_maps.py)
            flat[spec["name"]] = DT.TENSOR_MAP_TYPE
        if out.get("global_scratch_size"):   # device-side descriptors' maps: scratch, passed last
            flat[DT.GLOBAL_SCRATCH] = "*i8"
        metadata = {
            "name": name,
            "num_warps": int(out.pop("num_warps", num_warps)),
            "num_stages": num_stages,
            "shared": int(out.pop("shared", 0) or 0),
            "target": out.pop("target", target),
            "arg_names": list(flat),
            "parameters": list(fn.arg_names),  # as written, constexprs included: compiled[grid](*all of them)
            "arg_types": list(flat.values()),
            "passed": [n for n in flat if n not in equal_to_1],
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
                if not set(names) <= set(flat):
                    raise RuntimeError(f"backend parameter list {names} does not match the signature {list(sig)}")
                metadata["passed"] = names
            metadata["params"] = _jsonable(params)
        for k, v in out.items():  # whatever else the backend reports (e.g. needs sm_90a)
            metadata.setdefault(k, _jsonable(v))
        ck = CompiledKernel(name, asm, metadata)
        cache.store(key, name, asm, metadata)
        stats["disk_writes"] += 1
    with cache.lock:
        ck = cache.memory.setdefault(key, ck)
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
