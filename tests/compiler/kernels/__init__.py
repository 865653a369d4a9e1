"""Triton-style kernels shared by the compiler tests (interpret mode here; the GPU tests may reuse them)."""

import importlib.util as _ilu
import pathlib as _pl


def bench_kernels(filename: str):
    """`bench/<filename>` (Triton's own tutorial text) under blocktune, loaded the way the
    benchmarks load it: the same file, only its import lines changed (bench/common.py)."""
    path = _pl.Path(__file__).resolve().parents[3] / "bench" / "common.py"
    spec = _ilu.spec_from_file_location("_blocktune_bench_common", path)
    common = _ilu.module_from_spec(spec)
    spec.loader.exec_module(common)
    return common.load_as(filename, "blocktune")
