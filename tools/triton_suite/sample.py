"""A pytest plug-in that keeps at most N cases of each test function, spread evenly over its
parameter grid, the same ones on every run (`--cases-per-test N`); and one shard of every case
(`--shard I/K`): the cases whose id hashes to I of K, a uniform sample of the whole suite whose K
shards, run one after another, make up all of it.

Triton's language tests are some 13,000 parametrized cases; the interpreters run a few per second
on a small machine. Picking by position in the collection order (which depends only on the test
files) makes both runs, Triton's interpreter and blocktune, see the very same cases.

shim.py copies this file beside the shim, so it is loaded with `-p _triton_suite_sample` in the
reference run too (which must not import blocktune): standard library and pytest only.
"""
from __future__ import annotations

import zlib
from collections import defaultdict

import pytest


def pytest_addoption(parser):
    parser.addoption("--cases-per-test", type=int, default=0, metavar="N",
                     help="keep at most N evenly spread cases of each test function (0: all)")
    parser.addoption("--shard", default="", metavar="I/K",
                     help="keep the cases whose id falls in shard I of K (1 <= I <= K), by a hash of the id")


def parse_shard(text: str) -> tuple[int, int] | None:
    """`"2/4"` -> (2, 4); `""` -> None. A malformed shard is pytest's usage error, not a silent full run."""
    if not text:
        return None
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected I/K, e.g. 1/4") from None
    if not 1 <= i <= k:
        raise ValueError(f"--shard {text!r}: I must be from 1 to K")
    return i, k


def in_shard(nodeid: str, shard: tuple[int, int]) -> bool:
    """By a hash of the id alone, so both runs (and every machine) put a case in the same shard."""
    i, k = shard
    return zlib.crc32(nodeid.encode()) % k == i - 1


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
    try:
        shard = parse_shard(config.getoption("--shard"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    if k <= 0 and shard is None:
        return
    candidates = [it for it in items if shard is None or in_shard(it.nodeid, shard)]
    if k <= 0:
        keep = {id(it) for it in candidates}
    else:
        by_function = defaultdict(list)
        for item in candidates:
            by_function[function_id(item.nodeid)].append(item)
        keep = set()
        for cases in by_function.values():
            keep.update(id(cases[i]) for i in evenly_spread(len(cases), k))
    selected = [it for it in items if id(it) in keep]
    deselected = [it for it in items if id(it) not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
