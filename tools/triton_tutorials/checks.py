"""What a Triton tutorial checks against torch, and how to read what it printed.

The tutorials check their kernels in three ways, and the report counts all of them:
- statements: `assert torch.allclose(...)`, `torch.testing.assert_close(...)` (check_sites finds
  their lines; the harness records which of them ran); other asserts check inputs, not results;
- printed comparisons: "✅ Triton and Torch match" / "❌ Triton and Torch differ" (03, 09), and
  "The maximum difference between torch and triton is X" (01, 07), which passes when X <= MAX_DIFF;
- pytest tests: `test_*` functions whose arguments are all parametrized (06's `test_op`). A
  `test_*` function with unparametrized arguments (05's `test_layer_norm(M, N, dtype)`) is not a
  pytest test: the tutorial calls it itself.

Standard library only: the harness imports this module in the child process before blocktune.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# 01 adds exactly (it prints 0.0); 07's libdevice asin is within a few ulp of torch's in float32.
MAX_DIFF = 1e-5

_MAX_DIFF_TEXT = "maximum difference between torch and triton"
_MAX_DIFF_LINE = re.compile(_MAX_DIFF_TEXT + r" is\s+(?:tensor\()?\s*([-+0-9.eE]+|nan|inf)",
                            re.IGNORECASE)
PASS_MARK, FAIL_MARK, SKIP_MARK = "✅", "❌", "⭕"
# calls that check by themselves, and comparisons that make an `assert` a check (an assert of
# anything else, such as `assert a.is_contiguous()` or `assert x.is_cuda`, checks the inputs)
_CHECK_CALLS = ("assert_close", "assert_allclose", "assert_equal", "assert_array_equal")
_COMPARISONS = _CHECK_CALLS + ("allclose", "isclose", "equal", "array_equal")


def _call_name(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


@dataclass(frozen=True)
class PrintedCheck:
    text: str  # the printed line
    ok: bool | None  # None: the tutorial says it did not run this one (⭕)


def check_sites(source: str) -> list[int]:
    """The lines of the tutorial's check statements: asserts of a comparison
    (`assert torch.allclose(...)`) and calls of assert_close & co."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            if any(_call_name(n) in _COMPARISONS for n in ast.walk(node.test)):
                lines.add(node.lineno)
        elif isinstance(node, ast.Expr) and _call_name(node.value) in _CHECK_CALLS:
            lines.add(node.lineno)
    return sorted(lines)


def _parametrized_names(decorator: ast.expr) -> set[str]:
    """The argument names of a `@pytest.mark.parametrize("a, b", ...)` decorator (else none)."""
    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "parametrize" and decorator.args):
        return set()
    names = decorator.args[0]
    if isinstance(names, ast.Constant) and isinstance(names.value, str):
        return {n.strip() for n in names.value.split(",") if n.strip()}
    if isinstance(names, (ast.List, ast.Tuple)):
        return {e.value for e in names.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def pytest_tests(source: str) -> list[str]:
    """The module-level `test_*` functions pytest can run on its own: every argument without a
    default is parametrized."""
    tests = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
            continue
        args = node.args.posonlyargs + node.args.args
        required = {a.arg for a in args[:len(args) - len(node.args.defaults)]}
        required |= {a.arg for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is None}
        covered = set().union(*(_parametrized_names(d) for d in node.decorator_list))
        if required <= covered:
            tests.append(node.name)
    return tests


def printed_checks(output: str) -> list[PrintedCheck]:
    """The comparisons the tutorial printed, in order. A line rewritten with "\\r" (09 prints
    "label: ..." and then "\\rlabel: ✅") counts as what it shows last."""
    found = []
    for raw in output.splitlines():
        line = raw.rsplit("\r", 1)[-1].strip()
        if PASS_MARK in line:
            found.append(PrintedCheck(line, True))
        elif FAIL_MARK in line:
            found.append(PrintedCheck(line, False))
        elif SKIP_MARK in line:
            found.append(PrintedCheck(line, None))
        else:
            m = _MAX_DIFF_LINE.search(line)
            if m:
                value = float(m.group(1))
                found.append(PrintedCheck(line, value <= MAX_DIFF))  # nan compares False: a failure
    return found


def prints_checks(source: str) -> bool:
    """Whether the tutorial prints comparisons (so that reaching none of them is worth saying)."""
    return PASS_MARK in source or FAIL_MARK in source or _MAX_DIFF_TEXT in source.lower()


_NEEDS_CUDA = re.compile(r"Torch not compiled with CUDA|Found no NVIDIA driver|no CUDA GPU|NoGPUError|"
                         r"CUDA driver|cuda(?:\.|\s)is_available|libcuda|No CUDA device|CUDA is not usable",
                         re.IGNORECASE)
_CUDA_CHECK_SOURCE = re.compile(r"\bis_cuda\b|device\s*=\s*[\"']cuda|torch\.cuda\.|supports_tma\(\)")


def needs_cuda(error: str, tutorial_line: str = "") -> bool:
    """True when the tutorial stopped because there is no CUDA device: torch's or blocktune's
    no-GPU errors, or a failing line of the tutorial's own that insists on CUDA
    (`assert x.is_cuda`, `device="cuda"`, `torch.cuda.*`)."""
    return bool(_NEEDS_CUDA.search(error) or _CUDA_CHECK_SOURCE.search(tutorial_line))
