"""ptxas, NVIDIA's PTX assembler: where it is, which one suits a driver, and running it.

The compiler emits PTX and does not ship ptxas. A cubin assembled ahead of time saves the driver's
JIT of the PTX at load (the tuner assembles in its compile pool; `BLOCKTUNE_PTXAS_AOT=1` does it at
the first load), and ptxas says why the driver refused a module; tests assemble every kernel.

Where it is looked for (`knobs.nvidia.ptxas`, Triton's knob), in this order: $BLOCKTUNE_PTXAS, $TRITON_PTXAS_PATH,
the PATH, $CUDA_HOME / $CUDA_PATH / /usr/local/cuda, the nvidia-cuda-nvcc wheels (nvidia/cu13,
nvidia/cuda_nvcc), Triton's bundled copy (found without importing Triton).

A cubin from a newer CUDA major version than the driver's does not load; within a major version it
does (minor-version compatibility). `for_driver(cuda_version)` picks accordingly.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from . import knobs


def candidates() -> list[str]:
    """Every executable ptxas found, in the order of the module doc, without repeats."""
    return knobs.nvidia.paths("ptxas")


def find() -> str | None:
    """The first ptxas found, or None."""
    found = candidates()
    return found[0] if found else None


def require() -> str:
    """The first ptxas found; FileNotFoundError says where to get one."""
    exe = find()
    if exe is None:
        raise FileNotFoundError("ptxas not found (set BLOCKTUNE_PTXAS, put it on the PATH, or install the "
                                "nvidia-cuda-nvcc wheel)")
    return exe


def version(path: str) -> tuple[int, int] | None:
    """(major, minor) of `ptxas --version` ("release 13.0"), None if it does not run."""
    tool = knobs.NvidiaTool.from_path(path)
    return _as_version(tool.version) if tool else None


def _as_version(v) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", str(v or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def for_driver(driver_cuda_version: str | None) -> str | None:
    """The ptxas whose cubins a driver of this CUDA version ("12.8") loads, or None: the first one
    not newer than the driver, else the first of the driver's major version. Any first one when the
    driver's version is unknown."""
    drv = _as_version(driver_cuda_version)
    same_major = None
    for path in candidates():
        ver = version(path)
        if ver is None:
            continue
        if drv is None or ver <= drv:
            return path
        if ver[0] == drv[0] and same_major is None:
            same_major = path
    return same_major


def _run(args: list[str], ptx: str, timeout: float) -> tuple[subprocess.CompletedProcess, bytes | None]:
    with tempfile.TemporaryDirectory(prefix="blocktune-ptxas-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([*args, src, "-o", out], capture_output=True, text=True, timeout=timeout)
        cubin = None
        if r.returncode == 0:
            with open(out, "rb") as f:
                cubin = f.read()
        return r, cubin


def assemble(ptx: str, target: str, *, exe: str | None = None, opt_level: int = 3, timeout: float = 120.0) -> bytes:
    """PTX → cubin for `target` ("sm_90a") with `exe` (default: the first found). RuntimeError with
    ptxas's message when assembly fails."""
    # -lineinfo keeps the PTX's .loc source lines in the cubin (profilers, nvdisasm -g); the code is the same
    lineinfo = ["-lineinfo"] if "\n\t.loc\t" in ptx or "\n.loc" in ptx else []
    r, cubin = _run([exe or require(), f"-arch={target}", f"-O{opt_level}", *lineinfo], ptx, timeout)
    if cubin is None:
        raise RuntimeError(f"ptxas failed for {target}:\n{(r.stderr or r.stdout).strip()[:4000]}")
    return cubin


def report(ptx: str, arch: str = "sm_90") -> str:
    """Assemble with `ptxas -v` and return its report (registers, spills, shared memory); `sm_90a`
    is used when the PTX contains wgmma. RuntimeError with ptxas's message when assembly fails."""
    if "wgmma" in ptx and arch == "sm_90":
        arch = "sm_90a"
    r, cubin = _run([require(), "-v", f"-arch={arch}"], ptx, 600)
    if cubin is None:
        raise RuntimeError(f"ptxas failed ({r.returncode}):\n{r.stderr}{r.stdout}")
    return r.stderr + r.stdout
