"""The native launcher module (launch.c), built once per machine with the system C compiler.

Triton builds its launchers the same way. The shared object lands in the cache directory under a
name that hashes the source, the interpreter version and the compiler command, so an edit of
launch.c or another Python rebuilds it; concurrent builds write to temporary names and rename.
When no C compiler (or no Python.h) is there, `module()` returns None and the ctypes launcher is
used. BLOCKTUNE_LAUNCHER=ctypes (knobs.runtime.launcher) forces the ctypes launcher.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from .. import knobs
from .cache import cache_dir

log = logging.getLogger("blocktune.launcher")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.c")
MODULE_NAME = "blocktune_launch"


def _c_compiler() -> str | None:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def build(out_dir: str) -> str:
    """Compile launch.c into `out_dir` (or reuse the build there); return the .so path."""
    cc = _c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (cc, gcc, clang or $CC)")
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise RuntimeError(f"Python.h not found in {include}")
    with open(SOURCE, "rb") as f:
        src = f.read()
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{include}"]
    tag = hashlib.sha256(src + sys.version.encode() + " ".join(cmd).encode()).hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = os.path.join(out_dir, f"{MODULE_NAME}-{tag}{suffix}")
    if os.path.isfile(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{MODULE_NAME}-", suffix=suffix, dir=out_dir)
    os.close(fd)
    try:
        p = subprocess.run(cmd + [SOURCE, "-o", tmp], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"building the native launcher failed:\n{p.stderr[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load(path: str):
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.lru_cache(maxsize=1)
def module():
    """The built module, or None (ctypes launchers then)."""
    if knobs.runtime.launcher == "ctypes":
        return None
    try:
        mod = load(build(os.path.join(cache_dir(), "native")))
    except Exception as exc:  # noqa: BLE001 - any failure means: use the ctypes launcher
        log.info("native launcher unavailable, using ctypes: %s", exc)
        return None
    mod.set_interpret_vars(*knobs.runtime.INTERPRET_VARS)
    return mod
