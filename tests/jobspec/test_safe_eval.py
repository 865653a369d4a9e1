"""The safe expression evaluator: what it computes and what it refuses."""
from __future__ import annotations

import pytest

from jobspec.safe_eval import MAX_MAGNITUDE, SafeEvalError, TensorInfo, names, safe_eval


@pytest.mark.parametrize("expr, env, want", [
    ("cdiv(n_elements, BLOCK_SIZE)", {"n_elements": 98432, "BLOCK_SIZE": 1024}, 97),
    ("cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)", {"M": 4096, "N": 4000, "BLOCK_M": 128, "BLOCK_N": 64}, 32 * 63),
    ("(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 * num_stages <= max_shared_memory",
     {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4, "max_shared_memory": 232448}, True),
    ("(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 * num_stages <= max_shared_memory",
     {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "max_shared_memory": 232448}, False),
    ("min(a, b, 3) + max(a, b) - a % b + a // b", {"a": 7, "b": 5}, 3 + 7 - 2 + 1),
    ("next_power_of_2(n) if n > 1 else 1", {"n": 1000}, 1024),
    ("1 < x <= 4 and not y", {"x": 4, "y": False}, True),
    ("numel(x) + shape(x, -1) + stride(x, 0)", {"x": TensorInfo((3, 4))}, 12 + 4 + 4),
    ("2 ** 10 + log2(64) + abs(-3)", {}, 1024 + 6 + 3),
    ("1.0 / d", {"d": 8}, 0.125),
])
def test_evaluates(expr, env, want):
    got = safe_eval(expr, env)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("expr, fragment", [
    ("x.__class__", "attribute"),
    ("().__class__.__bases__[0]", "not allowed"),
    ("x[0]", "subscript"),
    ("__import__('os')", "not allowed"),
    ("open('/etc/passwd')", "call of 'open'"),
    ("eval('1')", "call of 'eval'"),
    ("(lambda: 1)()", "not allowed"),
    ("[i for i in range(3)]", "not allowed"),
    ("'abc'", "only numbers"),
    ("min(a=1)", "keyword"),
    ("10 ** 100", "too large"),
    ("99999999999999999999999", "too large"),
    ("2 ** 62 * 4", "too large"),
    ("1e308 * 10", "out of range"),
    ("a +", "syntax"),
    ("unknown_name + 1", "unknown name"),
    ("cdiv(1, 0)", "cdiv by zero"),
    ("x * 2", "arithmetic on a tensor"),
    ("shape(3, 0)", "tensor argument"),
])
def test_refuses(expr, fragment):
    env = {"x": TensorInfo((2, 2)), "a": 1}
    with pytest.raises(SafeEvalError) as info:
        safe_eval(expr, env)
    assert fragment in str(info.value)


def test_refuses_huge_and_deep_expressions():
    with pytest.raises(SafeEvalError, match="longer"):
        safe_eval("1+" * 2000 + "1")
    with pytest.raises(SafeEvalError, match="complex"):
        safe_eval("+".join(["a"] * 300), {"a": 1})
    assert safe_eval(MAX_MAGNITUDE) == MAX_MAGNITUDE
    with pytest.raises(SafeEvalError):
        safe_eval(MAX_MAGNITUDE + 1)


def test_names_lists_free_names_only():
    assert names("cdiv(n, BLOCK) * min(a, 2)") == {"n", "BLOCK", "a"}


def test_an_expression_is_parsed_once_and_a_bad_one_fails_every_time():
    """A spec's constraints are evaluated for every config of its space: the checked tree of an
    expression is kept (the same object comes back, and evaluates over any env), while an expression
    that fails to parse or check raises on every use, not only the first."""
    from jobspec.safe_eval import parse

    expr = "BLOCK * 2 * stages <= smem"
    assert parse(expr) is parse(expr)
    assert safe_eval(expr, {"BLOCK": 64, "stages": 2, "smem": 256}) is True
    assert safe_eval(expr, {"BLOCK": 64, "stages": 4, "smem": 256}) is False
    for _ in range(2):
        with pytest.raises(SafeEvalError, match="attribute access"):
            safe_eval("x.__class__", {"x": 1})
