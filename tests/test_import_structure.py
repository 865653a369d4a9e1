"""The import structure of docs/contracts.md, checked with import-linter (the contracts live in
pyproject.toml, [tool.importlinter]) and grimp: compiler ← tuner ← service → db, the client on its
own (its compiler plug-in excepted), no import circle inside the compiler, its packages in layers.
Function-level imports count as imports here."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "jobspec", "tuner", "service", "db", "client")
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")


def _lint(root: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root), COLUMNS="400")   # one line per contract in the report
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_every_contract_is_kept():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _circles(graph, prefix: str) -> list[list[str]]:
    """Strongly connected components (more than one module) of the import graph under `prefix`."""
    mods = sorted(m for m in graph.modules if m.split(".")[0] == prefix)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w.split(".")[0] != prefix:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return out


def test_no_import_circle_in_the_compiler():
    """Not even through a package's __init__ (the facade `compiler` re-exports the runtime: nothing
    below it may import it back)."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert _circles(graph, "compiler") == []


def test_the_contracts_catch_a_circle_and_a_forbidden_import(tmp_path):
    """The same check on a copy with two violations planted: a circle in the runtime (cache ↔ jit)
    and the compiler calling the client."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "compiler" / "runtime" / "cache.py", "a") as f:
        f.write("\nfrom . import jit  # planted\n")
    with open(tmp_path / "compiler" / "knobs.py", "a") as f:
        f.write("\n\ndef _planted():\n    import client.lookup  # noqa: F401\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    broken = [line for line in r.stdout.splitlines() if "BROKEN" in line]
    assert any("compiler imports nothing of ours" in line for line in broken), r.stdout[-3000:]
    assert any("no import cycles inside the compiler" in line for line in broken), r.stdout[-3000:]
    assert any("the runtime in layers" in line for line in broken), r.stdout[-3000:]
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)   # our own tree is still clean
    assert _circles(graph, "compiler") == []
