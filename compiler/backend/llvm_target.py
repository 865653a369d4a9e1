"""LLVM IR text → PTX with LLVM's NVPTX backend (llvmlite), and ptxas checks.

One target machine per (cpu, features) per process; the new pass manager at O3.
"""
from __future__ import annotations

import functools
import re
import os
import threading

import llvmlite.binding as llvm

from .. import knobs

TRIPLE = "nvptx64-nvidia-cuda"
PTX_FEATURES = "+ptx84"


def features_for(cpu: str) -> str:
    """PTX ISA 8.4 up to sm_90a; a newer architecture (sm_100a: 8.6) gets the oldest ISA that has it,
    LLVM's default for the target."""
    m = re.match(r"sm_(\d+)", cpu)
    return "" if m and int(m.group(1)) > 90 else PTX_FEATURES

_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _init():
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # 32-bit pointers for shared memory, as Triton does.
    llvm.set_option("", "--nvptx-short-ptr")
    # fp32 `fdiv` → div.rn (IEEE) unless the instruction carries `arcp`/`afn`; approximate
    # division (`div.full.f32`, Triton's default for `/`) is emitted explicitly by the lowering.
    return True


def cpu_for(target: str) -> str:
    """`sm_90` → `sm_90`; wgmma needs `sm_90a` (the lowering asks for it)."""
    t = target.lower()
    if not t.startswith("sm_"):
        raise ValueError(f"unknown NVPTX target {target!r} (expected e.g. 'sm_90')")
    return t


@functools.lru_cache(maxsize=None)
def target_machine(cpu: str = "sm_90", features: str = PTX_FEATURES):
    _init()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="default",
                                        codemodel="default")


@functools.lru_cache(maxsize=None)
def _pass_builder(cpu: str, features: str):
    tm = target_machine(cpu, features)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = False  # block code is already vectorized by hand; keeps compile time low
    pto.slp_vectorization = False
    return llvm.create_pass_builder(tm, pto)


def data_layout(cpu: str = "sm_90") -> str:
    return str(target_machine(cpu).target_data)


def llir_to_ptx(llir: str, cpu: str = "sm_90", features: str | None = None, optimize: bool = True) -> tuple[str, str]:
    """Parse, verify, optimize (O3) and emit PTX (features: `features_for(cpu)`). Returns (optimized
    LLVM IR, PTX)."""
    features = features_for(cpu) if features is None else features
    tm = target_machine(cpu, features)
    with _lock:  # llvmlite objects are not shared across threads safely
        mod = llvm.parse_assembly(llir)
        mod.triple = TRIPLE
        mod.data_layout = str(tm.target_data)
        mod.verify()
        if optimize:
            pb = _pass_builder(cpu, features)
            pb.getModulePassManager().run(mod, pb)
        ptx = tm.emit_assembly(mod)
        return str(mod), ptx


# --------------------------------------------------------------------------------------------
# libdevice: precise math (fp64 transcendentals, fp32 sin/cos) like Triton. Parsed once per
# process; the definitions a kernel needs are copied as text into its module (much cheaper than
# linking the whole library per kernel).

def libdevice_path() -> str | None:
    env = knobs.tools.libdevice
    if env and os.path.isfile(env):
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    cands = [os.path.join(root, ".venv", "lib", "python3.11", "site-packages", "nvidia", "cu13", "nvvm", "libdevice", "libdevice.10.bc")]
    try:
        import nvidia.cu13 as _cu  # type: ignore  # noqa: PLC0415 - an optional wheel, looked for only here
        cands += [os.path.join(b, "nvvm", "libdevice", "libdevice.10.bc") for b in _cu.__path__]
    except ImportError:
        pass
    cands += ["/usr/local/cuda/nvvm/libdevice/libdevice.10.bc"]
    for c in cands:
        if os.path.isfile(c):
            return c
    return None


@functools.lru_cache(maxsize=1)
def _libdevice():
    _init()
    path = libdevice_path()
    if path is None:
        raise FileNotFoundError("libdevice.10.bc not found (install nvidia-cuda-nvcc / nvidia-nvvm or set BLOCKTUNE_LIBDEVICE)")
    with open(path, "rb") as f:
        lib = llvm.parse_bitcode(f.read())
    funcs = {fn.name: fn for fn in lib.functions}
    gvars = {g.name: g for g in lib.global_variables}
    structs = {t.name: str(t) for t in lib.struct_types if t.name}
    return lib, funcs, gvars, structs


_ATTR_REF = re.compile(r"\s#\d+")
_MD_REF = re.compile(r",\s*![\w.]+\s+!\d+")
_SYM = re.compile(r"@([\w.$]+)")
_ld_text_cache: dict[str, tuple[str, set]] = {}


def _clean(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith(";"):
            continue
        lines.append(_MD_REF.sub("", _ATTR_REF.sub("", line)))
    return "\n".join(lines)


_STRUCT = re.compile(r"%(struct\.[\w.]+)")


@functools.lru_cache(maxsize=256)
def _libdevice_defs(names: tuple[str, ...]) -> str:
    _lib, funcs, gvars, structs = _libdevice()
    out, done = [], set()
    # a stack: the names are taken in the order given (pop() takes the last)
    work = list(reversed(names))
    while work:
        n = work.pop()
        if n in done:
            continue
        done.add(n)
        if n in funcs:
            f = funcs[n]
            text = _clean(str(f))
            if f.is_declaration:
                out.append(text)
                continue
            head, _, rest = text.partition("{")
            head = re.sub(r"^define (internal |linkonce_odr |weak_odr |available_externally )?", "define internal ", head.lstrip()).rstrip()
            head = re.sub(r"\b(noinline|alwaysinline)\b", "", head) + " alwaysinline {"
            out.append(head + rest)
            work.extend(m for m in _SYM.findall(rest) if m not in done)
        elif n in gvars:
            out.append(_clean(str(gvars[n])))
    body = "\n\n".join(out) + "\n"
    types = sorted(set(_STRUCT.findall(body)))
    return "".join(structs[t] + "\n" for t in types if t in structs) + body


def libdevice_defs(names) -> str:
    """LLVM IR text defining the libdevice functions `names` (and whatever they use), in an order that
    depends on the names only: sorted, never a set's iteration order (which changes with each
    process's PYTHONHASHSEED, and would change the module's LLVM IR and PTX with it)."""
    return _libdevice_defs(tuple(sorted(set(names))))
