"""Triton's `ir_override` compile option (a launch option, or a key of an autotune Config): a file
that replaces one stage of the compiled kernel. Triton compiles the kernel as usual and, at the
stage the file's extension names, takes the file instead, then goes on from it.

blocktune's stages that Triton also has are `llir` (LLVM IR: compiled to PTX from the file), `ptx`
(used as the kernel's PTX) and `cubin` (loaded as it is); the kernel's metadata (its parameters,
num_warps, shared memory) stay those of its own compilation, as in Triton. Triton's MLIR stages
(`.ttir`, `.ttgir`) have no counterpart here: they raise NotApplicable.

Triton's PTX declares its scratch-pointer parameters after the kernel's own; those that the code
never reads are dropped from the entry, so that the parameters blocktune launches with are the
entry's. A PTX whose entry needs other parameters, or another block size (`.reqntid`), is refused.
"""
from __future__ import annotations

import hashlib
import os
import re

from ..not_applicable import NotApplicable

STAGES = ("llir", "ptx", "cubin")
_MLIR = ("ttir", "ttgir")
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)", re.S)


def stage_of(path) -> str:
    """The stage `path` replaces (its extension), checked: an existing file of a stage blocktune has."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"ir_override must be the path of a .llir, .ptx or .cubin file, got {type(path).__name__}")
    ext = os.path.splitext(os.fspath(path))[1].lstrip(".")
    if ext in _MLIR:
        raise NotApplicable(f"ir_override={os.fspath(path)!r} replaces Triton's {ext.upper()} (MLIR) stage; blocktune has "
                            "no MLIR stages (it compiles Python to its block IR, then LLVM IR and PTX), so it does not "
                            f"apply: override the .llir, .ptx or .cubin stage instead")
    if ext not in STAGES:
        raise ValueError(f"ir_override={os.fspath(path)!r}: the file's extension names the stage it replaces, one of "
                         f".llir, .ptx, .cubin (or Triton's .ttir/.ttgir, which blocktune does not have)")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ir_override file {os.fspath(path)!r} does not exist")
    return ext


def digest(path) -> str:
    """The file's contents, hashed: part of the compile cache key (the file may change)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def apply(out: dict, path, to_ptx) -> dict:
    """The backend's output `out` (name, llir, ptx, num_warps, launch_warps...) with the stage of
    `path` replaced; `to_ptx(llir) -> (llir, ptx)` compiles an LLVM IR override."""
    stage = stage_of(path)
    out = dict(out)
    if stage == "cubin":
        with open(path, "rb") as f:
            out["cubin"] = f.read()
        return out
    with open(path) as f:
        text = f.read()
    if stage == "llir":
        out["llir"], ptx = to_ptx(text)
    else:
        ptx = text
    out["ptx"], out["name"] = fit_ptx(ptx, out["ptx"], out.get("launch_warps", out["num_warps"]), path)
    return out


def fit_ptx(ptx: str, own_ptx: str, warps: int, path) -> tuple[str, str]:
    """`ptx` with its unused trailing parameters dropped to match `own_ptx`'s entry, and its
    entry's name; refused when it needs parameters or a block size the launch does not give."""
    entry = _ENTRY.search(ptx)
    if entry is None:
        raise ValueError(f"ir_override {os.fspath(path)!r}: no `.entry name(...)` kernel in the PTX")
    own = _ENTRY.search(own_ptx)
    params, own_params = _params(entry.group(2)), _params(own.group(2))
    n = len(own_params)
    body = ptx[entry.end():]
    if [_param_type(p) for p in params[:n]] != [_param_type(p) for p in own_params] or \
            any(re.search(rf"(?<![\w$]){re.escape(_param_name(p))}(?![\w$])", body) for p in params[n:]):
        raise ValueError(f"ir_override {os.fspath(path)!r}: the PTX kernel takes ({', '.join(map(_param_type, params))}) "
                         f"but the kernel launches with ({', '.join(map(_param_type, own_params))})")
    need = re.search(r"\.reqntid\s+(\d+)", body)
    if need and int(need.group(1)) != 32 * warps:
        raise ValueError(f"ir_override {os.fspath(path)!r}: the PTX kernel needs {need.group(1)} threads (.reqntid); the "
                         f"launch has {32 * warps} (num_warps={warps})")
    if len(params) > n:
        kept = ",".join(params[:n])
        ptx = ptx[:entry.start(2)] + (kept + "\n" if kept else "") + ptx[entry.end(2):]
    return ptx, entry.group(1)


def _params(text: str) -> list[str]:
    return [p for p in text.split(",") if p.strip()]


def _param_type(p: str) -> str:
    """`.param .u64 .ptr .global .align 1 name` → `.u64` (what the launch must fill)."""
    return p.split()[1]


def _param_name(p: str) -> str:
    return p.split()[-1]
