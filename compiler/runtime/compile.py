"""`compiler.compile`: one specialization of a kernel → `CompiledKernel`, with memory and disk caches.

    ck = compiler.compile(kernel, signature={"x_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 1024},
                          num_warps=4, num_stages=3, target="sm_90", divisible_by_16=("x_ptr",))
    ck.asm["ptx"]; ck.metadata["shared"]; ck.launch((nblocks, 1, 1), [x, n])

Triton's ahead-of-time form works too, for any target (no GPU needed):

    ck = compiler.compile(compiler.ASTSource(kernel, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                             constexprs={"BLOCK": 1024}),
                          target=GPUTarget("cuda", 100, 32), options={"num_warps": 8})
    ck.asm["ptx"]; ck.asm["cubin"]       # the cubin is assembled with ptxas when first asked for

The work is build.py's (front end, backend) through cache.py (keys, memory and disk); this module
takes any @jit function (or a plain one, or an @autotune/@heuristics wrapper) and is where the
tuner and the service reach the compiler's parts (docs/contracts.md).
"""
from __future__ import annotations

from ..errors import CompilationError
from .build import (  # noqa: F401
    COMPILE_OPTIONS, build_ir, compile_jit, compile_options, default_target, normalize_signature, stats, _backend_compile,
)
from .cache import (  # noqa: F401  (the tuner's compile step and the tests use these names from here)
    atomic_write, cache_dir, cache_key, canon, clear_memory_cache, compiler_source_hash, debug_mode,
    disk_enabled as _disk_enabled, memory as _memory,
)
from .driver import GPUTarget
from .jit import _TRITON_LAUNCH_OPTIONS, JITFunction, _target_of_arch
from .kernel import CompiledKernel
from .num_ctas import check_num_ctas


def _as_jit(fn):
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


class ASTSource:
    """Triton's description of what to compile: a @jit function, its signature (name → type string,
    "constexpr" for the parameters whose value is in `constexprs`), the constexpr values (by name,
    or by Triton's index path `(i,)`) and Triton's `attrs` ({(i,): [["tt.divisibility", 16]]}:
    which integer and pointer parameters are multiples of 16)."""

    def __init__(self, fn, signature, constexprs=None, attrs=None):
        self.fn = _as_jit(fn)
        self.name = self.fn.__name__
        for k in signature:
            if not isinstance(k, str):
                raise TypeError("Signature keys must be string")
        self.signature = dict(signature)
        self.constexprs = {self._name(k): v for k, v in dict(constexprs or {}).items()}
        self.attrs = dict(attrs or {})

    def _name(self, key) -> str:
        """A parameter's name from Triton's index path (blocktune names a tuple's leaves `p.0`)."""
        if isinstance(key, str):
            return key
        if not isinstance(key, tuple) or not key:
            raise TypeError(f"ASTSource: a constexpr or attribute key is a parameter name or an index path, got {key!r}")
        return ".".join([self.fn.arg_names[key[0]], *map(str, key[1:])])

    def compile_args(self) -> dict:
        """compile_jit's arguments (signature, constexprs, divisible_by_16)."""
        sig = {k: v for k, v in self.signature.items() if str(v) != "constexpr"}
        div16 = [self._name(k) for k, specs in self.attrs.items()
                 if any(list(spec) == ["tt.divisibility", 16] for spec in specs)]
        return {"signature": sig, "constexprs": self.constexprs, "divisible_by_16": [n for n in div16 if n in sig]}


# Triton's compile options: those kernel[grid](...) takes (jit.py): enable_fp_fusion and maxnreg
# (build.COMPILE_OPTIONS) compile in, the hints that change no result are accepted and ignored;
# num_ctas > 1 compiles the same one-CTA program (num_ctas.py).
_OPTIONS = {"num_warps", "num_stages"} | {o.split("=")[0] for o in _TRITON_LAUNCH_OPTIONS}


def _target_name(target) -> str | None:
    """Triton's GPUTarget("cuda", 90, 32) → "sm_90a" (Triton's rule: "a" from capability 9.0 on);
    a string ("sm_90") is blocktune's own spelling and stays as it is."""
    if target is None or isinstance(target, str):
        return target
    if not isinstance(target, GPUTarget):
        raise TypeError(f"target must be a GPUTarget or a target name like 'sm_90', got {type(target).__name__}")
    if target.backend != "cuda" or target.warp_size != 32:
        raise ValueError(f"blocktune compiles for NVIDIA GPUs (GPUTarget('cuda', <capability>, 32)), got {target}")
    arch = int(target.arch)
    return f"sm_{arch}{'a' if arch >= 90 else ''}"


def compile(src, signature=None, constexprs: dict | None = None, num_warps: int = 4, num_stages: int = 3,
            target=None, divisible_by_16=(), equal_to_1=(), options: dict | None = None) -> CompiledKernel:
    """Compile one specialization of `src` (a @jit function, or Triton's ASTSource) for the GPU.
    See the module doc."""
    if isinstance(src, ASTSource):
        if signature is not None or constexprs is not None:
            raise TypeError("compile(ASTSource(...)): the signature and constexprs are the ASTSource's")
        opts = dict(options or {})
        unknown = sorted(set(opts) - _OPTIONS)
        if unknown:
            raise ValueError(f"compile(): blocktune has no option(s) {unknown} (it takes {sorted(_OPTIONS)})")
        given = compile_options(**{k: opts[k] for k in COMPILE_OPTIONS if k in opts})
        if opts.get("arch") is not None:         # Triton's arch option: the target, unless one is given
            target = target if target is not None else _target_of_arch(opts["arch"])
        check_num_ctas(opts.get("num_ctas", 1), _target_name(target) or default_target())
        return compile_jit(src.fn, num_warps=opts.get("num_warps", num_warps), num_stages=opts.get("num_stages", num_stages),
                           target=_target_name(target), options=given, **src.compile_args())
    if signature is None:
        raise TypeError("compile() needs a signature (or Triton's ASTSource)")
    if options:
        raise TypeError("compile(): options go with an ASTSource; pass num_warps/num_stages as arguments")
    return compile_jit(_as_jit(src), signature, constexprs, num_warps, num_stages, _target_name(target),
                       divisible_by_16, equal_to_1)


__all__ = ["compile", "ASTSource", "CompiledKernel", "CompilationError", "cache_dir", "stats", "canon", "build_ir",
           "normalize_signature"]
