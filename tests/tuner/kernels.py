"""Kernel sources and job specs shared by the tuner tests (Triton's tutorial kernels and a
vector add with deliberately broken modes)."""
from __future__ import annotations

from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"


def example(name: str, **sizes) -> dict:
    spec = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    spec["sizes"].update(sizes)
    return spec


# MODE selects a behaviour: 0 correct, 1 out-of-bounds access (a fault), 2 wrong result,
# 3 a loop that never ends (a hang), 4 a compile error. Only the taken constexpr branch is compiled.
MODES_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def add_modes(x_ptr, y_ptr, out_ptr, flag_ptr, n_elements, BLOCK_SIZE: tl.constexpr, MODE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    out = x + y
    if MODE == 1:
        out = tl.load(x_ptr + offsets.to(tl.int64) + 17592186044416)   # 64 TiB past x: unmapped
    if MODE == 2:
        out = x - y
    if MODE == 3:
        i = 0
        while tl.atomic_add(flag_ptr, 0) == 0:
            i += 1
    if MODE == 4:
        out = not_a_function(x)
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def add_reference(x_ptr, y_ptr, out_ptr, flag_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
'''


def modes_spec(n: int = 1000, *, modes=(0, 1, 2, 3, 4, 5), timeout_s: float = 3.0, **over) -> dict:
    spec = {
        "kernel": {"name": "add_modes", "source": MODES_SOURCE},
        "sizes": {"N": n},
        "args": [
            {"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
            {"name": "y_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
            {"name": "out_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "zeros"}},
            {"name": "flag_ptr", "tensor": {"shape": [1], "dtype": "int32", "init": "zeros"}},
            {"name": "n_elements", "value": "numel(x_ptr)"},
        ],
        "key": ["n_elements"],
        "grid": ["cdiv(n_elements, BLOCK_SIZE)"],
        "space": {"MODE": list(modes), "BLOCK_SIZE": [256]},
        "constraints": ["MODE != 5"],           # 5: refused by a constraint, never compiled
        "check": {"outputs": ["out_ptr"]},
        "default_config": {"MODE": 0, "BLOCK_SIZE": 256, "num_warps": 4},
        # the search stops once every *valid* config is tried: queue MODE 5 first so that it is
        # always proposed (and refused) whatever order the brute-force sampler picks
        "configs": [{"MODE": 5, "BLOCK_SIZE": 256, "num_warps": 4}],
        "budget": {"trials": 20},
        "sampler": "brute",
        "measure": {"timeout_s": timeout_s, "remeasure_top": 1, "remeasure_rounds": 2},
    }
    spec.update(over)
    return spec
