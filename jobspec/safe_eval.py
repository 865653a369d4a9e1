"""A small, safe expression evaluator for grids, constraints and derived scalars.

Submitted job specs are data, never code: their expressions are parsed with `ast` and walked here.
Allowed: names from the given environment, int/float/bool literals, + - * / // % ** (small
exponents), unary - + not, and/or, comparisons (chained too), `a if c else b`, and calls of the
functions in FUNCTIONS only (min, max, cdiv, next_power_of_2, abs, log2, shape, numel, stride).
Refused: attribute access, subscripts, other calls, lambdas, comprehensions, strings, and numbers
above MAX_MAGNITUDE (literals and intermediate results alike).
"""
from __future__ import annotations

import ast
import functools
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

MAX_MAGNITUDE = 2**62
MAX_EXPR_CHARS = 2000
MAX_NODES = 400
MAX_EXPONENT = 64


class SafeEvalError(ValueError):
    """The expression is not allowed or cannot be evaluated."""


@dataclass(frozen=True)
class TensorInfo:
    """What an expression may know about a tensor argument: its shape, strides and dtype."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    strides: tuple[int, ...] | None = None

    def stride(self, dim: int) -> int:
        if self.strides is not None:
            return self.strides[dim]
        s = 1
        for d in self.shape[dim + 1:]:
            s *= d
        return s


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise SafeEvalError(f"{what} needs an integer, got {x!r}")
    return x


def _cdiv(a, b):
    a, b = _int(a, "cdiv"), _int(b, "cdiv")
    if b == 0:
        raise SafeEvalError("cdiv by zero")
    return -(-a // b)


def _next_power_of_2(n):
    n = _int(n, "next_power_of_2")
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _log2(n):
    n = _int(n, "log2")
    if n <= 0:
        raise SafeEvalError("log2 of a non-positive number")
    return n.bit_length() - 1


def _tensor(t, what: str) -> TensorInfo:
    if not isinstance(t, TensorInfo):
        raise SafeEvalError(f"{what}() takes a tensor argument, got {t!r}")
    return t


def _dim(t: TensorInfo, d) -> int:
    d = _int(d, "dimension")
    if not -len(t.shape) <= d < len(t.shape):
        raise SafeEvalError(f"dimension {d} out of range for a tensor of shape {t.shape}")
    return d % len(t.shape)


def _shape(t, d):
    t = _tensor(t, "shape")
    return t.shape[_dim(t, d)]


def _numel(t):
    t = _tensor(t, "numel")
    return math.prod(t.shape)


def _stride(t, d):
    t = _tensor(t, "stride")
    return t.stride(_dim(t, d))


def _min(*a):
    if not a:
        raise SafeEvalError("min() needs arguments")
    return min(a)


def _max(*a):
    if not a:
        raise SafeEvalError("max() needs arguments")
    return max(a)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": _min, "max": _max, "cdiv": _cdiv, "next_power_of_2": _next_power_of_2,
    "abs": abs, "log2": _log2, "shape": _shape, "numel": _numel, "stride": _stride,
}


def _pow(a, b):
    if abs(b) > MAX_EXPONENT:
        raise SafeEvalError(f"exponent {b!r} too large (limit {MAX_EXPONENT})")
    if isinstance(a, int) and isinstance(b, int) and b < 0:
        return float(a) ** b
    return a ** b


def _div(a, b):
    if b == 0:
        raise SafeEvalError("division by zero")
    return a / b


def _floordiv(a, b):
    if b == 0:
        raise SafeEvalError("division by zero")
    return a // b


def _mod(a, b):
    if b == 0:
        raise SafeEvalError("modulo by zero")
    return a % b


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div,
    ast.FloorDiv: _floordiv, ast.Mod: _mod, ast.Pow: _pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}


def _check_number(x):
    if isinstance(x, bool) or isinstance(x, TensorInfo):
        return x
    if isinstance(x, int):
        if abs(x) > MAX_MAGNITUDE:
            raise SafeEvalError(f"number too large: {x} (limit {MAX_MAGNITUDE})")
        return x
    if isinstance(x, float):
        if not math.isfinite(x) or abs(x) > MAX_MAGNITUDE:
            raise SafeEvalError(f"number out of range: {x}")
        return x
    raise SafeEvalError(f"unsupported value {x!r}")


def parse(expr: str) -> ast.Expression:
    """Parse and check an expression (syntax and allowed constructs), without evaluating it."""
    if not isinstance(expr, str):
        raise SafeEvalError(f"an expression must be a string, got {type(expr).__name__}")
    return _parse_checked(expr)


@functools.lru_cache(maxsize=4096)
def _parse_checked(expr: str) -> ast.Expression:
    """`parse` of one expression, kept: a spec's constraints are evaluated for every config of its
    space (parsing was three quarters of enumerating tutorial 03's valid configs). The tree is only
    read by the evaluator; an expression that fails raises every time (errors are not cached)."""
    if len(expr) > MAX_EXPR_CHARS:
        raise SafeEvalError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise SafeEvalError(f"syntax error in {expr!r}: {exc.msg}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise SafeEvalError(f"expression too complex ({len(nodes)} nodes, limit {MAX_NODES})")
    for node in nodes:
        _check_node(node, expr)
    return tree


_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.Name,
            ast.Constant, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
            *_BINOPS, *_CMPOPS)


def _check_node(node: ast.AST, expr: str) -> None:
    if isinstance(node, ast.Attribute):
        raise SafeEvalError(f"attribute access is not allowed: {expr!r}")
    if isinstance(node, ast.Subscript):
        raise SafeEvalError(f"subscripts are not allowed (use shape(x, d)): {expr!r}")
    if not isinstance(node, _ALLOWED):
        raise SafeEvalError(f"{type(node).__name__} is not allowed in {expr!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise SafeEvalError(f"call of {what!r} is not allowed; allowed: {', '.join(sorted(FUNCTIONS))}")
        if node.keywords:
            raise SafeEvalError("keyword arguments are not allowed")
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, bool)):
            raise SafeEvalError(f"only numbers are allowed as literals, got {node.value!r}")
        _check_number(node.value)
    if isinstance(node, ast.Name) and node.id.startswith("__"):
        raise SafeEvalError(f"name {node.id!r} is not allowed")


def names(expr: str) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    tree = parse(expr)
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - (funcs & set(FUNCTIONS))


class _Evaluator:
    def __init__(self, env: Mapping[str, Any]):
        self.env = env

    def run(self, node: ast.AST):
        return _check_number(self._eval(node))

    def _eval(self, node: ast.AST):
        if isinstance(node, ast.Expression):
            return self.run(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise SafeEvalError(f"unknown name {node.id!r}")
            return _check_number(self.env[node.id])
        if isinstance(node, ast.BinOp):
            a, b = self.run(node.left), self.run(node.right)
            if isinstance(a, TensorInfo) or isinstance(b, TensorInfo):
                raise SafeEvalError("arithmetic on a tensor; use shape(x, d) or numel(x)")
            try:
                return _BINOPS[type(node.op)](a, b)
            except OverflowError:
                raise SafeEvalError("number too large") from None
        if isinstance(node, ast.UnaryOp):
            v = self.run(node.operand)
            if isinstance(node.op, ast.Not):
                return not v
            if isinstance(v, TensorInfo):
                raise SafeEvalError("arithmetic on a tensor")
            return -v if isinstance(node.op, ast.USub) else +v
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                v = True
                for value in node.values:
                    v = self.run(value)
                    if not v:
                        return v
                return v
            v = False
            for value in node.values:
                v = self.run(value)
                if v:
                    return v
            return v
        if isinstance(node, ast.Compare):
            left = self.run(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.run(right_node)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self.run(node.body) if self.run(node.test) else self.run(node.orelse)
        if isinstance(node, ast.Call):
            args = [self.run(a) for a in node.args]
            return FUNCTIONS[node.func.id](*args)
        raise SafeEvalError(f"{type(node).__name__} is not allowed")  # pragma: no cover - parse() refuses


def safe_eval(expr: str | int | float, env: Mapping[str, Any] | None = None):
    """Evaluate `expr` over `env` (names → numbers or TensorInfo). Numbers pass through."""
    if isinstance(expr, bool) or isinstance(expr, (int, float)):
        return _check_number(expr)
    tree = parse(expr)
    try:
        return _Evaluator(env or {}).run(tree)
    except SafeEvalError:
        raise
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, IndexError) as exc:
        raise SafeEvalError(f"cannot evaluate {expr!r}: {exc}") from None


def check_names(expr: str | int | float, known: Iterable[str], where: str) -> None:
    """Raise SafeEvalError if `expr` uses a name outside `known`."""
    if not isinstance(expr, str):
        return
    unknown = names(expr) - set(known)
    if unknown:
        raise SafeEvalError(f"{where}: unknown name(s) {', '.join(sorted(unknown))} in {expr!r}")
