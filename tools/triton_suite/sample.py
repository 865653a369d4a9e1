"""A pytest plug-in that keeps at most N cases of each test function, spread evenly over its
parameter grid, the same ones on every run (`--cases-per-test N`).

Triton's language tests are some 13,000 parametrized cases; the interpreters run a few per second
on a small machine. Picking by position in the collection order (which depends only on the test
files) makes both runs, Triton's interpreter and blocktune, see the very same cases.

shim.py copies this file beside the shim, so it is loaded with `-p _triton_suite_sample` in the
reference run too (which must not import blocktune): standard library and pytest only.
"""
from __future__ import annotations

from collections import defaultdict


def pytest_addoption(parser):
    parser.addoption("--cases-per-test", type=int, default=0, metavar="N",
                     help="keep at most N evenly spread cases of each test function (0: all)")


def function_id(nodeid: str) -> str:
    """`f.py::test_x[a-b]` -> `f.py::test_x`."""
    return nodeid.split("[", 1)[0]


def evenly_spread(n: int, k: int) -> list[int]:
    """k indices out of range(n), spread evenly and including the first (all of them when n <= k)."""
    if n <= k:
        return list(range(n))
    return sorted({(i * n) // k for i in range(k)})


def pytest_collection_modifyitems(config, items):
    k = config.getoption("--cases-per-test")
    if k <= 0:
        return
    by_function = defaultdict(list)
    for item in items:
        by_function[function_id(item.nodeid)].append(item)
    keep = set()
    for cases in by_function.values():
        keep.update(id(cases[i]) for i in evenly_spread(len(cases), k))
    selected = [it for it in items if id(it) in keep]
    deselected = [it for it in items if id(it) not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
