"""client.compiler_plugin.grid_exprs: launch grids (tuples, lambdas, one-return functions) as the safe
expressions of a job spec — recovered from the source with `ast`, checked against the callable,
refused with a reason when they are anything else."""
from __future__ import annotations

import math

import numpy as np
import pytest

import compiler
import compiler as triton
from client.compiler_plugin.grid_exprs import GridNotExpressible, grid_expressions
from jobspec.safe_eval import TensorInfo, safe_eval

GLOBAL_ROWS = 48


def metas(args: dict, blocks=(16, 64)) -> list[dict]:
    return [{**args, "BLOCK": b, "num_warps": 4, "num_stages": 3} for b in blocks]


def exprs(grid, args: dict, names=("n", "BLOCK", "num_warps", "num_stages")) -> list[str]:
    return grid_expressions(grid, args=args, names=set(names), metas=metas(args))


def test_constant_grids():
    assert grid_expressions((4, 2)) == ["4", "2"]
    assert grid_expressions(7) == ["7"]
    assert grid_expressions((np.int64(3),)) == ["3"]
    with pytest.raises(GridNotExpressible):
        grid_expressions((1.5,))
    with pytest.raises(GridNotExpressible):
        grid_expressions((1, 2, 3, 4))


def test_a_closure_copy_of_a_kernel_argument_stays_symbolic():
    n = 1000
    assert exprs(lambda META: (triton.cdiv(n, META["BLOCK"]),), {"n": 1000}) == ["cdiv(n, BLOCK)"]
    m = 77    # not a kernel argument: its value
    assert exprs(lambda META: (compiler.cdiv(m, META["BLOCK"]), GLOBAL_ROWS), {"n": 1000}) == \
        ["cdiv(77, BLOCK)", "48"]


def test_meta_names_arithmetic_min_max_and_the_safe_evaluator_agree():
    import torch

    x = torch.zeros((30, 50))
    args = {"x_ptr": x, "n": 1500}
    grid = lambda META: (max(1, META["n"] // META["BLOCK"]) * 2 - 1 + META["n"] % 3,  # noqa: E731
                         min(x.shape[0], triton.next_power_of_2(META["BLOCK"])), -(-x.numel() // 512))
    got = exprs(grid, args)
    assert got == ["(((max(1, (n // BLOCK)) * 2) - 1) + (n % 3))",
                   "min(shape(x_ptr, 0), next_power_of_2(BLOCK))", "(-((-numel(x_ptr)) // 512))"]
    env = {"x_ptr": TensorInfo((30, 50)), "n": 1500, "BLOCK": 64}
    assert [safe_eval(e, env) for e in got] == list(grid({**args, "BLOCK": 64}))


def test_two_lambdas_on_one_line_are_told_apart():
    n = 640
    a, b = (lambda META: (triton.cdiv(n, META["BLOCK"]),)), (lambda META: (n * 2 // META["BLOCK"],))
    assert exprs(a, {"n": 640}) == ["cdiv(n, BLOCK)"]
    assert exprs(b, {"n": 640}) == ["((n * 2) // BLOCK)"]


def test_a_one_return_function():
    n = 300

    def grid(meta):
        """The grid."""
        return (triton.cdiv(n, meta["BLOCK"]), 1)
    assert exprs(grid, {"n": 300}) == ["cdiv(n, BLOCK)", "1"]


@pytest.mark.parametrize("make, why", [
    (lambda n: (lambda META: (math.ceil(n / META["BLOCK"]),)), "calls a function other than"),
    (lambda n: (lambda META: (n // META["BLOCK"] if n else 1,)), "is not made of"),
    (lambda n: (lambda META: (n / META["BLOCK"],)), "is not made of"),
    (lambda n: (lambda META: (META["missing"],)), "is not a config parameter"),
    (lambda n: (lambda META: (len(META),)), "calls a function other than"),
    (lambda n: (lambda META: (float(n),)), "calls a function other than"),
    (lambda n: (lambda META, extra=1: (n,)), "parameters"),
])
def test_inexpressible_grids_say_why(make, why):
    with pytest.raises(GridNotExpressible, match=why):
        exprs(make(100), {"n": 100})


def test_a_float_in_the_closure_is_refused():
    scale = 0.5
    with pytest.raises(GridNotExpressible, match="float, not an integer"):
        exprs(lambda META: (scale,), {"n": 10})


def test_functions_without_source_are_refused():
    grid = eval("lambda META: (1,)")   # noqa: S307 - no file behind it
    with pytest.raises(GridNotExpressible, match="source"):
        exprs(grid, {"n": 1})
    with pytest.raises(GridNotExpressible):
        exprs(len, {"n": 1})


def test_the_expressions_are_checked_against_the_callable():
    """A source that no longer says what the code does (the file changed after import) is caught."""
    import linecache

    name = "stale_grid_source.py"
    ns = {"n": 5}
    exec(compile("grid = lambda META: (n * 2,)\n", name, "exec"), ns)   # noqa: S102 - a test fixture
    linecache.cache[name] = (30, None, ["grid = lambda META: (n * 3,)\n"], name)
    try:
        with pytest.raises(GridNotExpressible, match=r"give \[15\], the grid function \[10\]"):
            exprs(ns["grid"], {"n": 5})
    finally:
        linecache.cache.pop(name, None)
