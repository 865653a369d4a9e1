"""A launch grid as expressions the tuning service can evaluate safely (jobspec.safe_eval's language).

    grid_expressions((4, 2), ...)                                   # ["4", "2"]
    grid_expressions(lambda META: (triton.cdiv(n, META["BLOCK"]),), args=..., names=..., metas=...)
                                                                    # ["cdiv(n, BLOCK)"]

A grid is a tuple of ints or a callable of the launch's meta-parameters. A callable cannot be sent
(the service runs no Python of ours), so its expression is recovered from its source: the lambda
(or a `def` whose body is one `return`) is found in its file with `ast`, and its result must be
built only from integer literals, `+ - * // %` and unary minus, calls of `cdiv` / `triton.cdiv` /
`next_power_of_2` / `min` / `max`, `META["name"]` for a config parameter or a kernel argument,
names of the caller's integers (written as the kernel argument of that name when it has the same
value, else as the number), and `t.shape[i]` / `t.numel()` of a tensor. Nothing is evaluated to
get the expressions; the recovered expressions are then checked against the callable itself on
every config's meta-parameters, and anything else raises GridNotExpressible with the reason.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import sys
from typing import Any, Callable, Iterable, Mapping

import compiler

MAX_DIMS = 3


class GridNotExpressible(Exception):
    """The grid cannot be written as safe expressions (the message says why)."""


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.integer)


def _constant_grid(grid) -> list[str]:
    dims = [grid] if _is_int(grid) else list(grid)
    if not 1 <= len(dims) <= MAX_DIMS or not all(_is_int(d) for d in dims):
        raise GridNotExpressible(f"the grid {grid!r} is not 1 to 3 integers")
    return [str(int(d)) for d in dims]


# -- finding the callable's syntax -----------------------------------------------------------------
def _positions(code) -> list[tuple[int, int, int, int]]:
    """Source spans of the code's instructions, without the pseudo-instructions at column 0."""
    out = []
    for pos in getattr(code, "co_positions", lambda: [])():
        if None not in pos and pos[2:] != (0, 0):
            out.append(pos)
    return out


def _within(node: ast.AST, pos: tuple[int, int, int, int]) -> bool:
    line, end_line, col, end_col = pos
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno, node.end_col_offset)
    return start <= (line, col) and (end_line, end_col) <= end


def _syntax(fn: Callable) -> tuple[list[str], ast.expr]:
    """(parameter names, the returned expression) of a lambda or a one-`return` function."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise GridNotExpressible(f"the grid is a {type(fn).__name__}, not a function or a lambda")
    try:
        lines, _ = inspect.findsource(fn)
    except (OSError, TypeError):
        raise GridNotExpressible("the grid function's source is not available (defined interactively?)") from None
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        raise GridNotExpressible("the file defining the grid function does not parse") from None
    first = code.co_firstlineno
    params = list(code.co_varnames[:code.co_argcount])
    cands: list[tuple[list[str], ast.expr, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda) and node.lineno == first:
            cands.append(([a.arg for a in node.args.args], node.body, node.body))
        elif isinstance(node, ast.FunctionDef) and node.name == fn.__name__ and first in (
                node.lineno, *[d.lineno for d in node.decorator_list]):
            body = list(node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]   # a docstring
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                raise GridNotExpressible(f"the grid function {fn.__name__}() is more than one `return` statement")
            cands.append(([a.arg for a in node.args.args], body[0].value, node))
    cands = [c for c in cands if c[0] == params]
    if not cands:
        raise GridNotExpressible("the grid function's source was not found")
    if len(cands) > 1:   # several lambdas on one line: the one whose code lies within it
        pos = _positions(code)
        cands = [c for c in cands if pos and all(_within(c[2], p) for p in pos)]
    if len(cands) != 1:
        raise GridNotExpressible("the grid lambda cannot be told apart from the others on its source line")
    return cands[0][0], cands[0][1]


# -- translating ------------------------------------------------------------------------------------
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


class _Translator:
    def __init__(self, fn: Callable, meta: str, args: Mapping[str, Any], names: set[str]):
        self.meta = meta
        self.args = args                    # kernel argument name → launch value
        self.names = names                  # names the expressions may use (scalars, config, constants)
        self.scope: dict[str, Any] = {}
        code = fn.__code__
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                self.scope[name] = cell.cell_contents
            except ValueError:
                pass
        self.globals = getattr(fn, "__globals__", {})
        triton = sys.modules.get("triton")
        self.functions = {"cdiv": {compiler.cdiv, getattr(triton, "cdiv", compiler.cdiv)},
                          "next_power_of_2": {compiler.next_power_of_2,
                                              getattr(triton, "next_power_of_2", compiler.next_power_of_2)},
                          "min": {builtins.min}, "max": {builtins.max}}

    def fail(self, node: ast.AST, why: str):
        raise GridNotExpressible(f"`{ast.unparse(node)}` {why}")

    def lookup(self, node: ast.Name) -> Any:
        if node.id in self.scope:
            return self.scope[node.id]
        if node.id in self.globals:
            return self.globals[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        self.fail(node, "names nothing the grid function can see")

    def obj(self, node: ast.expr) -> Any:
        """The object a name or a dotted name denotes (for call targets and tensors)."""
        if isinstance(node, ast.Name):
            if node.id == self.meta:
                self.fail(node, "is the whole meta dict (only META['name'] is understood)")
            return self.lookup(node)
        if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
            base = self.obj(node.value)
            if inspect.ismodule(base) and hasattr(base, node.attr):
                return getattr(base, node.attr)
        self.fail(node, "is not a name the grid can use")

    def meta_key(self, node: ast.Subscript) -> str | None:
        if isinstance(node.value, ast.Name) and node.value.id == self.meta:
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                return node.slice.value
            self.fail(node, "indexes the meta dict with something other than a string")
        return None

    def tensor(self, node: ast.expr) -> tuple[str | None, Any]:
        """(kernel argument name or None, the tensor) for `t` in t.shape[i] / t.numel()."""
        if isinstance(node, ast.Subscript):
            key = self.meta_key(node)
            if key is not None and key in self.args and hasattr(self.args[key], "shape"):
                return key, self.args[key]
            self.fail(node, "is not a tensor argument of the kernel")
        t = self.obj(node)
        if not hasattr(t, "shape"):
            self.fail(node, "is not a tensor")
        name = next((k for k, v in self.args.items() if v is t), None)
        return name, t

    def expr(self, node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and _is_int(node.value):
            return str(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return f"({self.expr(node.left)} {_BINOPS[type(node.op)]} {self.expr(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return f"({'-' if isinstance(node.op, ast.USub) else ''}{self.expr(node.operand)})"
        if isinstance(node, ast.Subscript):
            key = self.meta_key(node)
            if key is not None:
                if key in self.names:
                    return key
                self.fail(node, "is not a config parameter or a scalar argument of the kernel")
            if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                    and isinstance(node.slice, ast.Constant) and _is_int(node.slice.value):
                name, t = self.tensor(node.value.value)
                dim = int(node.slice.value)
                try:
                    size = int(tuple(t.shape)[dim])
                except (IndexError, TypeError, ValueError):
                    self.fail(node, "is out of the tensor's dimensions")
                return f"shape({name}, {dim})" if name is not None else str(size)
            self.fail(node, "is a subscript other than META['name'] or t.shape[i]")
        if isinstance(node, ast.Name):
            if node.id == self.meta:
                self.fail(node, "is the whole meta dict")
            v = self.lookup(node)
            if not _is_int(v):
                self.fail(node, f"is a {type(v).__name__}, not an integer")
            if node.id in self.names and _is_int(self.args.get(node.id)) and int(self.args[node.id]) == int(v):
                return node.id      # the caller's copy of a kernel argument: keep it symbolic
            return str(int(v))
        if isinstance(node, ast.Call):
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                self.fail(node, "passes keyword or starred arguments")
            if isinstance(node.func, ast.Attribute) and node.func.attr == "numel" and not node.args:
                name, t = self.tensor(node.func.value)
                if name is not None:
                    return f"numel({name})"
                return str(math.prod(int(d) for d in tuple(t.shape)))
            target = self.obj(node.func)
            for fname, objs in self.functions.items():
                if any(target is o for o in objs):
                    want = {"cdiv": (2,), "next_power_of_2": (1,)}.get(fname)
                    if want is not None and len(node.args) not in want or not node.args:
                        self.fail(node, "has the wrong number of arguments")
                    return f"{fname}({', '.join(self.expr(a) for a in node.args)})"
            self.fail(node, "calls a function other than cdiv, next_power_of_2, min and max")
        self.fail(node, "is not made of integers, + - * // %, cdiv/min/max, META['name'] and tensor sizes")


# -- checking ---------------------------------------------------------------------------------------
def _evaluate(text: str, env: Mapping[str, Any]) -> int:
    """Evaluate one of our own expressions (the subset written above) over `env`."""
    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                    ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b}[type(node.op)]()
        if isinstance(node, ast.Call):
            f = node.func.id
            if f in ("shape", "numel"):
                shape = tuple(int(d) for d in env[node.args[0].id].shape)
                return shape[ev(node.args[1])] if f == "shape" else math.prod(shape)
            vals = [int(ev(a)) for a in node.args]
            if f == "cdiv":
                return -(-vals[0] // vals[1])
            if f == "next_power_of_2":
                return 1 if vals[0] <= 1 else 1 << (vals[0] - 1).bit_length()
            return min(vals) if f == "min" else max(vals)
        raise ValueError(ast.dump(node))
    return int(ev(ast.parse(text, mode="eval").body))


def grid_expressions(grid, *, args: Mapping[str, Any] | None = None, names: Iterable[str] = (),
                     metas: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """Expressions (strings) for `grid`; see the module doc.

    args: the kernel's arguments at this launch, by name; names: the names an expression may use
    (scalar arguments, config parameters, constants); metas: the meta dicts the callable would be
    called with (one per config), to check the expressions against it."""
    if not callable(grid):
        return _constant_grid(grid)
    params, body = _syntax(grid)
    if len(params) != 1:
        raise GridNotExpressible(f"the grid function takes {len(params)} parameters, not one (META)")
    tr = _Translator(grid, params[0], dict(args or {}), set(names))
    elems = body.elts if isinstance(body, (ast.Tuple, ast.List)) else [body]
    if not 1 <= len(elems) <= MAX_DIMS:
        raise GridNotExpressible(f"the grid has {len(elems)} dimensions")
    exprs = [tr.expr(e) for e in elems]
    for meta in metas:
        try:
            want = grid(dict(meta))
        except Exception as exc:  # noqa: BLE001 - the user's callable: any failure means we cannot check
            raise GridNotExpressible(f"the grid function failed on a config's meta-parameters: {exc!r}") from None
        want = [want] if _is_int(want) else list(want)
        try:
            got = [_evaluate(e, meta) for e in exprs]
        except (KeyError, ValueError, TypeError, IndexError, ZeroDivisionError, AttributeError) as exc:
            raise GridNotExpressible(f"the grid expressions {exprs} cannot be evaluated: {exc!r}") from None
        if got != [int(w) for w in want]:
            raise GridNotExpressible(f"the grid expressions {exprs} give {got}, the grid function {list(want)}")
    return exprs


__all__ = ["grid_expressions", "GridNotExpressible"]
