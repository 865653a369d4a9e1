"""The Triton-suite tooling (scripts/triton-suite.sh): the junit summary, the import shim, the sampler."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tools.triton_suite import sample, shim, summary

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def test_summary_lines_up_the_runs_and_groups_the_failures():
    ref = summary.read_junit(FIXTURES / "triton.xml")
    bt = summary.read_junit(FIXTURES / "blocktune.xml")
    assert ref["language/test_core.py::test_dot[fp8]"].outcome == summary.FAILED
    assert ref["language/test_core.py::test_gpu_only"].outcome == summary.SKIPPED
    assert bt["runtime/test_autotuner.py"].message.startswith("ModuleNotFoundError: No module named 'triton.runtime.foo'")

    c = summary.compare(ref, bt)
    assert (c.reference_passed, c.blocktune_passed, c.both_passed) == (6, 2, 1)
    assert abs(c.share - 1 / 6) < 1e-9
    rows = {r.function: r for r in c.rows}
    bin_op = rows["language/test_core.py::test_bin_op"]
    assert (bin_op.cases, bin_op.reference_passed, bin_op.blocktune_passed, bin_op.both_passed) == (3, 3, 1, 1)
    dot = rows["language/test_core.py::test_dot"]  # blocktune passes a case Triton fails: not in the share
    assert (dot.reference_passed, dot.blocktune_passed, dot.both_passed) == (0, 1, 0)

    groups = {g: (n, fns) for g, n, fns in c.groups}
    assert groups["missing attribute compiler.language.join"] == (2, ["language/test_core.py::test_join"])
    signedness = "CompilationError: error: cannot use / or % with uN and iN: the signedness differs; cast one first"
    assert groups[signedness] == (2, ["language/test_core.py::test_bin_op"])
    assert groups["collection: missing module triton.runtime.foo"] == (1, ["runtime/test_autotuner.py::test_kwargs"])
    assert [n for _, n, _ in c.groups] == sorted((n for _, n, _ in c.groups), reverse=True)


def test_summary_renders_a_table_and_markdown():
    c = summary.compare(summary.read_junit(FIXTURES / "triton.xml"), summary.read_junit(FIXTURES / "blocktune.xml"))
    console = Console(record=True, width=200)
    summary.render(c, console)
    text = console.export_text()
    assert "blocktune passes 16.7% of the cases Triton's interpreter passes (1/6; target 95%)" in text
    assert "missing attribute compiler.language.join" in text
    md = summary.markdown(c)
    assert "| `language/test_core.py::test_bin_op` | 3 | 3 | 1 | 1/3 |" in md
    assert "| 2 | missing attribute compiler.language.join | test_join |" in md


def test_error_group_spells_missing_names_and_drops_locations():
    assert summary.error_group("ImportError: cannot import name 'gather' from 'compiler.language' (x.py)") == \
        "missing name compiler.language.gather"
    assert summary.error_group("AttributeError: type object 'dtype' has no attribute 'is_fp8'") == \
        "missing attribute dtype.is_fp8"
    assert summary.error_group("AssertionError: assert 3 == 4") == "AssertionError: assert N == N"
    assert summary.error_group("compiler.errors.CompilationError: k.py:3:4: error: compiler.language has no "
                               "attribute 'flip'") == "missing attribute compiler.language.flip"
    assert summary.error_group("TypeError: cannot read the source of 'kernel_2' (no source)") == \
        summary.error_group("TypeError: cannot read the source of 'k' (no source)")


def test_sampler_keeps_evenly_spread_cases():
    assert sample.evenly_spread(3, 5) == [0, 1, 2]
    assert sample.evenly_spread(10, 3) == [0, 3, 6]
    assert sample.function_id("language/test_core.py::test_bin_op[int8-+]") == "language/test_core.py::test_bin_op"


def _fake_checkout(root: Path) -> Path:
    pkg = root / "python" / "triton"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '3.6.0'\n")
    # a test-support module written against Triton's public API, as Triton's own is
    (pkg / "_internal_testing.py").write_text(
        "import triton\nimport triton.language as tl\n\ndef is_interpreter():\n    return True\n\nJIT = triton.jit\n")
    return root


def test_shim_makes_triton_the_compiler_package(tmp_path):
    out = tmp_path / "shim"
    pkg = shim.build(_fake_checkout(tmp_path / "triton-src"), out)
    assert (pkg / "_internal_testing.py").is_file()
    check = """
import sys
import triton, compiler
import triton.language as tl
import triton.language.core
import triton.runtime.jit
from triton.compiler.errors import CompilationError
assert triton is compiler and triton.jit is compiler.jit
assert tl is compiler.language and triton.language.core is compiler.language.core
assert sys.modules["triton.runtime.jit"] is sys.modules["compiler.runtime.jit"]
assert CompilationError is compiler.errors.CompilationError
import triton._internal_testing as it
assert it.JIT is compiler.jit and it.__file__.startswith(sys.argv[1])
try:
    import triton.no_such_module
except ModuleNotFoundError as e:
    assert "blocktune has no 'compiler.no_such_module'" in str(e), e
else:
    raise AssertionError("imported a module blocktune lacks")
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(out), str(REPO)]))
    r = subprocess.run([sys.executable, "-c", check, str(out)], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_shim_refuses_what_is_not_a_triton_checkout(tmp_path):
    try:
        shim.build(tmp_path, tmp_path / "shim")
    except FileNotFoundError as e:
        assert "not a Triton checkout" in str(e)
    else:
        raise AssertionError("built a shim from an empty folder")


def test_cases_outside_blocktunes_selection_are_left_out():
    ref = summary.read_junit(FIXTURES / "triton.xml")
    bt = {k: v for k, v in summary.read_junit(FIXTURES / "blocktune.xml").items() if "test_join" not in k}
    c = summary.compare(ref, bt)
    assert c.not_run == 2 and (c.reference_passed, c.both_passed) == (4, 1)
    assert "language/test_core.py::test_join" not in {r.function for r in c.rows}


def test_shards_partition_the_cases_by_id_alone():
    ids = [f"language/test_core.py::test_bin_op[int8-{op}-{i}]" for op in "+-*/%" for i in range(40)]
    shards = [[n for n in ids if sample.in_shard(n, (i, 4))] for i in range(1, 5)]
    assert sorted(sum(shards, [])) == sorted(ids)                  # every case in exactly one shard
    assert all(len(s) > len(ids) // 8 for s in shards)             # and no shard nearly empty
    assert [n for n in ids if sample.in_shard(n, (2, 4))] == shards[1]   # the same on a second look
    assert sample.parse_shard("") is None and sample.parse_shard("3/8") == (3, 8)
    for bad in ("0/4", "5/4", "x/4", "2"):
        with pytest.raises(ValueError):
            sample.parse_shard(bad)
