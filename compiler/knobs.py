"""Every switch the compiler reads from the environment, in one settings object (as `triton.knobs`).

    from compiler import knobs
    knobs.codegen.wgmma              # "async" (default) | "sync" | "off"       BLOCKTUNE_WGMMA
    knobs.codegen.pipeline           # False with BLOCKTUNE_NO_PIPELINE=1
    knobs.runtime.interpret          # BLOCKTUNE_INTERPRET=1 or TRITON_INTERPRET=1
    knobs.codegen.wgmma = "off"      # sets BLOCKTUNE_WGMMA=0; `del knobs.codegen.wgmma` unsets it

A knob reads its variable each time it is read, so a change of `os.environ` (a test's
monkeypatch.setenv, a user's script) takes effect at the next compile or launch, and assigning a
knob writes the variable. Flags are on for 1/true/yes/on and off for anything else (0/false/no/off,
empty), whatever the case.

The codegen knobs change the generated code: `knobs.codegen.key()` spells all of them, and the
compile cache key (runtime/cache.py) includes it, so a knob declared there is part of the key by
construction. Nothing else here changes what a kernel compiles to.

Hooks, for code outside the compiler (the service plug-in in client/, a user's logging): the
autotuner calls `knobs.autotuning.before_tuning` (the first listener that answers with a config
wins, and the key is not tuned), `.launch_missed` (no listener answered) and `.config_chosen` (a
config was picked by benchmarking or from the disk cache). Plug-ins installed under the entry-point
group `blocktune.compiler_plugins` are imported and registered once, at the first of these events
(compiler/plugins.py).

This module imports nothing of ours: every layer of the compiler may read it.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

_TRUE = ("1", "true", "yes", "on")


def flag(text: str | None) -> bool:
    return (text or "").strip().lower() in _TRUE


def any_flag(texts: tuple) -> bool:
    return any(flag(t) for t in texts)


class _Knob:
    """A typed view of environment variables. `parse` gets the variable's text (None when unset), or
    a tuple of them when there are several; `text` spells a value for the environment. Assigning a
    knob sets its (first) variable and unsets the others, deleting it unsets them all: the
    environment stays the one place a setting lives, which the native launcher and child processes
    (the tuner's compile pool) read too. `key` is the first variable (Triton's name for it)."""

    def __init__(self, *names: str, parse: Callable[[Any], Any], doc: str,
                 text: Callable[[Any], str] = lambda v: "1" if v is True else "0" if v is False else str(v)):
        self.names, self.parse, self.text, self.__doc__ = names, parse, text, doc
        self.key = names[0]

    def __set_name__(self, owner, attr: str) -> None:
        self.attr = attr

    def raw(self):
        if len(self.names) == 1:
            return _getenv(self.names[0])
        return tuple(_getenv(n) for n in self.names)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return self.parse(self.raw())

    def __set__(self, obj, value) -> None:
        _setenv(self.names[0], None if value is None else self.text(value))
        for n in self.names[1:]:
            _setenv(n, None)

    def __delete__(self, obj) -> None:
        for n in self.names:
            _setenv(n, None)
            _local_env.pop(n, None)


# Triton's switch: with `knobs.propagate_env = False`, assigning a knob changes it for this process
# only (the value is kept here, over os.environ), so child processes (the tuner's compile pool) and
# the native launcher's interpret check do not see it.
propagate_env: bool = True
_local_env: dict[str, str | None] = {}


def _getenv(name: str) -> str | None:
    return _local_env[name] if name in _local_env else os.environ.get(name)


def _setenv(name: str, value: str | None) -> None:
    if not propagate_env:
        _local_env[name] = value
        return
    _local_env.pop(name, None)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class base_knobs:
    """A group of knobs, with Triton's `base_knobs` API: `knob_descriptors`, `knobs` (the values),
    `copy()`, `reset()`, `scope()`. The values live in the environment, not in the group, so a copy
    reads the same settings, and `reset()` has nothing of its own to forget but the values assigned
    while `propagate_env` was off."""

    @property
    def knob_descriptors(self) -> dict[str, _Knob]:
        found: dict[str, _Knob] = {}
        for cls in reversed(type(self).__mro__):
            found.update((name, k) for name, k in vars(cls).items() if isinstance(k, _Knob))
        return found

    @property
    def knobs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.knob_descriptors}

    def copy(self):
        other = type(self)()
        other.__dict__.update(self.__dict__)
        return other

    def reset(self):
        for k in self.knob_descriptors.values():
            for n in k.names:
                _local_env.pop(n, None)
        return self

    def _names(self) -> list[str]:
        return [n for k in self.knob_descriptors.values() for n in k.names]

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Everything assigned to this group inside the block (its variables, its hooks) is undone
        at the end."""
        names = self._names()
        env = {n: os.environ.get(n) for n in names}
        local = {n: _local_env[n] for n in names if n in _local_env}
        attrs = dict(self.__dict__)
        try:
            yield
        finally:
            self.__dict__.clear()
            self.__dict__.update(attrs)
            for n, v in env.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v
                _local_env.pop(n, None)
            _local_env.update(local)


def _wgmma(text: str | None) -> str:
    t = (text or "1").strip().lower()
    if t == "sync":
        return "sync"
    return "off" if t in ("0", "off", "false", "no") else "async"


class codegen_knobs(base_knobs):
    """Switches that change the PTX; all of them are part of the compile cache key."""

    wgmma = _Knob("BLOCKTUNE_WGMMA", parse=_wgmma, text=lambda v: {"async": "1", "off": "0"}.get(v, v),
                  doc="tl.dot on sm_90: 'async' (wgmma, one group in flight across pipelined K iterations), "
                      "'sync' (wgmma waited for at each dot) or 'off' (mma.sync, the sm_80 code)")
    pipeline = _Knob("BLOCKTUNE_NO_PIPELINE", parse=lambda t: not flag(t), text=lambda v: "0" if v else "1",
                     doc="software pipelining of the K loops that feed tensor-core dots (cp.async into "
                         "num_stages buffers); BLOCKTUNE_NO_PIPELINE=1 turns it off")
    tma = _Knob("BLOCKTUNE_NO_TMA", parse=lambda t: not flag(t), text=lambda v: "0" if v else "1",
                doc="tensor descriptors on sm_90 through the bulk tensor copy engine (TMA, mbarriers); "
                    "BLOCKTUNE_NO_TMA=1 lowers them to bounds-checked loads and stores instead")
    pointer_tma = _Knob("BLOCKTUNE_POINTER_TMA", parse=lambda t: t is None or t.strip() == "" or flag(t),
                        text=lambda v: "1" if v else "0",
                        doc="sm_90: pointer tiles of a wgmma K loop that are provably boxes of a row-major 2-D "
                            "tensor load through TMA from a tensor map the launch builds (backend/pointer_tma.py); "
                            "on by default, BLOCKTUNE_POINTER_TMA=0 (or BLOCKTUNE_NO_TMA=1) keeps them on cp.async")
    warp_specialize = _Knob("BLOCKTUNE_WARP_SPECIALIZE", parse=flag, text=lambda v: "1" if v else "0",
                            doc="sm_90: warp-specialize every wgmma loop fed by TMA loads (a producer warpgroup "
                                "issues the copies), as tl.range(..., warp_specialize=True) does for one loop")
    debug = _Knob("BLOCKTUNE_DEBUG", "TRITON_DEBUG", parse=any_flag,
                  doc="device_assert is checked on the GPU (as @jit(debug=True))")
    fp32_default = _Knob("TRITON_F32_DEFAULT", parse=lambda t: t if t is not None else "tf32",
                         doc="tl.dot's input_precision for fp32 operands when the kernel does not say")
    fp_fusion = _Knob("TRITON_DEFAULT_FP_FUSION", parse=lambda t: t is None or flag(t),
                      doc="a*b+c in floating point may become one fma (Triton's default); "
                          "TRITON_DEFAULT_FP_FUSION=0 keeps the multiply and the add apart")
    line_info = _Knob("TRITON_DISABLE_LINE_INFO", "BLOCKTUNE_DISABLE_LINE_INFO", parse=lambda t: not any_flag(t),
                      text=lambda v: "0" if v else "1",
                      doc="the kernel's Python source lines in the PTX (.loc) and the cubin (ptxas -lineinfo), "
                          "for profilers; TRITON_DISABLE_LINE_INFO=1 leaves them out")

    def key(self) -> str:
        """Every codegen knob's value, for the compile cache key."""
        return ";".join(f"{name}={value!r}" for name, value in sorted(self.knobs.items()))


class cache_knobs(base_knobs):
    dir = _Knob("BLOCKTUNE_CACHE_DIR", parse=lambda t: t or None,
                doc="the compile cache directory (None: the platform's user cache dir + /blocktune)")
    disabled = _Knob("BLOCKTUNE_DISABLE_DISK_CACHE", parse=flag, doc="no disk cache (memory only)")


class runtime_knobs(base_knobs):
    INTERPRET_VARS = ("BLOCKTUNE_INTERPRET", "TRITON_INTERPRET")
    interpret = _Knob(*INTERPRET_VARS, parse=any_flag,
                      doc="kernel[grid](...) runs on the CPU interpreter (read at every launch)")
    interpret_vectorize = _Knob("BLOCKTUNE_INTERPRET_VECTORIZE",
                                parse=lambda t: t is None or t.strip().lower() not in ("0", "false", "no", "off"),
                                doc="the interpreter runs straight-line kernels over many programs at once")
    launcher = _Knob("BLOCKTUNE_LAUNCHER", parse=lambda t: "ctypes" if (t or "").strip().lower() == "ctypes" else "native",
                     text=str,
                     doc="'native' (launch.c, built with the system C compiler) or 'ctypes'")
    override_arch = _Knob("TRITON_OVERRIDE_ARCH", parse=lambda t: (t or "").strip() or None,
                          doc="compile launched kernels for this architecture ('sm80', 'sm_90a') instead of the "
                              "device's (Triton's knob; the target is in the compile cache key)")
    ptxas_aot = _Knob("BLOCKTUNE_PTXAS_AOT", parse=flag,
                      doc="assemble PTX to a cubin with ptxas before loading, and keep it in the disk cache")

    def __init__(self):
        # Triton's launch hooks: each is called with the launch's LazyDict (runtime/launch_hooks.py)
        # around every kernel launch while it has a listener (the profiler's hook="triton" adds one).
        self.launch_enter_hook = HookChain()
        self.launch_exit_hook = HookChain(reversed=True)
        # Triton's JIT hooks (runtime/jit_hooks.py): called before / after each compile of a
        # specialization; a jit_cache_hook that returns True skips the compile
        self.jit_cache_hook = None
        self.jit_post_compile_hook = None


class tools_knobs(base_knobs):
    ptxas = _Knob("BLOCKTUNE_PTXAS", parse=lambda t: t or None, doc="path of ptxas (else PATH, CUDA_HOME, the wheels)")
    libdevice = _Knob("BLOCKTUNE_LIBDEVICE", parse=lambda t: t or None, doc="path of libdevice.10.bc")
    cublaslt = _Knob("BLOCKTUNE_CUBLASLT", parse=lambda t: t or None,
                     doc="path of libcublasLt.so for compiler._C.libtriton.nvidia.cublas (else torch's, the wheels)")


@dataclass(frozen=True)
class NvidiaTool:
    """One of NVIDIA's command-line tools (ptxas, cuobjdump, nvdisasm) and its release ("12.8")."""
    path: str
    version: str

    @staticmethod
    @functools.lru_cache(maxsize=32)
    def from_path(path: str) -> "NvidiaTool | None":
        """The tool at `path` if it runs and says its release, else None."""
        try:
            r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        m = re.search(r"release (\d+\.\d+)", r.stdout + r.stderr)
        return NvidiaTool(path, m.group(1)) if m and r.returncode == 0 else None


# The wheels that carry each tool (package, folder inside it); Triton's wheel bundles all three.
_TOOL_WHEELS = {
    "ptxas": (("nvidia.cu13", "bin"), ("nvidia.cuda_nvcc", "bin")),
    "cuobjdump": (("nvidia.cu13", "bin"), ("nvidia.cuda_cuobjdump", "bin")),
    "nvdisasm": (("nvidia.cu13", "bin"), ("nvidia.cuda_nvdisasm", "bin")),
}


def nvidia_tool_paths(binary: str, explicit: tuple = ()) -> list[str]:
    """Every executable `binary` found, without repeats, in this order: the `explicit` paths (a
    knob's variables), the PATH, $CUDA_HOME / $CUDA_PATH / /usr/local/cuda, the nvidia wheels,
    Triton's bundled copy (found without importing Triton)."""
    found: list[str | None] = [*explicit, shutil.which(binary)]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            found.append(os.path.join(root, "bin", binary))
    for package, inside in _TOOL_WHEELS.get(binary, ()):
        for base in _package_dirs(package):
            found.append(os.path.join(base, inside, binary))
    # Triton's wheel, looked for on sys.path rather than imported: under Triton's test suite a
    # `triton` package that is blocktune's import shim comes first
    found += [os.path.join(entry or ".", "triton", "backends", "nvidia", "bin", binary) for entry in sys.path]
    out: list[str] = []
    for c in found:
        if c and c not in out and os.path.isfile(c) and os.access(c, os.X_OK):
            out.append(c)
    return out


def _package_dirs(name: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


class _Tool(_Knob):
    """A tool knob: reads as the first `NvidiaTool` that runs, looked for as nvidia_tool_paths says
    (its variables first); assigning a path sets the first variable. RuntimeError when there is none."""

    def __init__(self, binary: str, *names: str, doc: str):
        super().__init__(*names, parse=self._find, text=str, doc=doc)
        self.binary = binary

    def _find(self, texts) -> NvidiaTool:
        texts = texts if isinstance(texts, tuple) else (texts,)
        for path in nvidia_tool_paths(self.binary, texts):
            if tool := NvidiaTool.from_path(path):
                return tool
        raise RuntimeError(f"Cannot find {self.binary}: set {self.key} to its path, put it on the PATH or "
                           f"under $CUDA_HOME/bin, or install the NVIDIA wheel that carries it")


class nvidia_knobs(base_knobs):
    """Triton's `knobs.nvidia` tools; `ptxas` is the one compiler/ptxas.py uses."""
    ptxas = _Tool("ptxas", "BLOCKTUNE_PTXAS", "TRITON_PTXAS_PATH", doc="ptxas, the PTX assembler")
    cuobjdump = _Tool("cuobjdump", "TRITON_CUOBJDUMP_PATH", doc="cuobjdump (lists a cubin's SASS)")
    nvdisasm = _Tool("nvdisasm", "TRITON_NVDISASM_PATH", doc="nvdisasm (disassembles a cubin)")

    def paths(self, tool: str) -> list[str]:
        """Every executable copy of `tool` ("ptxas"), in the order its knob looks in."""
        knob = self.knob_descriptors[tool]
        return nvidia_tool_paths(knob.binary, tuple(_getenv(n) for n in knob.names))


class language_knobs(base_knobs):
    """Triton's `knobs.language`: defaults of the language that the kernel may override."""
    fp32_default = _Knob("TRITON_F32_DEFAULT", parse=lambda t: t or None,
                         doc="tl.dot's input_precision for fp32 operands when the kernel does not say "
                             "(None: tf32); the same variable as codegen.fp32_default")
    default_fp_fusion = _Knob("TRITON_DEFAULT_FP_FUSION", parse=lambda t: t is None or flag(t),
                              doc="Triton's name for codegen.fp_fusion (the same variable)")


class compilation_knobs(base_knobs):
    """Triton's `knobs.compilation`: what the front end accepts."""
    allow_non_constexpr_globals = _Knob(
        "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", parse=flag,
        doc="let kernels read module-level variables that are not tl.constexpr(...) (Triton refuses them: "
            "their value is read once, at compile time, and a later change would not be seen)")


class HookChain:
    """Listeners of one event, called in the order they were added (`reversed`: last added first,
    as Triton calls its launch-exit hooks so that nested tools unwind in order)."""

    def __init__(self, reversed: bool = False):  # noqa: A002 - Triton's argument name
        self.calls: list[Callable] = []
        self.reversed = reversed

    def add(self, fn: Callable) -> Callable:
        if fn not in self.calls:
            self.calls.append(fn)
        return fn

    def remove(self, fn: Callable) -> None:
        if fn in self.calls:
            self.calls.remove(fn)

    def __bool__(self) -> bool:
        return bool(self.calls)

    def __call__(self, *args, **event) -> None:
        for fn in (list(reversed(self.calls)) if self.reversed else list(self.calls)):
            fn(*args, **event)

    def first(self, **event):
        """The first listener's answer that is not None (later listeners are not asked)."""
        for fn in list(self.calls):
            got = fn(**event)
            if got is not None:
                return got
        return None


def _count(name: str, text: str | None, default: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        return max(0, int(text))
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a whole number (0 turns it off)") from None


class autotuning_knobs(base_knobs):
    print = _Knob("BLOCKTUNE_PRINT_AUTOTUNING", "TRITON_PRINT_AUTOTUNING", parse=any_flag,
                  doc="print each config as it is timed, its timings, and each tuning's winner")
    confirm = _Knob("BLOCKTUNE_AUTOTUNE_CONFIRM", parse=lambda t: _count("BLOCKTUNE_AUTOTUNE_CONFIRM", t, 5), text=str,
                    doc="after the timing pass, time again (in reverse order) up to this many of the fastest "
                        "configs that came within 25% of the best, and keep each one's better pass; 0: "
                        "Triton's single pass. Only with the default benchmarker (not a user's do_bench)")

    def __init__(self):
        # before_tuning(fn, key, configs, autotuner) -> Config | None: a config for this key without
        #     tuning it (autotuner is None for @jit(autotune_key=...) kernels, configs then too)
        # launch_missed(fn, key, configs, autotuner, args, kwargs): no listener had a config
        # config_chosen(fn, key, configs, autotuner, best_config, configs_timings, duration,
        #     cache_hit): the autotuner picked a config by benchmarking (or from its disk cache)
        self.before_tuning = HookChain()
        self.launch_missed = HookChain()
        self.config_chosen = HookChain()
        # Triton's one listener (fn, key, best_config, configs_timings, duration, cache_hit), called
        # after each tuning (not for a single config or configs pruned to one)
        self.listener = None


codegen = codegen_knobs()
cache = cache_knobs()
runtime = runtime_knobs()
tools = tools_knobs()
autotuning = autotuning_knobs()
nvidia = nvidia_knobs()
language = language_knobs()
compilation = compilation_knobs()

__all__ = ["codegen", "cache", "runtime", "tools", "autotuning", "nvidia", "language", "compilation", "base_knobs", "propagate_env",
           "NvidiaTool", "nvidia_tool_paths", "HookChain", "flag", "any_flag"]
