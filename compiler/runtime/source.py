"""`jit_from_source`: kernels from source text, parsed with `ast` and never executed.

This is what the service and the CLI use on submitted (possibly hostile) source. A module may
contain, at top level, only:

  * docstrings / bare string literals, `pass`;
  * imports of our package under Triton's or our names: `import triton`, `import triton.language as
    tl`, `from triton import language as tl`, `from triton import jit, cdiv, next_power_of_2`,
    `from triton.language import constexpr, float16, ...`, the same with `compiler`;
    `from __future__ import annotations`;
  * `@jit` / `@triton.jit` / `@triton.jit(do_not_specialize=[...], ...)` function definitions
    (decorator arguments must be literals);
  * constants: `NAME = <literal>` (anything `ast.literal_eval` accepts) or
    `NAME = tl.constexpr(<literal>)` (`NAME: tl.constexpr = <literal>` binds the plain literal, as
    Python does; kernels read only constexpr globals, as in Triton: frontend/global_names.py).

Anything else (other imports, calls, classes, plain functions, `if __name__ == ...`, ...) raises
`CompilationError` naming the line. Inside kernels, names and attributes with leading
underscores and calls to Python's reflective/IO builtins (open, eval, exec, getattr, ...) are refused
too, before the front end sees them; the front end itself only calls tl builtins, @jit functions
and a small allow-list of Python builtins.
"""
from __future__ import annotations

import ast
import io
import sys
import tokenize
import types
from typing import Any

from .. import language as tl
from ..errors import CompilationError
from ..frontend.limits import MAX_NESTING, MAX_SOURCE_CHARS, literal_problem
from ..ir import Loc
from ..language import dtypes
from .jit import JITFunction

_JIT_OPTIONS = {"do_not_specialize", "noinline", "debug", "autotune_key", "do_not_specialize_on_alignment"}
_PACKAGE_NAMES = {"triton", "compiler"}
_PACKAGE_EXPORTS = {"jit", "language", "cdiv", "next_power_of_2"}
_DENIED_BUILTINS = {
    "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "hasattr", "globals",
    "locals", "vars", "input", "breakpoint", "memoryview", "type", "object", "super", "help", "exit", "quit",
    "classmethod", "staticmethod", "property", "dir",
}


def package():
    """The `compiler` package itself, which `import triton` (or `import compiler`) binds in
    submitted source. The package imports this module, so importing it here would be a circle;
    it is always in sys.modules before any of its submodules runs."""
    return sys.modules[__name__.partition(".")[0]]


def _loc(filename: str, node: ast.AST | None, name: str = ""):
    if node is None:
        return Loc(filename, 1, 0, name)
    return Loc(filename, getattr(node, "lineno", 1), getattr(node, "col_offset", 0), name)


class _Module:
    def __init__(self, source: str, filename: str, strict: bool = True):
        self.compiler, self.tl = package(), tl
        self.source, self.filename = source, filename
        self.lines = source.splitlines()
        self.globals: dict[str, Any] = {}
        self.jit_defs: list[tuple[ast.FunctionDef, dict]] = []
        self.strict = strict
        self.ignored: list[int] = []     # non-strict mode: line numbers of skipped statements

    def line(self, node) -> str | None:
        n = getattr(node, "lineno", None)
        if n is None or not 1 <= n <= len(self.lines):
            return None
        return self.lines[n - 1]

    def error(self, node, msg: str) -> CompilationError:
        return CompilationError(msg, _loc(self.filename, node), self.line(node))

    # -- imports ----------------------------------------------------------------------------------
    def _module_for(self, dotted: str, node) -> Any:
        parts = dotted.split(".")
        if parts[0] not in _PACKAGE_NAMES:
            raise self.error(node, f"import of '{dotted}' is not allowed in submitted source: only triton / "
                                   "triton.language (or compiler / compiler.language) can be imported")
        if parts[1:] == []:
            return self.compiler
        if parts[1:] == ["language"]:
            return self.tl
        if parts[1:] == ["language", "math"]:
            return self.tl.math
        raise self.error(node, f"import of '{dotted}' is not supported: only triton and triton.language are")

    def do_import(self, node: ast.Import):
        for alias in node.names:
            mod = self._module_for(alias.name, node)
            if alias.asname:
                self.globals[alias.asname] = mod
            else:  # `import triton.language` binds `triton`
                self.globals[alias.name.split(".")[0]] = self.compiler

    def do_import_from(self, node: ast.ImportFrom):
        if node.level:
            raise self.error(node, "relative imports are not allowed in submitted source")
        if node.module == "__future__":
            if any(a.name != "annotations" for a in node.names):
                raise self.error(node, "only `from __future__ import annotations` is allowed")
            return
        mod = self._module_for(node.module or "", node)
        for alias in node.names:
            if alias.name == "*":
                raise self.error(node, "`import *` is not allowed in submitted source")
            if mod is self.compiler:
                if alias.name not in _PACKAGE_EXPORTS:
                    raise self.error(node, f"'{alias.name}' cannot be imported from triton here (allowed: "
                                           f"{', '.join(sorted(_PACKAGE_EXPORTS))})")
                obj = getattr(self.compiler, alias.name)
            else:
                obj = self._tl_attr(mod, alias.name, node)
            self.globals[alias.asname or alias.name] = obj

    def _tl_attr(self, mod, name: str, node):
        if name.startswith("_") or not hasattr(mod, name):
            raise self.error(node, f"triton.language has no public name '{name}'")
        obj = getattr(mod, name)
        if not _safe_tl_object(obj, self.tl):
            raise self.error(node, f"'{name}' of triton.language is not available to submitted kernels")
        return obj

    # -- constants --------------------------------------------------------------------------------
    def literal(self, node, what: str):
        value = self._literal(node, what)
        problem = literal_problem(value.value if isinstance(value, self.tl.constexpr) else value)
        if problem:
            raise self.error(node, f"{what}: {problem}")
        return value

    def _literal(self, node, what: str):
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1:
            callee = self.resolve(node.func)
            if callee is self.tl.constexpr:
                try:
                    return self.tl.constexpr(ast.literal_eval(node.args[0]))
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    pass
        raise self.error(node, f"{what} must be a literal (a number, string, tuple... or tl.constexpr(<literal>)) "
                               "in submitted source")

    def resolve(self, node) -> Any:
        """The object an expression of names and attributes denotes (None when unknown)."""
        if isinstance(node, ast.Name):
            return self.globals.get(node.id)
        if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
            base = self.resolve(node.value)
            if isinstance(base, types.ModuleType) and base.__name__.startswith("compiler"):
                return getattr(base, node.attr, None)
        return None

    # -- decorators -------------------------------------------------------------------------------
    def jit_options(self, fn: ast.FunctionDef) -> dict:
        if not fn.decorator_list:
            raise self.error(fn, f"function '{fn.name}' is not a @jit kernel: only @triton.jit functions are "
                                 "allowed at module level in submitted source")
        decs = fn.decorator_list
        if not self.strict:   # ignore @autotune / @heuristics around the @jit (never evaluated)
            decs = [d for d in decs if self.resolve(d.func if isinstance(d, ast.Call) else d) is self.compiler.jit] \
                or decs
        if len(decs) != 1:
            raise self.error(decs[0], "only a single @triton.jit decorator is allowed in submitted source "
                                      "(autotuning configs belong in the job's search space)")
        dec = decs[0]
        call = dec if isinstance(dec, ast.Call) else None
        target = self.resolve(call.func if call else dec)
        if target is not self.compiler.jit:
            raise self.error(dec, "only @triton.jit (or @jit) decorators are allowed in submitted source "
                                  "(autotuning configs belong in the job's search space)")
        opts: dict = {}
        if call:
            if call.args:
                raise self.error(call, "@triton.jit(...) takes keyword arguments only")
            for kw in call.keywords:
                if kw.arg not in _JIT_OPTIONS:
                    raise self.error(kw.value, f"unsupported @jit option {kw.arg!r}")
                opts[kw.arg] = self.literal(kw.value, f"@jit option {kw.arg}")
        return opts

    # -- kernel bodies ----------------------------------------------------------------------------
    def check_body(self, fn: ast.FunctionDef):
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        params |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        roots = [fn.args, *fn.body] + ([fn.returns] if fn.returns is not None else [])   # not the decorators
        for node in (n for r in roots for n in ast.walk(r)):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise self.error(node, f"attribute '{node.attr}' is not accessible in a kernel")
            if isinstance(node, ast.Name):
                if node.id.startswith("__"):
                    raise self.error(node, f"name '{node.id}' is not allowed in a kernel")
                if node.id in _DENIED_BUILTINS and node.id not in self.globals and node.id not in params:
                    raise self.error(node, f"'{node.id}' is not available inside a kernel")
            if isinstance(node, ast.arg) and node.arg.startswith("__"):
                raise self.error(node, f"name '{node.arg}' is not allowed")
            if isinstance(node, ast.keyword) and node.arg and node.arg.startswith("__"):
                raise self.error(node.value, f"keyword '{node.arg}' is not allowed")
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef,
                                 ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith, ast.Yield,
                                 ast.YieldFrom)):
                raise self.error(node, f"{type(node).__name__.lower()} statements are not allowed in a kernel")
            if isinstance(node, ast.Attribute):
                self._check_chain(node)

    def _check_chain(self, node: ast.Attribute):
        """`triton.X` / `tl.X` chains must name things of ours that kernels may use."""
        chain = []
        cur = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name):
            return
        obj = self.globals.get(cur.id)
        if obj is None:
            return
        if getattr(obj, "fn_ast", None) is not None and hasattr(obj, "constexpr_names"):
            raise self.error(node, f"attributes of the @jit function '{cur.id}' are not accessible in a kernel")
        for attr in reversed(chain):
            if obj is self.compiler:
                if attr not in _PACKAGE_EXPORTS:
                    raise self.error(node, f"triton.{attr} is not available in submitted kernels")
                obj = getattr(obj, attr)
            elif isinstance(obj, types.ModuleType) and obj.__name__.startswith("compiler.language"):
                obj = self._tl_attr(obj, attr, node)
            else:
                return  # a dtype, a builtin...: the front end checks the rest

    # -- the module -------------------------------------------------------------------------------
    def run(self):
        if len(self.source) > MAX_SOURCE_CHARS:
            raise CompilationError(f"source is too long ({len(self.source)} characters, at most {MAX_SOURCE_CHARS})",
                                   _loc(self.filename, None), None)
        try:
            tree = ast.parse(self.source, filename=self.filename)
        except SyntaxError as e:
            raise CompilationError(f"invalid syntax: {e.msg}", Loc(self.filename, e.lineno or 1, (e.offset or 1) - 1),
                                   (e.text or "").rstrip("\n") or None) from None
        except (RecursionError, MemoryError) as e:
            # CPython's parser gives up at about 3000 levels of nesting (a RecursionError, or a
            # MemoryError from its own stack): say where
            deepest = _deepest_line(self.source)
            if deepest is None:
                if isinstance(e, MemoryError):
                    raise
                raise CompilationError("the source nests too deeply to parse", _loc(self.filename, None), None) \
                    from None
            levels, line, col = deepest
            raise CompilationError(f"the source nests too deeply to parse (about {levels} levels here; the limit is "
                                   f"{MAX_NESTING})", Loc(self.filename, line, col),
                                   self.lines[line - 1] if 0 < line <= len(self.lines) else None) from None
        except ValueError as e:
            raise CompilationError(f"cannot parse the source: {e}", _loc(self.filename, None), None) from None
        self.check_nesting(tree)
        for node in tree.body:
            if self.strict:
                self.statement(node)
                continue
            before = dict(self.globals)
            n_defs = len(self.jit_defs)
            try:
                self.statement(node)
            except CompilationError:
                # skipped, never executed: whatever it would have bound stays undefined for kernels
                self.globals = before
                del self.jit_defs[n_defs:]
                self.ignored.append(node.lineno)
        return self.finish()

    def check_nesting(self, tree: ast.AST) -> None:
        """Refuse syntax nested more than MAX_NESTING levels, at the statement where it is (before
        anything recursive — `literal_eval`, `unparse`, the code generator — walks the tree)."""
        level, depth = [tree], 0
        while level:                  # level by level: the cheap way to the depth (most sources)
            if depth > MAX_NESTING:
                break
            depth += 1
            below = []
            for node in level:
                for field in node._fields:
                    v = getattr(node, field, None)
                    if isinstance(v, list):
                        below.extend(x for x in v if isinstance(x, ast.AST))
                    elif isinstance(v, ast.AST):
                        below.append(v)
            level = below
        else:
            return
        stack = [(tree, 0, None)]     # too deep: find where
        while stack:
            node, depth, statement = stack.pop()
            if isinstance(node, ast.stmt):
                statement = node
            if depth > MAX_NESTING:
                raise self.error(statement, f"the code nests more than {MAX_NESTING} levels deep in this statement "
                                            "(nested expressions, blocks and elif chains count); simplify it")
            stack.extend((child, depth + 1, statement) for child in ast.iter_child_nodes(node))

    def statement(self, node):
        """Check one top-level statement and bind what it defines (raises CompilationError)."""
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return
        if isinstance(node, ast.Pass):
            return
        if isinstance(node, ast.Import):
            self.do_import(node)
        elif isinstance(node, ast.ImportFrom):
            self.do_import_from(node)
        elif isinstance(node, ast.FunctionDef):
            self.jit_defs.append((node, self.jit_options(node)))
            self.globals[node.name] = None   # placeholder, filled below
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise self.error(node, "only `NAME = <literal>` assignments are allowed at module level")
            self._bind_const(node.targets[0], self.literal(node.value, f"module-level constant "
                                                                         f"'{node.targets[0].id}'"))
        elif isinstance(node, ast.AnnAssign):
            if not isinstance(node.target, ast.Name) or node.value is None:
                raise self.error(node, "only `NAME: type = <literal>` annotated assignments are allowed")
            # as in Python (and Triton), the annotation does not change the value: `N: tl.constexpr = 4`
            # binds a plain 4, which kernels may not read (write `N = tl.constexpr(4)`)
            self._bind_const(node.target, self.literal(node.value, f"module-level constant '{node.target.id}'"))
        else:
            kind = type(node).__name__
            what = {"Expr": "expression statements (calls)", "ClassDef": "classes", "If": "if statements",
                    "AsyncFunctionDef": "async functions", "For": "loops", "While": "loops", "With": "with blocks",
                    "Try": "try blocks", "Delete": "del statements", "Global": "global statements",
                    "AugAssign": "augmented assignments"}.get(kind, f"{kind} statements")
            raise self.error(node, f"{what} are not allowed at module level in submitted source (only triton "
                                   "imports, @triton.jit functions and literal constants)")

    def finish(self):
        made = {}
        kept = []
        for fn, opts in self.jit_defs:
            try:
                defaults = self._defaults(fn)
            except CompilationError:
                if self.strict:
                    raise
                self.globals.pop(fn.name, None)
                self.ignored.append(fn.lineno)
                continue
            kept.append((fn, opts))
            src = "\n".join(self.lines[fn.lineno - 1:fn.end_lineno]) + "\n"
            fn_ast = ast.parse(src).body[0]
            ast.increment_lineno(fn_ast, fn.lineno - 1)
            jf = JITFunction.from_ast(fn.name, src, fn_ast, self.filename, fn.lineno, self.globals, defaults, **opts)
            made[fn.name] = jf
        self.globals.update(made)
        self.jit_defs = kept
        for fn, _ in self.jit_defs:
            self.check_body(fn)
        return made

    def _defaults(self, fn: ast.FunctionDef) -> dict:
        defaults = {}
        pos = fn.args.posonlyargs + fn.args.args
        for arg, d in zip(pos[len(pos) - len(fn.args.defaults):], fn.args.defaults):
            if isinstance(d, ast.Name) and d.id in self.globals and _is_literal_value(self.globals[d.id], self.tl):
                defaults[arg.arg] = self.globals[d.id]          # a module-level constant
            else:
                defaults[arg.arg] = self.literal(d, f"default value of parameter '{arg.arg}'")
        return defaults

    def _bind_const(self, target: ast.Name, value):
        if target.id.startswith("__"):
            raise self.error(target, f"name '{target.id}' is not allowed")
        if target.id in self.globals and self.globals[target.id] is None:
            raise self.error(target, f"'{target.id}' is already a @jit function")
        self.globals[target.id] = value


_OPERATOR_WORDS = {"not", "and", "or", "if", "else", "lambda", "await", "in", "is"}
_NOT_NESTING = {",", ":", ";", ")", "]", "}", "=", "->"}


def _deepest_line(source: str) -> tuple[int, int, int] | None:
    """(estimated levels, line, column) of the logical line that nests deepest, from its tokens:
    operators, brackets and operator words on the line, plus the `elif`s that chain up to it.
    None when no line comes near the parser's limit (then a MemoryError was a real one)."""
    best = None
    chains: dict[int, int] = {}     # indentation column → elifs in a row
    count, start, at_start = 0, (1, 0), True
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if best is None or count > best[0]:
                    best = (count, *start)
                count, at_start = 0, True
                continue
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if at_start:
                at_start = False
                start = tok.start
                col = tok.start[1]
                chains = {c: n for c, n in chains.items() if c <= col}
                chains[col] = chains.get(col, 0) + 1 if tok.string == "elif" else 0
                count = chains[col]
            if (tok.type == tokenize.OP and tok.string not in _NOT_NESTING) or \
                    (tok.type == tokenize.NAME and tok.string in _OPERATOR_WORDS):
                count += 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    if best is None or best[0] < 1000:
        return None
    return best


def _is_literal_value(v, tl) -> bool:
    if isinstance(v, tl.constexpr):
        v = v.value
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return True
    if isinstance(v, (tuple, list)):
        return all(_is_literal_value(x, tl) for x in v)
    return False


def _safe_tl_object(obj, tl) -> bool:
    if hasattr(obj, "__blocktune_builtin__"):
        return True
    if isinstance(obj, (dtypes.dtype, dtypes.block_type)):
        return True
    if obj is tl.math:
        return True
    if obj in (tl.constexpr, tl.range, tl.static_range, tl.tensor, dtypes.dtype, dtypes.pointer_type,
               dtypes.block_type):
        return True
    return False


def load_source(source: str, filename: str = "<submitted>", strict: bool = True, ignored: list | None = None) -> dict:
    """Every @jit function of `source`, by name (parsed, never executed).

    `strict=False` (the CLI on a user's own file) skips — never executes — top-level statements
    that strict mode refuses (`import torch`, `if __name__ == "__main__":`, helper functions,
    @autotune around a @jit...): what they would define is simply not visible to kernels. Their
    line numbers are appended to `ignored`. Kernel bodies are checked the same in both modes.
    """
    if not isinstance(source, str):
        raise TypeError("source must be a str")
    m = _Module(source, filename, strict)
    out = m.run()
    if ignored is not None:
        ignored.extend(m.ignored)
    return out


def jit_from_source(source: str, name: str, filename: str = "<submitted>", strict: bool = True):
    """The @jit function `name` of `source` (see the module doc for what source may contain)."""
    kernels = load_source(source, filename, strict)
    if name not in kernels:
        avail = ", ".join(sorted(kernels)) or "none"
        raise CompilationError(f"no @jit function named '{name}' in {filename} (found: {avail})", None, None)
    return kernels[name]


__all__ = ["jit_from_source", "load_source", "MAX_SOURCE_CHARS"]
