"""Helpers shared by the benchmarks: load one kernel file under Triton and under blocktune."""
from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def load_twice(filename: str) -> tuple[types.ModuleType | None, types.ModuleType]:
    """(module under real Triton or None if Triton is missing, module under blocktune).

    The blocktune copy is the same text with only the import lines changed.
    """
    path = HERE / filename
    text = path.read_text()
    ported = text.replace("import triton.language as tl", "import compiler.language as tl") \
                 .replace("import triton\n", "import compiler as triton\n")
    mods = []
    for tag, src in (("triton", text), ("blocktune", ported)):
        if tag == "triton" and importlib.util.find_spec("triton") is None:
            mods.append(None)
            continue
        name = f"_bench_{path.stem}_{tag}"
        # Triton and our jit read the source through inspect: keep a real file for each copy.
        out = pathlib.Path("/tmp") / f"{name}.py"
        out.write_text(src)
        spec = importlib.util.spec_from_file_location(name, out)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0], mods[1]


def geomean(xs):
    import math
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
