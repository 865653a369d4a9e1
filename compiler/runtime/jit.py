"""`@jit` and `JITFunction`: the kernel object users decorate, specialize and launch.

    @compiler.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr): ...

    add[grid](x, y, out, n, BLOCK=1024)          # grid: (gx[, gy[, gz]]) or callable(meta) -> tuple

Launch path (the part that must be fast, ≤ 8 µs of host time): each JITFunction generates, once,
a Python function with the kernel's own parameter list (like Triton's generated launcher). Per
call it classifies every runtime argument inline (tensor → dtype + 16-byte alignment of
data_ptr; int → i32/i64/u64 + divisible by 16 + equal to 1; float → fp32; bool → i1; None →
constexpr None), builds the specialization key tuple, looks it up in a dict and calls the
specialization's generated ctypes launcher (see launcher.py) on the current torch stream. Only a
miss goes through the slow path: compile (memory/disk cache) + load + make the launcher.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import re
import sys
import textwrap
import threading
import types
from collections import ChainMap, namedtuple
from typing import Any, Iterable, Mapping

import numpy as np

from .. import knobs, plugins
from ..errors import CompilationError
from ..ir import Loc
from ..language import dtypes as T
from ..language.core import const as tl_const, constexpr
from ..language.library import LibraryFunction
from ..version import __version__
from . import build, cache, descriptors, driver, jit_hooks, launch_hooks, native, pointer_maps
from .num_ctas import check_num_ctas
from .tensor_wrapper import TensorWrapper, reinterpret  # noqa: F401  (triton.runtime.jit's names)
from ..language.dtypes import type_canonicalisation_dict  # noqa: F401  (as triton.runtime.jit's)

# Triton launch options kernel[grid](...) takes: maxnreg, enable_fp_fusion and enable_reflect_ftz are compile options
# (build.COMPILE_OPTIONS; None: not given, the knob decides fusion); the others are accepted and
# ignored, as hints that change no result; num_ctas > 1 runs each program as one CTA (num_ctas.py)
_TRITON_LAUNCH_OPTIONS = ("num_ctas=1", "maxnreg=None", "enable_fp_fusion=None", "enable_reflect_ftz=None", "ir_override=None",
                          "arch=None", "debug=None",
                          "launch_cooperative_grid=False", "extern_libs=None", "launch_pdl=False",
                          "sanitize_overflow=None")


# ---------------------------------------------------------------------------------------------
# Interpret mode is decided at every launch (knobs.runtime.interpret). The launch path first asks
# whether either of its variables is in the environment at all, the cheapest way there is: the
# native module's getenv (tens of ns), else os.environ (a microsecond or two: the ctypes
# launcher's fallback only).

@functools.lru_cache(maxsize=1)
def _interpret_var_check():
    mod = native.module()
    if mod is not None:
        return mod.interpret_var_is_set
    first, second = knobs.runtime.INTERPRET_VARS
    return lambda: first in os.environ or second in os.environ


def interpret_mode() -> bool:
    return _interpret_var_check()() and knobs.runtime.interpret


# ---------------------------------------------------------------------------------------------
# Torch / stream state shared by every generated launcher (refreshed on cache misses)

class _NoTensor:  # a type no argument has, until torch is imported
    pass


_NS: dict[str, Any] = {"_Tensor": _NoTensor}


def _no_gpu_device() -> int:
    """The device for a launch when torch's CUDA state is not (yet) known to the launchers."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            ready = torch.cuda.is_initialized()
        except Exception:
            ready = False
        if ready:
            # torch initialized CUDA since the last refresh: switch the launchers to torch's
            # device and current stream (the caller looks `_get_stream` up after this returns).
            _refresh_torch()
            if _NS["_get_device"] is not _no_gpu_device:
                return _NS["_get_device"]()
    if not driver.has_gpu():
        return -1
    return driver.device_of_current_context()   # the context itself is made when the kernel loads


def _zero_stream(dev) -> int:
    return 0


def _refresh_torch() -> None:
    """Point the generated launchers at torch's tensor type and current stream once torch (and its
    CUDA state) is there."""
    torch = sys.modules.get("torch")
    if torch is None:
        _NS.update(_Tensor=_NoTensor, _get_device=_no_gpu_device, _get_stream=_zero_stream)
        return
    _NS["_Tensor"] = torch.Tensor
    ready = False
    try:
        ready = bool(torch.cuda.is_initialized())
    except Exception:
        ready = False
    if ready and hasattr(torch._C, "_cuda_getCurrentRawStream"):
        _NS["_get_device"] = torch._C._cuda_getDevice
        _NS["_get_stream"] = torch._C._cuda_getCurrentRawStream
    else:
        _NS["_get_device"] = _no_gpu_device
        _NS["_get_stream"] = _zero_stream


_refresh_torch()


# ---------------------------------------------------------------------------------------------
# Argument classification (slow path: anything the generated code does not handle inline)

_I32 = (-(2 ** 31), 2 ** 31 - 1)
_I64 = (-(2 ** 63), 2 ** 63 - 1)


def _int_kind(v: int, specialize: bool):
    if _I32[0] <= v <= _I32[1]:
        k = 1 if (specialize and v == 1) else "i32"
    elif _I64[0] <= v <= _I64[1]:
        k = "i64"
    elif 0 <= v < 2 ** 64:
        k = "u64"
    else:
        raise OverflowError(f"integer argument {v} does not fit in 64 bits")
    return k, (specialize and not (v & 15)), v


def spec_arg(v, index: int, name: str, specialize: bool = True, interpret: bool = False):
    """(key part, divisible by 16, launch value) for one runtime argument. The key part is a torch
    dtype / ('cai', typestr) / ('np', dtype) for pointers, 'i32' 'i64' 'u64' 'fp32' 'i1' for scalars,
    1 for an integer specialized to 1, None for None (a constexpr), ('jit', fingerprint) for a @jit
    function (a constexpr, as in Triton)."""
    t = type(v)
    if t is int:
        return _int_kind(v, specialize)
    if t is bool:
        return "i1", False, int(v)
    if t is float:
        return "fp32", False, v
    if v is None:
        return None, False, None
    if isinstance(v, JITFunction):
        return ("jit", v.fingerprint), False, None
    if isinstance(v, constexpr):
        return spec_arg(v.value, index, name, specialize, interpret)
    if t is TensorWrapper:  # triton.reinterpret: a pointer to the wrapper's dtype
        base_kind, aligned, p = spec_arg(v.base, index, name, specialize, interpret)
        return v.dtype, aligned, p
    torch = sys.modules.get("torch")
    if torch is not None and _NS["_Tensor"] is not torch.Tensor:
        _refresh_torch()
    if torch is not None and isinstance(v, torch.Tensor):
        p = v.data_ptr()
        if not interpret and not v.is_cuda:
            _cpu_tensor(v, name)
        return v.dtype, not (p & 15), p
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        p = int(cai["data"][0])
        return ("cai", cai["typestr"]), not (p & 15), p
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(v, np.ndarray):
            if not interpret:
                raise ValueError(f"argument '{name}' is a numpy array (host memory): launch on the GPU needs CUDA "
                                 "tensors (or set BLOCKTUNE_INTERPRET=1 to run the kernel on the CPU)")
            p = v.__array_interface__["data"][0]
            return ("np", v.dtype.str), not (p & 15), p
        if isinstance(v, np.bool_):
            return "i1", False, int(bool(v))
        if isinstance(v, np.integer):
            return _int_kind(int(v), specialize)
        if isinstance(v, np.floating):
            return "fp32", False, float(v)
    if descriptors.is_descriptor(v):
        base_key, base_aligned, _ = spec_arg(v.base, index, name, specialize, interpret)
        return descriptors.spec(v, base_key, base_aligned, name), False, v
    dp = getattr(v, "data_ptr", None)
    if dp is not None and hasattr(v, "dtype"):
        p = int(dp())
        return ("obj", str(v.dtype)), not (p & 15), p
    if hasattr(v, "__index__"):
        return _int_kind(v.__index__(), specialize)
    raise TypeError(f"argument '{name}': cannot pass a {type(v).__name__} to a kernel (expected a tensor, "
                    "an int, a float, a bool or None)")


def key_to_type(k) -> str:
    """Signature type string for a key part produced by spec_arg."""
    if isinstance(k, str):
        return k
    if k == 1 and type(k) is int:
        return "i32"
    if isinstance(k, tuple) and k[0] == "tensordesc":
        return descriptors.type_string(k, key_to_type(k[1])[1:])
    if isinstance(k, tuple):
        kind, d = k
        if kind == "cai":
            return "*" + T.from_host_dtype(np.dtype(d)).sig_name
        if kind == "np":
            return "*" + T.from_host_dtype(np.dtype(d)).sig_name
        return "*" + T.from_host_dtype(d).sig_name
    return "*" + T.from_host_dtype(k).sig_name   # torch dtype


# ---------------------------------------------------------------------------------------------
# Source handling

def _is_constexpr_annotation(node: ast.AST | None, obj: Any = None) -> bool:
    if obj is constexpr:
        return True
    if isinstance(obj, str) and "constexpr" in obj:
        return True
    if node is not None:
        try:
            return "constexpr" in ast.unparse(node)
        except Exception:
            return False
    return False


def _is_const_annotation(obj) -> bool:
    if isinstance(obj, str):   # a quoted annotation under `from __future__ import annotations`
        return obj.strip().strip("'\"").strip().removeprefix("tl.").removeprefix("triton.language.") == "const"
    return obj is tl_const


def _scalar_annotation(obj):
    """The scalar dtype a parameter annotation names (`tl.float16`, or "tl.uint8" as a string),
    else None (tensors, constexprs, torch types and anything else are not a scalar's type)."""
    if isinstance(obj, str):
        name = obj.strip().strip("'\"").strip()    # a quoted annotation under `from __future__ import annotations`
        obj = getattr(T, name.removeprefix("tl.").removeprefix("triton.language."), None)
    if isinstance(obj, T.dtype) and not obj.is_ptr() and obj.name != "void":
        return obj
    return None


def _strip_decorators(node: ast.FunctionDef) -> None:
    node.decorator_list = []


def _exec_source_lines(fn, max_frames: int = 12):
    """The source lines of a function made by exec() of a string that a caller still holds (as
    Triton's own tests make variants of a kernel: the template's source edited, then exec'd).
    Python keeps no source for exec'd code, so the callers' string locals are tried, and one is
    taken only if it compiles to exactly this function's bytecode."""
    code = getattr(fn, "__code__", None)
    if code is None or not code.co_filename.startswith("<"):
        return None
    frame = inspect.currentframe()
    try:
        for _ in range(max_frames):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            for value in list(frame.f_locals.values()):
                if (isinstance(value, str) and len(value) < 200_000 and f"def {code.co_name}" in value
                        and _compiles_to(value, code)):
                    lines = value.splitlines(True)
                    return inspect.getblock(lines[code.co_firstlineno - 1:]), code.co_firstlineno
    finally:
        del frame
    return None


def _compiles_to(text: str, code) -> bool:
    try:
        module = compile(text, code.co_filename, "exec")
    except (SyntaxError, ValueError):
        return False
    todo = [module]
    while todo:
        c = todo.pop()
        if (c.co_name == code.co_name and c.co_firstlineno == code.co_firstlineno and c.co_code == code.co_code
                and c.co_names == code.co_names and c.co_varnames == code.co_varnames
                and _plain_consts(c) == _plain_consts(code)):
            return True
        todo.extend(k for k in c.co_consts if inspect.iscode(k))
    return False


def _plain_consts(code) -> list:
    return [k for k in code.co_consts if not inspect.iscode(k)]


def _parse_python_function(fn):
    """(src, fn_ast, filename, first_lineno, col_offset_shift) for a Python function."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        found = _exec_source_lines(fn)
        if found is not None:
            lines, start = found
        else:
            raise TypeError(f"cannot read the source of {getattr(fn, '__qualname__', fn)!r} ({e}); @jit needs "
                            "functions defined in a file (use compiler.jit_from_source for source text)") from None
    filename = inspect.getsourcefile(fn) or getattr(fn.__code__, "co_filename", "<unknown>")
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    # what dedent removed: compare the first non-blank line
    shift = 0
    for a, b in zip(text.splitlines(), dedented.splitlines()):
        if a.strip():
            shift = len(a) - len(b)
            break
    try:
        mod = ast.parse(dedented)
    except SyntaxError as e:
        raise CompilationError(f"cannot parse the kernel source: {e.msg}", None, e.text) from None
    node = next((n for n in mod.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or isinstance(node, ast.AsyncFunctionDef):
        raise TypeError(f"@jit needs a plain `def` function, got {fn!r}")
    src_lines = dedented.splitlines()[node.lineno - 1:node.end_lineno]
    src = "\n".join(src_lines) + "\n"
    first_lineno = start + node.lineno - 1
    fn_ast = ast.parse(src).body[0]
    ast.increment_lineno(fn_ast, first_lineno - 1)
    return src, fn_ast, filename, first_lineno, shift


def normalized_source(fn_ast: ast.AST) -> str:
    """ast.dump without positions and without decorators: equal for equal code anywhere."""
    node = fn_ast
    if isinstance(node, ast.FunctionDef) and node.decorator_list:
        node = ast.FunctionDef(**{**{f: getattr(node, f) for f in node._fields}, "decorator_list": []})
    return ast.dump(node, annotate_fields=True, include_attributes=False)


def _referenced_names(fn_ast: ast.AST) -> list[tuple[str, ...]]:
    """Name chains read by the function (not its locals): `foo` → ("foo",), `mod.helper` →
    ("mod", "helper")."""
    out = set()
    stored = {n.id for n in ast.walk(fn_ast) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for node in ast.walk(fn_ast):
        if isinstance(node, ast.Attribute):
            chain = []
            cur = node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                chain.append(cur.id)
                out.add(tuple(reversed(chain)))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add((node.id,))
    return sorted(c for c in out if c[0] not in stored)


def _unwrap_jit(obj):
    for _ in range(8):
        if isinstance(obj, (JITFunction, LibraryFunction)):
            return obj
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj or not hasattr(obj, "configs") and not hasattr(obj, "values"):
            return None
        obj = nxt
    return None


_LITERAL_TYPES = (bool, int, float, str, type(None))


# ---------------------------------------------------------------------------------------------

class KernelParam:
    """Triton-compatible description of one parameter (`kernel.params`)."""

    __slots__ = ("num", "name", "is_constexpr", "do_not_specialize", "default")

    def __init__(self, num, name, is_constexpr, do_not_specialize, default):
        self.num, self.name, self.is_constexpr = num, name, is_constexpr
        self.do_not_specialize, self.default = do_not_specialize, default

    def __repr__(self):
        return f"KernelParam({self.num}, {self.name!r}{', constexpr' if self.is_constexpr else ''})"


_MISSING = object()
# what @jit(repr=fn) gets (Triton's name and fields)
_SpecializationProxy = namedtuple("SpecializationProxy", ["constants", "signature"])


class _MockTensor:
    """What `warmup` compiles for when given a torch dtype instead of a tensor (Triton's): a
    16-byte-aligned tensor of that dtype that is never launched on."""

    def __init__(self, dtype):
        self.dtype = dtype

    @staticmethod
    def wrap_dtype(arg):
        torch = sys.modules.get("torch")
        return _MockTensor(arg) if torch is not None and isinstance(arg, torch.dtype) else arg

    @staticmethod
    def data_ptr():
        return 0


class JITFunction:
    """A kernel: Python source + everything needed to specialize, compile and launch it."""

    def __init__(self, fn, *, do_not_specialize: Iterable = (), noinline: bool = False, debug=None,
                 autotune_key: Iterable[str] | None = None, do_not_specialize_on_alignment: Iterable = (),
                 repr=None, launch_metadata=None):
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise TypeError(f"@jit decorates a function, got {type(fn).__name__}")
        src, fn_ast, filename, first_lineno, shift = _parse_python_function(fn)
        nonlocals = {}
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    nonlocals[name] = cell.cell_contents
                except ValueError:  # empty cell (defined later)
                    pass
        glob = ChainMap(nonlocals, fn.__globals__) if nonlocals else fn.__globals__
        defaults = {}
        if fn.__defaults__:
            pos = [a.arg for a in fn_ast.args.posonlyargs + fn_ast.args.args]
            for name, v in zip(pos[len(pos) - len(fn.__defaults__):], fn.__defaults__):
                defaults[name] = v
        self._setup(fn, fn.__name__, src, fn_ast, filename, first_lineno, shift, glob, defaults,
                    getattr(fn, "__annotations__", {}), do_not_specialize, noinline, debug, autotune_key,
                    do_not_specialize_on_alignment)
        self.launch_metadata = launch_metadata
        self._repr = repr
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__qualname__ = fn.__qualname__

    @classmethod
    def from_ast(cls, name: str, src: str, fn_ast: ast.FunctionDef, filename: str, first_lineno: int,
                 globals: Mapping, defaults: dict, **options) -> "JITFunction":
        """A JITFunction without a Python function (parsed source, never executed)."""
        self = cls.__new__(cls)
        self._setup(None, name, src, fn_ast, filename, first_lineno, 0, globals, defaults, {},
                    options.get("do_not_specialize", ()), options.get("noinline", False),
                    options.get("debug"), options.get("autotune_key"),
                    options.get("do_not_specialize_on_alignment", ()))
        self.launch_metadata = options.get("launch_metadata")
        self._repr = options.get("repr")
        self.__doc__ = ast.get_docstring(fn_ast)
        self.__module__ = "<submitted>"
        self.__qualname__ = name
        return self

    def _setup(self, fn, name, src, fn_ast, filename, first_lineno, shift, glob, defaults, annotations,
               do_not_specialize, noinline, debug, autotune_key, dns_align):
        _strip_decorators(fn_ast)
        a = fn_ast.args
        if a.vararg or a.kwarg or a.kwonlyargs:
            raise CompilationError(f"@jit function {name}() cannot take *args, **kwargs or keyword-only "
                                   "parameters", _loc(filename, fn_ast, shift, name), _line(src, 0))
        self.fn = fn
        self.__name__ = name
        self.src = src
        self.fn_ast = fn_ast
        self.filename = filename
        self.first_lineno = first_lineno
        self.col_offset_shift = shift
        self.globals = glob
        params = a.posonlyargs + a.args
        self.arg_names = [p.arg for p in params]
        self.constexpr_names = [p.arg for p in params
                                if _is_constexpr_annotation(p.annotation, annotations.get(p.arg))]
        # `ptr: tl.const`: a pointer to read-only data (signature "*k...", as Triton's)
        self.const_names = [p.arg for p in params if _is_const_annotation(annotations.get(p.arg))]
        # `val: tl.float16`: the scalar argument has that type (Triton's annotations)
        self.scalar_annotations = {p.arg: t for p in params
                                   if (t := _scalar_annotation(annotations.get(p.arg))) is not None}
        dns = []
        for d in do_not_specialize or ():
            n = self.arg_names[d] if isinstance(d, int) else d
            if n not in self.arg_names:
                raise ValueError(f"do_not_specialize: {name}() has no parameter {d!r}")
            dns.append(n)
        self.do_not_specialize = dns
        self.do_not_specialize_on_alignment = [self.arg_names[d] if isinstance(d, int) else d for d in dns_align or ()]
        self.defaults = dict(defaults)
        self.noinline = bool(noinline)
        self.debug = debug
        self.autotune_key = list(autotune_key) if autotune_key else None
        self.params = [KernelParam(i, n, n in self.constexpr_names, n in dns, self.defaults.get(n, _MISSING))
                       for i, n in enumerate(self.arg_names)]
        self._fingerprint = None
        self._runner = None
        self._last_bound = None          # (grid, runner bound to it): see __getitem__
        self._binder = None              # the runner's fast path in C (launch.c), made with the runner
        self._bindable = False
        self._launchers: dict = {}     # specialization key → (launch fn, CompiledKernel)
        self.device_caches = jit_hooks.DeviceCaches(self)   # Triton's: device → (kernels, ...)
        self._ir_cache: dict = {}      # interpret mode: key → ir.Function
        self._lock = threading.RLock()
        self.compile_count = 0         # specializations compiled (or fetched from a cache) by this object

    def _unsafe_update_src(self, new_src: str) -> None:
        """Replace the kernel's source text (Triton's name: its tests make variants of a template
        kernel this way). The new text is parsed like the original; every cache of this object is
        dropped, and the fingerprint follows the new source."""
        try:
            node = next(n for n in ast.parse(textwrap.dedent(new_src)).body if isinstance(n, ast.FunctionDef))
        except (SyntaxError, StopIteration) as e:
            raise CompilationError(f"_unsafe_update_src: the new source of {self.__name__}() is not a function "
                                   f"definition ({e})", None, None) from None
        ast.increment_lineno(node, self.first_lineno - node.lineno)
        annotations = getattr(self.fn, "__annotations__", {}) if self.fn is not None else {}
        self._setup(self.fn, self.__name__, textwrap.dedent(new_src), node, self.filename, self.first_lineno, 0,
                    self.globals, self.defaults, annotations, self.do_not_specialize, self.noinline, self.debug,
                    self.autotune_key, self.do_not_specialize_on_alignment)

    # -- identity -------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = compute_fingerprint(self)
        return self._fingerprint

    cache_key = fingerprint

    def __repr__(self) -> str:
        return f"JITFunction({self.__module__}:{self.__name__})"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"{self.__name__} is a @jit kernel: it cannot be called as a Python function. Launch it with "
            f"{self.__name__}[grid](...) (or call it from inside another @jit function)")

    def definition_loc(self) -> Loc:
        """Where the kernel's `def` is (for errors about the kernel as a whole)."""
        return _loc(self.filename, self.fn_ast, self.col_offset_shift, self.__name__)

    def kernel_name(self, signature: dict, constexprs: dict, equal_to_1=()) -> str:
        """The compiled kernel's name: the function's, or what `@jit(repr=fn)` says for this
        specialization (`fn` gets Triton's proxy: `.signature`, every parameter's type with
        "constexpr" for the constants, and `.constants`, name → value, integers specialized to 1
        included)."""
        if getattr(self, "_repr", None) is None:
            return self.__name__
        constants = {k: v for k, v in constexprs.items() if k in self.arg_names}
        constants.update((k, 1) for k in equal_to_1)
        proxy = _SpecializationProxy(constants, {n: "constexpr" if n in constants else signature.get(n, "constexpr")
                                                 for n in self.arg_names})
        name = self._repr(proxy)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
            raise ValueError(f"@jit(repr=...) of {self.__name__} gave {name!r}: a kernel name must be an identifier")
        return name

    def source_line(self, lineno: int) -> str | None:
        """The text of file line `lineno` (with its original indentation), if it is in the kernel."""
        lines = self.src.splitlines()
        idx = lineno - self.first_lineno
        if 0 <= idx < len(lines):
            return " " * self.col_offset_shift + lines[idx]
        return None

    # -- launching ------------------------------------------------------------------------------
    def __getitem__(self, grid):
        if launch_hooks.active():
            return functools.partial(self._run_hooked, grid)
        last = self._last_bound
        if last is not None and last[0] is grid:   # `kernel[grid](...)` in a loop: same grid object
            return last[1]
        runner = self._runner or self._build_runner()
        if self.autotune_key:
            bound = functools.partial(self._run_with_listeners, grid)
        elif self._binder is not None and self._bindable:
            bound = self._binder.bind(grid, runner)     # argument binding + fast path in C
        else:
            bound = functools.partial(runner, grid)
        self._last_bound = (grid, bound)
        return bound

    def run(self, *args, grid, warmup: bool = False, **kwargs):
        """Triton's `fn.run(*args, grid=..., warmup=..., **kwargs)`."""
        if not warmup and launch_hooks.active():
            return self._run_hooked(grid, *args, **kwargs)
        runner = self._runner or self._build_runner()
        return runner(grid, *args, warmup=warmup, **kwargs)

    def warmup(self, *args, grid=(1,), **kwargs):
        """Compile for these arguments without launching; returns the CompiledKernel (or, in
        interpret mode, the ir.Function). As in Triton, a torch dtype stands for a tensor of it."""
        args = tuple(_MockTensor.wrap_dtype(a) for a in args)
        kwargs = {k: _MockTensor.wrap_dtype(v) for k, v in kwargs.items()}
        runner = self._runner or self._build_runner()
        return runner(grid, *args, warmup=True, **kwargs)

    def _build_runner(self):
        with self._lock:
            if self._runner is None:
                self._runner = _generate_runner(self)
        return self._runner

    # The slow path: classify arguments properly, compile, load, make the launcher.
    def _miss(self, key, values: tuple, num_warps, num_stages, dev, warmup, options=(), arch=None):
        if interpret_mode():
            raise RuntimeError("internal: GPU launch path used in interpret mode")
        _refresh_torch()
        sig, constexprs, div16, eq1, call_names = self.specialize(values, interpret=False)
        if dev is None or dev < 0:
            if not warmup:
                raise driver.NoGPUError(f"cannot launch {self.__name__}: no CUDA GPU (set BLOCKTUNE_INTERPRET=1 "
                                        "to run kernels on the CPU)")
            target = "sm_90"
        else:
            target = driver.target_for_device(dev)
        arch = arch or knobs.runtime.override_arch     # Triton's arch= and TRITON_OVERRIDE_ARCH
        if arch:
            target = _target_of_arch(arch)
        ck = self._compile_cached(key, sig, constexprs, div16, eq1, num_warps, num_stages, dev, target, options, warmup)
        self.compile_count += 1
        if warmup or ck is None:   # None: the jit_cache_hook asked not to compile (nor launch)
            return (None, ck)
        has_descriptors = any(descriptors.DT.parse(t) for t in sig.values())
        expanded = descriptors.expand_names(call_names, sig, ck.metadata["passed"]) if has_descriptors else call_names
        scratch = ck.metadata.get("global_scratch_size")
        maps = pointer_maps.names(ck.metadata)   # built at each launch from the arguments (after them)
        launch = ck.make_launcher(dev, expanded + maps + ([descriptors.DT.GLOBAL_SCRATCH] if scratch else []))
        if scratch:
            launch = descriptors.with_global_scratch(launch, scratch * ck.metadata.get("num_ctas", 1))
        if maps:
            launch = pointer_maps.wrap_launcher(launch, expanded, ck.metadata["pointer_maps"])
        if has_descriptors:
            launch = descriptors.wrap_launcher(launch, call_names, expanded)
        entry = (launch, ck)
        if key is not None:
            self._launchers[key] = entry
        return entry

    def _compile_cached(self, key, sig, constexprs, div16, eq1, num_warps, num_stages, dev, target, options, warmup):
        """The device's kernel for this specialization (device_caches), compiled on a miss between
        Triton's jit_cache_hook and jit_post_compile_hook."""
        kernels = self.device_caches[dev][0]
        spec = (tuple(sig.items()), tuple((k, cache.canon(v)) for k, v in constexprs.items()), tuple(div16),
                tuple(eq1), num_warps, num_stages, target, options)
        ck = kernels.get(spec)
        if ck is not None:
            return ck
        cache_hook, post_hook = jit_hooks.hooks()
        data = None
        if cache_hook is not None or post_hook is not None:
            data = jit_hooks.serialize(self, sig, constexprs, div16, eq1, num_warps, num_stages, target, options, key)
        hook_args = (self, key, sig, dev, constexprs, data, num_warps, num_stages, options, warmup)
        if jit_hooks.call_hook(cache_hook, *hook_args):
            return None
        ck = build.compile_jit(self, sig, constexprs, num_warps=num_warps, num_stages=num_stages, target=target,
                               divisible_by_16=div16, equal_to_1=eq1, options=options)
        kernels[spec] = ck
        jit_hooks.call_hook(post_hook, *hook_args)
        return ck

    def preload(self, specialization_data: str):
        """Compile the specialization a jit hook was given (`compile["specialization_data"]`), for
        the current device, without arguments; returns the CompiledKernel (Triton's preload)."""
        spec = jit_hooks.deserialize(self, specialization_data)
        _refresh_torch()
        dev = _NS["_get_device"]() if not interpret_mode() else -1
        return self._compile_cached(spec["key"], spec["signature"], spec["constexprs"], spec["divisible_by_16"],
                                    spec["equal_to_1"], spec["num_warps"], spec["num_stages"], dev,
                                    spec["target"], spec["options"], True)

    def specialize(self, values: tuple, interpret: bool):
        """values: one per parameter (kernel order) → (signature, constexprs, div16, eq1, runtime names)."""
        sig, constexprs, div16, eq1, call_names = {}, {}, [], [], []
        for name, v in zip(self.arg_names, values):
            if name in self.constexpr_names:
                constexprs[name] = v.value if isinstance(v, constexpr) else v
                continue
            if isinstance(v, tuple):     # its leaves are the parameters (frontend/tuple_args.py)
                from ..frontend import tuple_args  # noqa: PLC0415 - import time: loads with the front end
                constexprs[name], args = tuple_args.flatten(name, v)
            else:
                args = ((name, v),)
            for arg, av in args:
                call_names.append(arg)
                k, aligned, _ = spec_arg(av, 0, arg, name not in self.do_not_specialize, interpret)
                if k is None or isinstance(av, JITFunction):
                    constexprs[arg] = av
                    continue
                ann = self.scalar_annotations.get(arg)
                if ann is not None and isinstance(k, str | int) and not isinstance(k, bool):
                    sig[arg] = ann.sig_name        # an annotated scalar: that type, never specialized to 1
                    continue
                sig[arg] = key_to_type(k)
                if arg in self.const_names and sig[arg].startswith("*") and not sig[arg].startswith("*k"):
                    sig[arg] = "*k" + sig[arg][1:]
                if k == 1 and type(k) is int:
                    eq1.append(arg)
                elif aligned and name not in self.do_not_specialize_on_alignment:
                    div16.append(arg)
        return sig, constexprs, tuple(div16), tuple(eq1), call_names

    def _with_tuple_leaves(self, values: tuple) -> dict:
        """name → value of every parameter, and of the leaves of tuple arguments."""
        named = dict(zip(self.arg_names, values))
        for name, v in list(named.items()):
            if isinstance(v, tuple) and name not in self.constexpr_names:
                from ..frontend import tuple_args  # noqa: PLC0415 - import time: loads with the front end
                named.update(tuple_args.flatten(name, v)[1])
        return named

    def _run_in_python(self, grid, values: tuple, num_warps, num_stages, stream, warmup, options=(), arch=None):
        """The GPU launch of a call with tuple arguments or compile options (build.compile_options),
        all in Python: tuple leaves are kernel parameters and options are part of the compile, so
        neither the C binder nor the runner's key covers them."""
        _refresh_torch()
        dev = _NS["_get_device"]()
        if stream is None:
            stream = _NS["_get_stream"](dev)
        sig, constexprs, div16, eq1, call_names = self.specialize(values, interpret=False)
        key = ("in python", tuple(sig.items()), tuple((k, cache.canon(v)) for k, v in constexprs.items()),
               div16, eq1, num_warps, num_stages, dev, options, arch)
        entry = self._launchers.get(key)
        if entry is None or warmup:
            entry = self._miss(key, values, num_warps, num_stages, dev, warmup, options, arch)
            if warmup or entry[0] is None:
                return entry[1]
        if callable(grid):
            grid = grid(dict(zip(self.arg_names, values), num_warps=num_warps, num_stages=num_stages))
        g = _grid3(grid)
        if min(g) > 0:
            named = self._with_tuple_leaves(values)
            entry[0](*g, stream, *(spec_arg(named[n], 0, n, True, False)[2] for n in call_names))
        return entry[1]

    def _run_interpreted(self, grid, values: tuple, num_warps, num_stages, warmup=False):
        sig, constexprs, div16, eq1, _ = self.specialize(values, interpret=True)
        key = (tuple(sig.items()), tuple((k, cache.canon(v)) for k, v in constexprs.items()), div16, eq1, num_warps)
        ir_fn = self._ir_cache.get(key)
        if ir_fn is None:
            ir_fn = _build_interpreted(self, sig, constexprs, div16, eq1, num_warps)
            self._ir_cache[key] = ir_fn
            self.compile_count += 1
        if warmup:
            return ir_fn
        if callable(grid):
            meta = dict(zip(self.arg_names, values))
            meta.update(num_warps=num_warps, num_stages=num_stages)
            grid = grid(meta)
        g = _grid3(grid)
        if min(g) <= 0:
            return ir_fn
        named = self._with_tuple_leaves(values)
        args = descriptors.expand(ir_fn.arg_names, named, lambda tensor: tensor)
        args = [a.base if type(a) is TensorWrapper else a for a in args]
        from .. import interpreter  # noqa: PLC0415 - import time: the interpreter loads at the first CPU launch
        interpreter.run(ir_fn, g, args)
        return ir_fn

    def _run_hooked(self, grid, *args, **kwargs):
        """A launch with Triton's launch hooks around it (launch_hooks.py): the grid is resolved
        here, once, and handed to the runner as a tuple."""
        runner = self._runner or self._build_runner()
        if kwargs.get("warmup"):
            return runner(grid, *args, **kwargs)
        num_warps, num_stages = kwargs.get("num_warps", 4), kwargs.get("num_stages", 3)
        named = launch_hooks.bind_arguments(self.arg_names, self.defaults, args, kwargs)
        grid = launch_hooks.resolve_grid(grid, named, num_warps, num_stages)
        stream = kwargs.get("stream")
        if stream is None and not interpret_mode():
            _refresh_torch()
            stream = _NS["_get_stream"](_NS["_get_device"]())
        if self.autotune_key:
            do_launch = functools.partial(self._run_with_listeners, grid, *args, **kwargs)
        else:
            do_launch = functools.partial(runner, grid, *args, **kwargs)
        return launch_hooks.launch(self.__name__, self.launch_metadata, grid, stream, named, num_warps, num_stages,
                                   do_launch)

    # -- @jit(autotune_key=[...]): the meta-parameters a before_tuning listener gives this key ------
    def _run_with_listeners(self, grid, *args, **kwargs):
        runner = self._runner or self._build_runner()
        hooks = plugins.autotuning()
        key_args = self._bind_for_key(args, kwargs) if hooks.before_tuning else None
        if key_args is not None:
            cfg = hooks.before_tuning.first(fn=self, key=tuple(key_args.values()), key_args=key_args, configs=None,
                                            autotuner=None)
            if cfg is not None:
                for k, v in cfg.kwargs.items():
                    if k in self.arg_names and k not in kwargs and self.arg_names.index(k) >= len(args):
                        kwargs[k] = v
                kwargs.setdefault("num_warps", cfg.num_warps)
                kwargs.setdefault("num_stages", cfg.num_stages)
        return runner(grid, *args, **kwargs)

    def _bind_for_key(self, args, kwargs):
        named = dict(zip(self.arg_names, args))
        named.update({k: v for k, v in kwargs.items() if k in self.arg_names})
        out = {}
        for k in self.autotune_key or ():
            if k not in named:
                return None
            out[k] = key_value(named[k])
        return out


def key_value(v):
    """A JSON-friendly value of an autotune key argument (tensors → their dtype name)."""
    if isinstance(v, constexpr):
        v = v.value
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    dt = getattr(v, "dtype", None)
    if dt is not None:
        return str(dt).replace("torch.", "")
    if hasattr(v, "__index__"):
        return v.__index__()
    return str(v)


def _build_interpreted(jf, sig, constexprs, div16, eq1, num_warps):
    """The kernel's IR for interpret mode; a compile error is raised as one that is also Triton's
    InterpreterError (what Triton's interpreter raises for it), with the same message and cause."""
    try:
        return build.build_ir(jf, sig, constexprs, div16, eq1, num_warps=num_warps)
    except CompilationError as e:
        if type(e) is not CompilationError:  # a CompileTimeAssertionFailure & co. stays what it is
            raise
        from ..interpreter.values import InterpretedCompilationError  # noqa: PLC0415 - see _run_interpreted
        raise e.recast(InterpretedCompilationError).with_traceback(e.__traceback__) from e.__cause__


def _grid3(grid) -> tuple:
    if isinstance(grid, int):
        grid = (grid,)
    g = tuple(int(x) for x in grid)
    if not 1 <= len(g) <= 3:
        raise ValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
    return g + (1,) * (3 - len(g))


def _loc(filename, node, shift, name):
    return Loc(filename, getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + shift, name)


def _line(src, idx):
    lines = (src or "").splitlines()
    return lines[idx] if 0 <= idx < len(lines) else None


# ---------------------------------------------------------------------------------------------
# Fingerprint

def _is_compile_time_code(obj) -> bool:
    """An aggregate class or a constexpr_function (not a @jit function, not compiler.cdiv & co)."""
    if isinstance(obj, type):
        return getattr(obj, "__blocktune_aggregate__", False) is True
    module = getattr(obj, "__module__", "") or ""
    return getattr(obj, "__blocktune_host_helper__", False) is True and not (
        module == "compiler" or module.startswith("compiler."))


def _source_text(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return getattr(obj, "__qualname__", repr(obj))


def compute_fingerprint(root: JITFunction) -> str:
    """sha256 over the normalized source of `root` and of the @jit functions it reaches through
    its globals, the literal global constants it reads, and the compiler version."""
    canon = cache.canon
    h = hashlib.sha256()
    h.update(f"blocktune {__version__}\n".encode())
    seen: dict[int, int] = {}
    order: list[JITFunction] = []

    def visit(jf: JITFunction):
        if id(jf) in seen:
            return
        seen[id(jf)] = len(order)
        order.append(jf)
        body = normalized_source(jf.fn_ast)
        deps = []
        for chain in _referenced_names(jf.fn_ast):
            if chain[0] in jf.arg_names:
                continue
            try:
                obj = jf.globals[chain[0]]
            except KeyError:
                continue
            resolved = chain[:1]
            for attr in chain[1:]:
                j = _unwrap_jit(obj)
                if j is not None or isinstance(obj, (*_LITERAL_TYPES, constexpr)):
                    break
                if attr.startswith("_") or not hasattr(obj, attr) or not _is_namespace(obj):
                    break
                obj = getattr(obj, attr)
                resolved = resolved + (attr,)
            j = _unwrap_jit(obj)
            if j is not None:
                deps.append((".".join(resolved), j))
            elif _is_compile_time_code(obj):
                # an aggregate class or a constexpr_function runs at compile time: its source
                # (and an aggregate's @jit methods) is part of what the kernel compiles to
                h.update(f"code {jf.__name__}.{'.'.join(resolved)}\n{_source_text(obj)}\n".encode())
                if isinstance(obj, type):
                    deps += [(f"{'.'.join(resolved)}.{k}", m) for k, v in sorted(vars(obj).items())
                             if (m := _unwrap_jit(v.__func__ if isinstance(v, staticmethod) else v)) is not None]
            elif isinstance(obj, constexpr) and isinstance(obj.value, _LITERAL_TYPES):
                h.update(f"const {jf.__name__}.{'.'.join(resolved)}={canon(obj.value)}\n".encode())
            elif isinstance(obj, _LITERAL_TYPES) and len(resolved) == 1 and not callable(obj):
                h.update(f"const {jf.__name__}.{resolved[0]}={canon(obj)}\n".encode())
        h.update(f"def {jf.__name__}\n{body}\n".encode())
        for ref, dep in deps:
            h.update(f"call {jf.__name__} -> {ref}\n".encode())
            if id(dep) in seen:
                h.update(f"seen {seen[id(dep)]}\n".encode())
            else:
                visit(dep)

    visit(root)
    return h.hexdigest()


def _is_namespace(obj) -> bool:
    return isinstance(obj, types.ModuleType) or isinstance(obj, type) or hasattr(obj, "__blocktune_namespace__")


# ---------------------------------------------------------------------------------------------
# The generated runner

_RESERVED = frozenset({"num_warps", "num_stages", "stream", "warmup"} |
                      {o.split("=")[0] for o in _TRITON_LAUNCH_OPTIONS})
_INTERNAL = re.compile(r"_(type|int|isinstance|tuple|callable|len|grid_|opts|t|[pka]\d+|dev|key|e|n|r|bind|g\d|self|launchers|dflt|make|Tensor|get_device|"
                       r"get_stream|interpret_var_set|interpret_mode|int_kind|spec_arg|cpu_tensor|check_num_ctas|"
                       r"interpreted_override|compile_options)")


def _generate_runner(jf: JITFunction):
    """Build `run(grid, <kernel params>, *, num_warps=4, num_stages=3, stream=None, warmup=False, **opts)`."""
    names = jf.arg_names
    # Triton lets a kernel take `num_warps`/`num_stages` as parameters (tutorial 02 does): the
    # argument is then both the parameter and the launch option.
    shared_opts = {"num_warps", "num_stages"} & set(names)
    for n in names:
        if n in shared_opts:
            continue
        if n in _RESERVED or _INTERNAL.fullmatch(n):
            raise CompilationError(f"parameter name '{n}' of {jf.__name__}() is reserved by the launcher "
                                   "(num_warps, num_stages, stream, warmup and a few _names): rename it",
                                   jf.definition_loc(),
                                   jf.source_line(jf.first_lineno))
    ctx_names = set(jf.constexpr_names)
    pieces = []
    for i, n in enumerate(names):
        if n in jf.defaults:
            pieces.append(f"{n}=_dflt[{i}]")
        else:
            if any(m in jf.defaults for m in names[:i]):
                raise TypeError(f"{jf.__name__}(): parameter {n} without a default follows one with a default")
            pieces.append(n)
    params_src = ", ".join(pieces)
    L = []
    opts_src = "".join(f"{o}={d}, " for o, d in (("num_warps", 4), ("num_stages", 3)) if o not in shared_opts)
    # named after the kernel, so that Python's own errors read "add_kernel() missing 1 required
    # positional argument: 'BLOCK_SIZE'"
    fname = jf.__name__ if jf.__name__.isidentifier() and not jf.__name__.startswith("_") else "run"
    L.append(f"def {fname}(_grid_, {params_src}{', ' if params_src else ''}*, {opts_src}stream=None, "
             f"warmup=False, {', '.join(_TRITON_LAUNCH_OPTIONS)}):")
    all_vals = ", ".join(names)
    tuple_src = f"({all_vals},)" if names else "()"
    L.append("    if num_ctas != 1: _check_num_ctas(num_ctas, arch)")
    L.append("    if _interpret_var_set() and _interpret_mode():")
    L.append("        if ir_override is not None: _interpreted_override(ir_override)")
    L.append(f"        return _self._run_interpreted(_grid_, {tuple_src}, num_warps, num_stages, warmup)")
    L.append("    if enable_fp_fusion is not None or maxnreg is not None or arch is not None or enable_reflect_ftz is not None "
             "or ir_override is not None or num_ctas != 1:")
    L.append(f"        return _self._run_in_python(_grid_, {tuple_src}, num_warps, num_stages, stream, warmup, "
             "_compile_options(enable_fp_fusion=enable_fp_fusion, maxnreg=maxnreg, "
             "enable_reflect_ftz=enable_reflect_ftz, ir_override=ir_override, num_ctas=num_ctas), arch)")
    # the common case in C (launch.c's Binder); NotImplemented: the Python body below
    L.append("    if _bind is not None and not warmup:")
    L.append(f"        _r = _bind(_grid_, num_warps, num_stages, stream{', ' if names else ''}{all_vals})")
    L.append("        if _r is not NotImplemented: return _r")
    runtime = [n for n in names if n not in ctx_names]
    key_parts = []
    for i, n in enumerate(names):
        if n in ctx_names:
            continue
        spec = n not in jf.do_not_specialize
        j = names.index(n)
        L.append(f"    _t = _type({n})")
        L.append("    if _t is _Tensor:")
        L.append(f"        _p{j} = {n}.data_ptr()")
        L.append(f"        if not {n}.is_cuda: _cpu_tensor({n}, {n!r})")
        L.append(f"        _k{j} = {n}.dtype")
        L.append(f"        _a{j} = not (_p{j} & 15)")
        L.append("    elif _t is _int:")
        L.append(f"        _p{j} = {n}")
        L.append(f"        if -2147483648 <= {n} <= 2147483647:")
        if spec:
            L.append(f"            _k{j} = 1 if {n} == 1 else 'i32'")
        else:
            L.append(f"            _k{j} = 'i32'")
        L.append(f"        else: _k{j} = _int_kind({n}, {spec})[0]")
        L.append(f"        _a{j} = {'not (' + n + ' & 15)' if spec else 'False'}")
        L.append(f"    elif _isinstance({n}, _tuple):")
        L.append(f"        return _self._run_in_python(_grid_, {tuple_src}, num_warps, num_stages, stream, warmup)")
        L.append("    else:")
        L.append(f"        _k{j}, _a{j}, _p{j} = _spec_arg({n}, {j}, {n!r}, {spec})")
        key_parts += [f"_k{j}", f"_a{j}"]
    key_parts += [n for n in names if n in ctx_names]
    L.append("    if stream is None:")
    L.append("        _dev = _get_device()")
    L.append("        stream = _get_stream(_dev)")
    L.append("    else:")
    L.append("        _dev = _get_device()")
    key_src = ", ".join(key_parts + ["num_warps", "num_stages", "_dev"])
    L.append(f"    _key = ({key_src},)")
    L.append("    try:")
    L.append("        _e = _launchers.get(_key)")
    L.append("    except TypeError:  # an unhashable constexpr value: no fast path")
    L.append("        _key = None")
    L.append("        _e = None")
    L.append("    if _e is None or warmup:")
    L.append(f"        _e = _self._miss(_key, {tuple_src}, num_warps, num_stages, _dev, warmup)")
    L.append("        if warmup or _e[0] is None: return _e[1]")
    meta_items = ", ".join(f"{n!r}: {n}" for n in names)
    L.append("    if _grid_.__class__ is not _tuple:")
    L.append("        if _callable(_grid_):")
    L.append(f"            _grid_ = _grid_({{{meta_items}{', ' if names else ''}'num_warps': num_warps, "
             "'num_stages': num_stages})")
    L.append("        if _grid_.__class__ is _int: _grid_ = (_grid_,)")
    L.append("    _n = _len(_grid_)")
    L.append("    _g0 = _grid_[0]")
    L.append("    _g1 = _grid_[1] if _n > 1 else 1")
    L.append("    _g2 = _grid_[2] if _n > 2 else 1")
    L.append("    if _g0 > 0 and _g1 > 0 and _g2 > 0:")
    launch_args = ", ".join(f"_p{names.index(n)}" for n in runtime)
    L.append(f"        _e[0](_g0, _g1, _g2, stream{', ' if launch_args else ''}{launch_args})")
    L.append("    return _e[1]")
    code = "\n".join(L) + "\n"
    ns = _NS  # shared globals: torch refreshes reach every runner
    factory_src = "def _make(_self, _launchers, _dflt, _bind):\n" + textwrap.indent(code, "    ") + f"    return {fname}\n"
    # Parameter names are Python identifiers from the kernel's own `def` (parsed by ast), so the
    # generated text cannot be steered by them; default values are passed as objects, not text.
    glb = ns
    # the builtins the runner calls, under names a kernel parameter cannot take (Triton's own tests
    # name parameters `type`)
    glb.update(_type=type, _int=int, _isinstance=isinstance, _tuple=tuple, _callable=callable, _len=len)
    glb.setdefault("_interpret_var_set", _interpret_var_check())
    glb.setdefault("_interpret_mode", interpret_mode)
    glb.setdefault("_int_kind", _int_kind)
    glb.setdefault("_spec_arg", spec_arg)
    glb.setdefault("_cpu_tensor", _cpu_tensor)
    glb.setdefault("_check_num_ctas", _check_launch_num_ctas)
    glb.setdefault("_interpreted_override", _interpreted_override)
    glb.setdefault("_compile_options", build.compile_options)
    loc_ns: dict = {}
    exec(compile(factory_src, f"<blocktune runner {jf.__name__}>", "exec"), glb, loc_ns)  # noqa: S102
    dflt = [jf.defaults.get(n) for n in names]
    jf._binder = _make_binder(jf, ns)
    jf._bindable = jf._binder is not None and not ({"num_warps", "num_stages", "stream"} & set(jf.arg_names))
    run = loc_ns["_make"](jf, jf._launchers, dflt, jf._binder)
    run.__qualname__ = fname                    # Python's argument errors print the qualified name
    run.__blocktune_source__ = factory_src
    return run


def _make_binder(jf: JITFunction, ns: dict):
    """The runner's fast path in C (native.py / launch.c), or None without a C compiler."""
    mod = native.module()
    if mod is None or len(jf.arg_names) > mod.MAX_PARAMS:
        return None
    spec = "".join("c" if n in jf.constexpr_names else "n" if n in jf.do_not_specialize else "s"
                   for n in jf.arg_names)
    if {"num_warps", "num_stages", "stream"} & set(jf.arg_names):
        return mod.Binder(jf._launchers, ns, spec)   # a parameter that is also a launch option: no Bound
    names = tuple(sys.intern(n) for n in jf.arg_names)
    defaults = tuple(jf.defaults[n] if n in jf.defaults else _MISSING for n in jf.arg_names)
    return mod.Binder(jf._launchers, ns, spec, names, defaults, _MISSING)


def _check_launch_num_ctas(num_ctas, arch):
    """num_ctas for the launch's target: `arch` when given, else the current device's (none in
    interpret mode)."""
    target = None
    if not interpret_mode():
        target = _target_of_arch(arch) if arch is not None else driver.default_target()
    check_num_ctas(num_ctas, target, stacklevel=5)   # the launch's caller, past the runner


def _interpreted_override(path):
    raise ValueError(f"ir_override={path!r} replaces the compiled GPU code, which interpret mode does not run (it runs "
                     "the kernel's Python source): remove ir_override, or run on the GPU")


def _target_of_arch(arch) -> str:
    """Triton's arch option ("sm80", "sm_90a", 90) as blocktune's target name ("sm_80", "sm_90a")."""
    m = re.fullmatch(r"(?:sm_?)?(\d+)(a?)", str(arch).strip().lower())
    if m is None:
        raise ValueError(f"arch={arch!r}: blocktune compiles for NVIDIA GPUs, e.g. arch='sm90' or 'sm_80'")
    return f"sm_{m.group(1)}{m.group(2)}"


def _cpu_tensor(tensor, name):
    """A host tensor for a GPU launch: pinned memory is mapped into the GPU's address space (its
    data_ptr is valid there, as Triton lets kernels use it); pageable memory is an error."""
    is_pinned = getattr(tensor, "is_pinned", None)
    if is_pinned is not None and is_pinned():
        return
    raise ValueError(f"argument '{name}' is a CPU tensor: launch on the GPU needs CUDA tensors or pinned host memory "
                     "(or set BLOCKTUNE_INTERPRET=1 to run the kernel on the CPU)")


# ---------------------------------------------------------------------------------------------

def constexpr_function(fn):
    """Triton's `@triton.constexpr_function`: a Python function a kernel calls at compile time, on
    compile-time values (its result is one too); from Python it is the function itself."""
    fn.__blocktune_host_helper__ = True
    return fn


def jit(fn=None, *, do_not_specialize: Iterable = (), noinline: bool = False, debug=None,
        autotune_key: Iterable[str] | None = None, do_not_specialize_on_alignment: Iterable = (),
        repr=None, launch_metadata=None, **unused):
    """Decorator: `@jit` or `@jit(do_not_specialize=[...], noinline=..., autotune_key=[...])`."""
    def wrap(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, noinline=noinline, debug=debug,
                           autotune_key=autotune_key, do_not_specialize_on_alignment=do_not_specialize_on_alignment,
                           repr=repr, launch_metadata=launch_metadata)
    if fn is not None:
        return wrap(fn)
    return wrap


__all__ = ["jit", "constexpr_function", "JITFunction", "spec_arg", "key_to_type", "compute_fingerprint", "normalized_source", "interpret_mode"]
