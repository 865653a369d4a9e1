"""Python AST → block IR: one visitor over a kernel's syntax tree.

The kernel is never executed as Python here. Names resolve to front-end values: an `ir.Value`
(a runtime scalar or block), or a compile-time Python object (numbers, dtypes, `tl` builtins,
modules, `@jit` functions, which are inlined at their call sites). Control flow on compile-time
conditions is resolved while generating; on runtime values it becomes `if`/`for`/`while` ops whose
loop-carried values are the names a body re-assigns.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator
import os
import types
from typing import Any

from .. import ir
from ..errors import CompilationError, CompileTimeAssertionFailure, SourceNode
from ..language import core as tl_core
from ..language import dtypes as T
from ..language.core import constexpr
from ..language.dtypes import block_type, dtype
from . import semantic as S
from .aggregate_parts import AggregateParts, has_runtime_parts
from .block_pointers import Composite, TensorDescriptor
from .compile_time import AggregatePythonFunction, CompileTimeSemantic, is_compiler_builtin
from .builtins import (BUILTINS, DescriptorMethod, TensorMethod, composite_attribute, tensor_attribute,
                       tensor_has_attribute)
from .global_names import global_problem
from .device_calls import device_call
from .lifted import is_lifted, lift, unlift
from .limits import (MAX_FRONTEND_STEPS, MAX_INLINE_DEPTH, MAX_STATIC_RANGE_TRIPS, binop_problem,
                     format_spec_problem, text_problem, value_problem)
from .semantic import SemanticError, is_value

_MISSING = object()


class _Return(Exception):
    """Not an error: unwinds statement generation after a `return` inside an inlined function."""


class FunctionScope:
    """What one function body (the kernel, or an inlined callee) sees while it is generated."""

    def __init__(self, jit_fn, local: dict):
        self.jit_fn = jit_fn
        self.local = local
        self.returned = _MISSING
        self.return_node = None     # the `return` statement that set `returned`
        # names a plain assignment gave a Python bool (`a = False`): Triton holds them as int1
        # tensors, so an `if` on one is a runtime `if` there (visit_If)
        self.assigned_bools: set[str] = set()

    def lookup_global(self, name):
        g = self.jit_fn.globals
        if name in g:
            return g[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        return _MISSING


class CodeGenerator(ast.NodeVisitor):
    builtin_rules = BUILTINS    # tl builtin name → its rule (builtins.py); compiler/language calls them

    def __init__(self, jit_fn, builder: S.Builder, local: dict, depth: int = 0):
        self.fn = jit_fn
        self.b = builder
        self.scope = FunctionScope(jit_fn, local)
        self.depth = depth
        self._source_lines = (jit_fn.src or "").splitlines()

    def returned_value(self):
        """What the function's statements returned (None: nothing)."""
        return None if self.scope.returned is _MISSING else self.scope.returned

    # -- errors and locations -----------------------------------------------------------------
    def loc(self, node) -> ir.Loc:
        line = getattr(node, "lineno", self.fn.first_lineno)
        col = getattr(node, "col_offset", 0) + getattr(self.fn, "col_offset_shift", 0)
        return ir.Loc(self.fn.filename, line, col, self.fn.__name__)

    def source_line(self, node) -> str | None:
        line = getattr(node, "lineno", None)
        if line is None:
            return None
        idx = line - self.fn.first_lineno
        if 0 <= idx < len(self._source_lines):
            shift = getattr(self.fn, "col_offset_shift", 0)
            return " " * shift + self._source_lines[idx]
        return None

    def error(self, node, message, cls=CompilationError, within=None) -> CompilationError:
        return cls(message, self.loc(node), self.source_line(node), self.fn.src, self.source_node(node), within)

    def source_node(self, node) -> SourceNode:
        """Triton's `CompilationError.node`: the position in the function's own source."""
        return SourceNode(getattr(node, "lineno", self.fn.first_lineno) - self.fn.first_lineno + 1,
                          getattr(node, "col_offset", 0))

    def visit(self, node):
        saved = self.b.loc
        if hasattr(node, "lineno"):
            self.b.loc = self.loc(node)
        self.b.steps += 1
        try:
            if self.b.steps > MAX_FRONTEND_STEPS:
                raise self.error(node, f"compile-time evaluation of the kernel takes more than {MAX_FRONTEND_STEPS} "
                                       "steps (unrolled tl.static_range loops or inlined @jit calls repeat too much); "
                                       "refusing to compile it")
            # NodeVisitor.visit's dispatch without its frame: deep kernels hit the recursion limit later
            result = getattr(self, "visit_" + node.__class__.__name__, self.generic_visit)(node)
            if result is not None and not isinstance(result, ir.Value):
                problem = value_problem(result)
                if problem:
                    raise self.error(node, problem)
            return result
        except (CompilationError, _Return):
            raise
        except SemanticError as exc:  # the cause is the bare message (as in Triton)
            raise self.error(node, exc.described()) from _surface_cause(exc)
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, AttributeError, AssertionError,
                OverflowError) as exc:
            raise self.error(node, f"{type(exc).__name__}: {exc}") from _surface_cause(exc, bare=False)
        except RecursionError:
            # nested expressions and @jit calls (inlined here) add up on the Python stack: refuse at
            # the deepest node that still has room to say so
            raise self.error(node, "the kernel nests too deeply (nested expressions, blocks and @jit calls "
                                   "add up); simplify it") from None
        finally:
            self.b.loc = saved

    def generic_visit(self, node):
        raise self.error(node, f"unsupported Python construct in a kernel: {type(node).__name__}")

    # -- statements ---------------------------------------------------------------------------
    def visit_stmts(self, stmts: list):
        """Generate a statement list. An `if` that returns on some path takes the statements after
        it into each branch that can fall through, so that every `if` holding a `return` ends its
        function (the branches of a runtime `if` are regions; they cannot jump past its end)."""
        for i, stmt in enumerate(stmts):
            rest = stmts[i + 1:]
            if isinstance(stmt, ast.If) and rest and _contains_return(stmt):
                body = stmt.body if _always_returns(stmt.body) else stmt.body + rest
                orelse = stmt.orelse if _always_returns(stmt.orelse) else stmt.orelse + rest
                self.visit(ast.copy_location(ast.If(test=stmt.test, body=body, orelse=orelse), stmt))
                return
            self.visit(stmt)
            if self.scope.returned is not _MISSING:
                return

    def visit_FunctionDef(self, node):
        self.visit_stmts(node.body)

    def visit_Pass(self, node):
        pass

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        if isinstance(node.value, ast.Call):
            node.value.result_unused = True    # for @must_use_result functions (visit_Call)
        value = self.visit(node.value)
        target = self._hinted_name(node.value)
        if target is not None and is_value(value):
            # Triton attaches these hints to the value itself: `tl.multiple_of(ptrs, 16)` as a
            # statement (tutorial 08), or nested (`tl.max_contiguous(tl.multiple_of(offs, 1024),
            # 1024)`), still informs later uses of `ptrs`
            self.assign(target, value)

    def _hinted_name(self, expr):
        """The variable a statement of (nested) hint calls is about, or None."""
        while isinstance(expr, ast.Call) and expr.args and \
                getattr(self.visit(expr.func), "__blocktune_builtin__", None) in _IN_PLACE_HINTS:
            expr = expr.args[0]
            if isinstance(expr, ast.Name):
                return expr
        return None

    def visit_Return(self, node):
        value = None if node.value is None else self.visit(node.value)
        if self.depth == 0 and value is not None:
            raise self.error(node, "a kernel cannot return a value; store results through a pointer")
        self.scope.returned = value
        self.scope.return_node = node

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, lift(value.value if isinstance(value, constexpr) else value))
            if isinstance(target, ast.Name) and type(value) is bool:
                self.scope.assigned_bools.add(target.id)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return
        value = self.visit(node.value)
        ann = self.visit(node.annotation)
        if ann is constexpr or ann == "constexpr":
            if is_value(value):
                raise self.error(node, "a tl.constexpr variable needs a compile-time value")
            value = unlift(value.value if isinstance(value, constexpr) else value)
        else:
            value = lift(value.value if isinstance(value, constexpr) else value)
        self.assign(node.target, value)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "augmented assignment works on names only")
        current = self.visit(ast.copy_location(ast.Name(id=node.target.id, ctx=ast.Load()), node.target))
        value = self.binop(node, node.op, current, self.visit(node.value))
        self.assign(node.target, lift(value))

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            if isinstance(value, constexpr):
                value = value.value
            self.scope.local[target.id] = value
            self.scope.assigned_bools.discard(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)):
                raise self.error(target, f"cannot unpack {self._describe(value)} into {len(target.elts)} names")
            starred = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
            if starred:            # `first, *rest = values`: rest gets a list, as in Python
                i = starred[0]
                after = len(target.elts) - i - 1
                if len(starred) > 1 or len(value) < len(target.elts) - 1:
                    raise self.error(target, f"cannot unpack {len(value)} values into {len(target.elts)} names")
                value = [*value[:i], list(value[i:len(value) - after]), *value[len(value) - after:]]
                target_elts = [t.value if isinstance(t, ast.Starred) else t for t in target.elts]
            elif len(value) != len(target.elts):
                raise self.error(target, f"cannot unpack {len(value)} values into {len(target.elts)} names")
            else:
                target_elts = target.elts
            for t, v in zip(target_elts, value):
                self.assign(t, v)
        else:
            raise self.error(target, "only names and tuples of names can be assigned to in a kernel "
                                     "(write through pointers with tl.store)")

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        msg = self.text(node.msg, self.visit(node.msg)) if node.msg is not None else ""
        if is_value(cond):
            self.b.create("assert", [S.to_bool(self.b, cond)], [], {"message": msg})
        elif not cond:
            raise self.error(node, f"static assertion failed: {msg}", CompileTimeAssertionFailure)

    def visit_If(self, node):
        cond = self.visit(node.test)
        if not is_value(cond) and self._runtime_if_in_triton(node, cond):
            cond = S.to_tensor(self.b, bool(cond))
        if not is_value(cond):
            self.visit_stmts(node.body if cond else node.orelse)
            return
        if cond.is_block and cond.type.numel != 1:  # a 1-element block is unsplat, as in Triton
            raise self.error(node.test, f"`if` needs a scalar condition, got a block of shape {list(cond.shape)}; use tl.where")
        cond = S.to_bool(self.b, S.unsplat(self.b, cond))
        self._runtime_if(node, cond)

    def _runtime_if_in_triton(self, node, cond) -> bool:
        """Whether Triton generates this `if` at run time although blocktune knows its condition: a
        variable assigned a bool (`a = False`) is an int1 tensor in Triton. That only shows where
        the branch not taken returns and the taken one falls through: Triton's function then
        returns a value on every path (undefined on the taken one, _poison_like)."""
        if not (isinstance(node.test, ast.Name) and node.test.id in self.scope.assigned_bools):
            return False
        taken, dropped = (node.body, node.orelse) if cond else (node.orelse, node.body)
        return not _always_returns(taken) and _contains_return(ast.Module(body=dropped, type_ignores=[]))

    def _poison_like(self, value, block):
        """Triton's `ub.poison`: what a path that falls off the end of a function returns where
        another path returns `value` — undefined (a constant marked poison: LLVM's poison on the
        GPU, zero in interpret mode), generated into `block`."""
        if isinstance(value, tuple):
            return tuple(self._poison_like(v, block) for v in value)
        if is_value(value):
            ty = value.type
        elif isinstance(value, (bool, int, float)):
            ty = S.literal_type(value)
        else:
            return None
        saved, self.b.block = self.b.block, block
        try:
            return self.b.value("const", [], ty, value=0, poison=True)
        finally:
            self.b.block = saved

    def _runtime_if(self, node, cond):
        before = dict(self.scope.local)
        outer_block = self.b.block

        def run_branch(stmts):
            # each branch changes its own copy of an aggregate (its methods may change it in place)
            self.scope.local = {n: _branch_copy(v) for n, v in before.items()}
            self.scope.returned = _MISSING
            block = ir.Block()
            self.b.block = block
            self.visit_stmts(stmts)
            result = (block, self.scope.local, self.scope.returned, self.scope.return_node)
            self.b.block = outer_block
            return result

        then_block, then_scope, then_ret, _ = run_branch(node.body)
        else_block, else_scope, else_ret, else_return = run_branch(node.orelse)
        self.scope.local = dict(before)
        self.scope.returned = _MISSING
        composites = self._spread_composites(node, then_scope, else_scope, before)

        # values that differ between the branches (or from before) flow out of the `if`
        names = [n for n in then_scope if n in else_scope and
                 (then_scope[n] is not else_scope[n] or then_scope[n] is not before.get(n, _MISSING))]
        names = [n for n in names if is_value(then_scope[n]) or is_value(else_scope[n])
                 or then_scope[n] != else_scope[n]]
        pairs = [(then_scope[n], else_scope[n]) for n in names]
        ret_pair = None
        if then_ret is not _MISSING or else_ret is not _MISSING:
            # visit_stmts moved what follows the `if` into its branches: a branch that falls
            # through reaches the end of the function, which returns None
            then_ret = None if then_ret is _MISSING else then_ret
            else_ret = None if else_ret is _MISSING else else_ret
            if then_ret is None and else_ret is not None:     # as Triton: the path that falls through
                then_ret = self._poison_like(else_ret, then_block)   # returns an undefined value
            elif else_ret is None and then_ret is not None:
                else_ret = self._poison_like(then_ret, else_block)
            if (then_ret is None) != (else_ret is None):
                raise self.error(node, "a function that returns a value on one path must return one on every path")
            ret_pair = (then_ret, else_ret)
            names, pairs, composites = [], [], {}   # nothing runs after this `if`: no variable flows out
        flat_pairs = list(pairs)
        ret_len = 0
        if ret_pair is not None:
            tr, er = ret_pair
            if isinstance(tr, tuple) != isinstance(er, tuple):
                raise self.error(node, "the branches return different numbers of values")
            tr_l, er_l = (list(tr), list(er)) if isinstance(tr, tuple) else ([tr], [er])
            if len(tr_l) != len(er_l):
                raise self.error(node, "the branches return different numbers of values")
            ret_len = len(tr_l)
            flat_pairs += list(zip(tr_l, er_l))
        yielded_then, yielded_else, types_ = [], [], []
        for i, (tv, ev) in enumerate(flat_pairs):
            what = names[i] if i < len(names) else "the return value"
            if tv is None and ev is None:
                types_.append(None)
                continue
            # a return value that does not match is the later `return`'s fault (where Triton reports it)
            at = else_return if what == "the return value" and else_return is not None else node
            tv, ev = self._unify_branch_values(at, what, tv, ev, then_block, else_block)
            yielded_then.append(tv)
            yielded_else.append(ev)
            types_.append(tv.type)
        then_block.ops.append(ir.Op("yield", yielded_then, [], loc=self.b.loc))
        else_block.ops.append(ir.Op("yield", yielded_else, [], loc=self.b.loc))
        op = self.b.create("if", [cond], [t for t in types_ if t is not None], regions=[then_block, else_block])
        results = iter(op.results)
        out = [None if t is None else next(results) for t in types_]
        for n, v in zip(names, out[:len(names)]):
            self.scope.local[n] = v
        if ret_pair is not None:
            rets = out[len(names):]
            self.scope.returned = tuple(rets) if isinstance(ret_pair[0], tuple) else rets[0]
        for n in set(before) - set(names):
            self.scope.local[n] = before[n]
        for n, template in composites.items():  # block pointers assigned in a branch: reassemble
            k = len(template.parts())
            self.scope.local[n] = template.with_parts([self.scope.local.pop(f"{n}.{i}") for i in builtins.range(k)])

    def _spread_composites(self, node, then_scope, else_scope, before) -> dict:
        """Block pointers / descriptors / aggregates that differ between the branches flow out of
        the `if` as their scalar parts (`name.0`, …); returns name → template to reassemble them from."""
        out = {}
        for n in [n for n in then_scope if n in else_scope]:
            tv, ev = then_scope[n], else_scope[n]
            if tv is ev or not (_has_parts(tv) or _has_parts(ev)):
                continue
            tv, ev = _slot_template(tv), _slot_template(ev)
            if not (_has_parts(tv) and _has_parts(ev)) or tv.structure() != ev.structure():
                raise self.error(node, f"`{n}` is a {tv!r} in one branch and {ev!r} in the other")
            if isinstance(tv, AggregateParts) and tl_core.is_aggregate(before.get(n)) and \
                    _same_parts(tv.parts(), ev.parts(), _slot_template(before[n]).parts()):
                then_scope[n] = else_scope[n] = before[n]     # the branches' copies, both unchanged
                continue
            for scope, v in ((then_scope, tv), (else_scope, ev)):
                del scope[n]
                scope.update({f"{n}.{i}": p for i, p in enumerate(v.parts())})
            out[n] = tv
        return out

    def _unify_branch_values(self, node, what, tv, ev, then_block, else_block):
        """Give a value assigned in both branches one type, turning constants into tensors."""
        def materialize(v, block, like):
            saved = self.b.block
            self.b.block = block
            try:
                if is_value(v):
                    if like is not None and v.type != like:
                        if v.shape == S.shape_of(like):
                            v = S.cast(self.b, v, S.scalar_of(like))
                        elif not v.is_block and isinstance(like, block_type):
                            v = S.splat(self.b, S.cast(self.b, v, like.element_ty), like.shape)
                    return v
                return S.to_tensor(self.b, v, S.scalar_of(like) if like is not None else None) if like is None or not isinstance(like, block_type) \
                    else S.splat(self.b, S.to_tensor(self.b, v, like.element_ty), like.shape)
            finally:
                self.b.block = saved

        if not is_value(tv) and not is_value(ev):
            if not isinstance(tv, (bool, int, float)) or not isinstance(ev, (bool, int, float)):
                raise self.error(node, f"`{what}` gets different compile-time values in the two branches of a runtime if")
            ty = S.computation_type(S.literal_type(tv), False, S.literal_type(ev), False, False)
            return materialize(tv, then_block, ty), materialize(ev, else_block, ty)
        if not is_value(tv):
            return materialize(tv, then_block, ev.type), ev
        if not is_value(ev):
            return tv, materialize(ev, else_block, tv.type)
        if tv.type != ev.type:
            if S.scalar_of(tv.type).is_ptr() or S.scalar_of(ev.type).is_ptr():
                raise self.error(node, _branch_type_mismatch(what, tv.type, ev.type))
            if tv.shape == ev.shape:
                ty = S.computation_type(tv.dtype, False, ev.dtype, False, False)
                return materialize(tv, then_block, S._with_shape(ty, tv.shape)), materialize(ev, else_block, S._with_shape(ty, ev.shape))
            if what == "the return value":
                raise self.error(node, _branch_type_mismatch(what, tv.type, ev.type))
            raise self.error(node, f"`{what}` has type {tv.type} in the then-branch and {ev.type} in the else-branch")
        return tv, ev

    # -- loops ----------------------------------------------------------------------------------
    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "for ... else is not supported in kernels")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(it, "kernels loop only over range(...), tl.range(...) or tl.static_range(...)")
        fn = self.visit(it.func)
        if fn is not builtins.range and fn is not tl_core.range and fn is not tl_core.static_range:
            raise self.error(it, "kernels loop only over range(...), tl.range(...) or tl.static_range(...)")
        args, kwargs = self._range_arguments(it, fn)
        if fn is tl_core.static_range:
            bounds = [self._constexpr(it, a, "tl.static_range bounds") for a in args]
            trips = builtins.range(*bounds)
            if len(trips) > MAX_STATIC_RANGE_TRIPS:
                raise self.error(it, f"tl.static_range of {len(trips)} iterations is over the limit of "
                                     f"{MAX_STATIC_RANGE_TRIPS} unrolled iterations; use tl.range (a loop at run time)")
            for i in trips:
                self.assign(node.target, i)
                self.visit_stmts(node.body)
                if self.scope.returned is not _MISSING:
                    raise self.error(node, _RETURN_IN_LOOP)
            return
        if len(args) == 1:
            lb, ub, step = 0, args[0], 1
        elif len(args) == 2:
            (lb, ub), step = args, 1
        else:
            lb, ub, step = args
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a single name")
        if not is_value(step) and step == 0:
            raise self.error(it, "range step must not be zero")
        iv_type = T.int32
        for bound in (lb, ub, step):
            t = bound.dtype if is_value(bound) else S.literal_type(bound)
            if not t.is_int():
                raise self.error(it, f"range bounds must be integers, got {t}")
            if t.primitive_bitwidth == 64:
                iv_type = t
        attrs = {"num_stages": kwargs.get("num_stages")}
        if self._warp_specialize(it, kwargs.get("warp_specialize")):   # compiler/backend/warp_specialize.py
            attrs["warp_specialize"] = True
        if self._loop_flag(it, "disable_licm", kwargs.get("disable_licm")):
            attrs["disable_licm"] = True
        if not is_value(step) and step < 0:
            # `for` ops count upwards: walk j = 0, 1, … and derive the user's variable from it
            lb_t, ub_t = S.to_tensor(self.b, lb), S.to_tensor(self.b, ub)
            trips = S.floordiv(self.b, S.add(self.b, S.sub(self.b, lb_t, ub_t), -step - 1), -step)
            trips = S.minmax(self.b, "maximum", trips, 0)
            bounds = [S.cast(self.b, S.to_tensor(self.b, v), iv_type) for v in (0, trips, 1)]
            user_iv = node.target.id

            def body_fn(block, carried):
                self.scope.local[user_iv] = S.add(self.b, S.cast(self.b, lb_t, iv_type), S.mul(self.b, block.args[0], step))
                self._loop_body(node, block, carried)
            self._build_loop(node, "for", bounds, [iv_type], body_fn, attrs, iv_name=f"{user_iv}.count")
            return
        lb_v, ub_v, step_v = (S.cast(self.b, S.to_tensor(self.b, v), iv_type) for v in (lb, ub, step))
        body_fn = lambda block, carried: self._loop_body(node, block, carried)  # noqa: E731
        self._build_loop(node, "for", [lb_v, ub_v, step_v], [iv_type], body_fn, attrs, iv_name=node.target.id)

    def _range_arguments(self, it, fn) -> tuple[list, dict]:
        """The bounds of `range(...)`, `tl.range(...)` or `tl.static_range(...)` as Python's
        range takes them ([end], [start, end] or [start, end, step]), and the other options."""
        args = [self.visit(a) for a in it.args]
        kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
        if fn is builtins.range:
            if kwargs or not 1 <= len(args) <= 3:
                raise self.error(it, "range takes 1 to 3 positional arguments")
            return args, {}
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise self.error(it, f"tl.{fn.__name__}(...): {exc}") from None
        bound.apply_defaults()
        options = dict(bound.arguments)
        start, end, step = options.pop("arg1"), options.pop("arg2"), options.pop("step")
        bounds = [start] if end is None else [start, end]
        if step is not None:
            bounds = ([0] if end is None else []) + bounds + [step]
        return bounds, options

    def _warp_specialize(self, it, flag) -> bool:
        return self._loop_flag(it, "warp_specialize", flag)

    def _loop_flag(self, it, name, flag) -> bool:
        flag = flag.value if isinstance(flag, constexpr) else flag
        if is_value(flag):
            raise self.error(it, f"tl.range(..., {name}=...) must be a constexpr (True or False)")
        return bool(flag)

    def _loop_body(self, node, block, carried):
        self.visit_stmts(node.body)
        if self.scope.returned is not _MISSING:
            raise self.error(node, _RETURN_IN_LOOP)

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "while ... else is not supported in kernels")
        # Is the condition false at compile time? Evaluate it into a scratch block that is thrown
        # away: the real condition is built inside the loop (it may have side effects, e.g. a CAS).
        saved_block, saved_local = self.b.block, dict(self.scope.local)
        self.b.block = ir.Block()
        try:
            cond, _ = self._while_condition(node)
        finally:
            self.b.block, self.scope.local = saved_block, saved_local
        if not is_value(cond) and not cond:
            return
        carried_names = self._carried_names(node.body + [ast.Expr(node.test)])
        self._build_while(node, _CarriedSlots(self, node, carried_names))

    def _carried_names(self, stmts) -> list[str]:
        assigned = []
        for stmt in stmts:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id not in assigned:
                    assigned.append(sub.id)
                elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name) and sub.target.id not in assigned:
                    assigned.append(sub.target.id)
        # an aggregate the loop uses may be changed in place by its methods: carry its fields too
        for stmt in stmts:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and sub.id not in assigned and \
                        has_runtime_parts(self.scope.local.get(sub.id)):
                    assigned.append(sub.id)
        return [n for n in assigned if n in self.scope.local]

    def _initial_carried(self, node, names, forced_types, current):
        """Initial values of loop-carried names as tensors (constants become tensors)."""
        vals = []
        for n in names:
            v = current[n]
            if n in forced_types:
                ft = forced_types[n]
                if not is_value(v):
                    v = S.to_tensor(self.b, v, S.scalar_of(ft))
                if v.type != ft:
                    if isinstance(ft, block_type) and v.shape != ft.shape:
                        v = S.broadcast_to(self.b, S.cast(self.b, v, ft.element_ty), ft.shape)
                    else:
                        v = S.cast(self.b, v, S.scalar_of(ft))
            elif not is_value(v):
                if not isinstance(v, (bool, int, float)):
                    raise self.error(node, f"`{n}` is changed inside a runtime loop but holds {self._describe(v)}")
                v = S.to_tensor(self.b, v)
            vals.append(v)
        return vals

    def _build_loop(self, node, kind, bounds, iv_types, body_fn, attrs, iv_name):
        loop_var = node.target.id if isinstance(getattr(node, "target", None), ast.Name) else None
        slots = _CarriedSlots(self, node, [n for n in self._carried_names(node.body) if n not in (iv_name, loop_var)])
        names = slots.flat_names
        forced: dict[str, Any] = {}
        for attempt in builtins.range(4):
            inits = self._initial_carried(node, names, forced, slots.flatten(self.scope.local))
            before = dict(self.scope.local)
            outer = self.b.block
            body = ir.Block(iv_types + [v.type for v in inits], [iv_name] + names)
            self.b.block = body
            self.scope.local = dict(before)
            self.scope.local[iv_name] = body.args[0]
            slots.bind(self.scope.local, body.args[1:])
            try:
                body_fn(body, names)
                nexts = [slots.flatten(self.scope.local)[n] for n in names]
            finally:
                after_scope = self.scope.local
                self.b.block = outer
                self.scope.local = before
            mismatch = {}
            for n, init, nxt in zip(names, inits, nexts):
                nt = nxt.type if is_value(nxt) else S.literal_type(nxt)
                if nt != init.type:
                    mismatch[n] = self._loop_type(node, n, init.type, nt)
            if not mismatch:
                break
            if attempt == 3 or all(forced.get(n) == t for n, t in mismatch.items()):
                n, t = next(iter(mismatch.items()))
                raise self.error(node, f"loop-carried variable `{n}` has type {forced.get(n, inits[names.index(n)].type)} before the loop but {t} after one iteration; "
                                       f"initialize it with the type it keeps (e.g. tl.zeros(shape, dtype))")
            forced.update(mismatch)
        saved = self.b.block
        self.b.block = body
        yielded = []
        for init, nxt in zip(inits, nexts):
            v = S.to_tensor(self.b, nxt, S.scalar_of(init.type)) if not is_value(nxt) else nxt
            if v.type != init.type:
                v = S.cast(self.b, v, S.scalar_of(init.type))
            yielded.append(v)
        body.ops.append(ir.Op("yield", yielded, [], loc=self.b.loc))
        self.b.block = saved
        op = self.b.create(kind, list(bounds) + inits, [v.type for v in inits], attrs=attrs, regions=[body])
        slots.bind(self.scope.local, op.results)
        for n in list(after_scope):
            if n not in self.scope.local and n != iv_name:
                pass  # names first bound inside the loop are not visible after it (as in Triton)

    def _loop_type(self, node, name, init_ty, next_ty):
        """The type a loop-carried value must have so that it is the same on every iteration."""
        if S.shape_of(init_ty) != S.shape_of(next_ty):
            if not S.shape_of(init_ty):
                return next_ty  # a scalar accumulator that becomes a block: start with the splat
            raise self.error(node, f"loop-carried variable `{name}` changes shape from {list(S.shape_of(init_ty))} to {list(S.shape_of(next_ty))}")
        ty = S.computation_type(S.scalar_of(init_ty), False, S.scalar_of(next_ty), False, False) \
            if not (S.scalar_of(init_ty).is_ptr() or S.scalar_of(next_ty).is_ptr()) else next_ty
        return S._with_shape(ty, S.shape_of(init_ty))

    def _build_while(self, node, slots):
        names = slots.flat_names
        forced: dict[str, Any] = {}
        for attempt in builtins.range(4):
            inits = self._initial_carried(node, names, forced, slots.flatten(self.scope.local))
            before = dict(self.scope.local)
            outer = self.b.block
            cond_block = ir.Block([v.type for v in inits], names)
            body = ir.Block([v.type for v in inits], names)
            try:
                self.b.block = cond_block
                self.scope.local = dict(before)
                slots.bind(self.scope.local, cond_block.args)
                cond, disable_licm = self._while_condition(node)
                if not is_value(cond):
                    # nothing the condition reads changes in the loop: true now, it stays true
                    # (Triton builds the same endless loop; it cannot be left by return or break)
                    cond = S.to_tensor(self.b, True)
                if cond.is_block:
                    raise self.error(node.test, "`while` needs a scalar condition")
                cond = S.to_bool(self.b, cond)
                self.b.block = body
                self.scope.local = dict(before)
                slots.bind(self.scope.local, body.args)
                self.visit_stmts(node.body)
                if self.scope.returned is not _MISSING:
                    raise self.error(node, _RETURN_IN_LOOP)
                nexts = [slots.flatten(self.scope.local)[n] for n in names]
            finally:
                self.b.block = outer
                self.scope.local = before
            mismatch = {}
            for n, init, nxt in zip(names, inits, nexts):
                nt = nxt.type if is_value(nxt) else S.literal_type(nxt)
                if nt != init.type:
                    mismatch[n] = self._loop_type(node, n, init.type, nt)
            if not mismatch:
                break
            if attempt == 3:
                n, t = next(iter(mismatch.items()))
                raise self.error(node, f"loop-carried variable `{n}` changes type to {t} inside the while loop")
            forced.update(mismatch)
        cond_block.ops.append(ir.Op("condition", [cond] + list(cond_block.args), [], loc=self.b.loc))
        saved = self.b.block
        self.b.block = body
        yielded = [S.to_tensor(self.b, nxt, S.scalar_of(init.type)) if not is_value(nxt) else nxt
                   for init, nxt in zip(inits, nexts)]
        body.ops.append(ir.Op("yield", yielded, [], loc=self.b.loc))
        self.b.block = saved
        op = self.b.create("while", inits, [v.type for v in inits], regions=[cond_block, body],
                           attrs={"disable_licm": True} if disable_licm else {})
        slots.bind(self.scope.local, op.results)

    def _while_condition(self, node):
        """A while loop's condition and whether it asks for disable_licm (`tl.condition(c, ...)`)."""
        cond = self.visit(node.test)
        if not isinstance(cond, tl_core.condition):
            return cond, False
        disable_licm = cond.disable_licm.value if isinstance(cond.disable_licm, constexpr) else cond.disable_licm
        if is_value(disable_licm):
            raise self.error(node.test, "tl.condition(..., disable_licm=...) must be a constexpr (True or False)")
        return cond.condition, bool(disable_licm)

    def visit_Break(self, node):
        raise self.error(node, "break is not supported in kernels; fold the exit condition into a while loop")

    def visit_Continue(self, node):
        raise self.error(node, "continue is not supported in kernels; use an if around the loop body")

    # -- expressions ----------------------------------------------------------------------------
    def visit_Constant(self, node):
        return node.value

    def visit_Name(self, node):
        if node.id in self.scope.local:
            return self.scope.local[node.id]
        v = self.scope.lookup_global(node.id)
        if v is _MISSING:
            raise self.error(node, f"name '{node.id}' is not defined")
        problem = global_problem(node.id, v)
        if problem:
            raise self.error(node, problem)
        if isinstance(v, constexpr):
            return v.value
        return v

    def visit_ListComp(self, node):
        """`[f(v) for v in values if cond]` over a tuple or list known at compile time (unrolled)."""
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise self.error(node, "a comprehension in a kernel has exactly one `for`")
        loop = node.generators[0]
        items = self.visit(loop.iter)
        if is_value(items) or not isinstance(items, (tuple, list)):
            raise self.error(loop.iter, "a comprehension in a kernel iterates over a tuple or list known at compile "
                                        f"time, not {self._describe(items)}")
        outer = dict(self.scope.local)
        out = []
        try:
            for item in items:
                self.assign(loop.target, item)
                keep = True
                for cond in loop.ifs:
                    c = self.visit(cond)
                    if is_value(c):
                        raise self.error(cond, "a comprehension's `if` must be known at compile time")
                    keep = keep and bool(c)
                if keep:
                    out.append(self.visit(node.elt))
        finally:
            self.scope.local = outer     # the loop variable does not leak, as in Python 3
        return out

    visit_GeneratorExp = visit_ListComp

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Dict(self, node):
        """A dict with compile-time keys (e.g. tl.extern_elementwise's table of symbols)."""
        if any(k is None for k in node.keys):
            raise self.error(node, "** unpacking in a dict is not supported in kernels")
        keys = [self.visit(k) for k in node.keys]
        if any(is_value(k) for k in keys):
            raise self.error(node, "dict keys in a kernel must be compile-time constants")
        return dict(zip(keys, (self.visit(v) for v in node.values)))

    def visit_Attribute(self, node):
        if node.attr.startswith("_"):
            raise self.error(node, f"attribute '{node.attr}' is not accessible in a kernel")
        return self.attribute(node, self.visit(node.value), node.attr)

    def attribute(self, node, base, attr: str):
        if is_value(base):
            return tensor_attribute(self.b, base, attr)
        if tl_core.is_aggregate(base):
            return self._aggregate_attribute(node, base, attr)
        if isinstance(base, Composite):
            return composite_attribute(self.b, base, attr)
        if isinstance(base, (dtype, block_type)):
            return getattr(base, attr)
        if isinstance(base, types.ModuleType) or isinstance(base, type) or hasattr(base, "__blocktune_builtin__"):
            if not hasattr(base, attr):
                raise self.error(node, f"{getattr(base, '__name__', base)!s} has no attribute '{attr}'")
            v = getattr(base, attr)
            if getattr(base, "__blocktune_aggregate__", False) and \
                    isinstance(inspect.getattr_static(base, attr), (staticmethod, classmethod)) and not _is_jit(v):
                return AggregatePythonFunction(v)
            return v.value if isinstance(v, constexpr) else v
        if isinstance(base, tuple) and attr in ("index", "count"):
            return getattr(base, attr)
        if isinstance(base, tuple) and attr in getattr(type(base), "_fields", ()):
            return getattr(base, attr)       # a NamedTuple's field
        if _is_jit(base):
            return getattr(base, attr)
        if attr == "type" and is_lifted(base):
            return S.literal_type(base)              # Triton's scalar tensor's type (lifted.py)
        if attr == "type" and _compile_time(base):
            return tl_core.constexpr_type(base)      # Triton's type of a compile-time value
        if isinstance(base, (bool, int, float)) and attr == "dtype":
            return S.literal_type(base)   # Triton makes `value = 1` a scalar tensor: its dtype is int32
        if isinstance(base, (bool, int, float)) and attr != "type" and tensor_has_attribute(attr):
            # and its methods work on it: `acc = 0` ... `acc.to(tl.int64)`
            return tensor_attribute(self.b, S.to_tensor(self.b, base), attr)
        raise self.error(node, f"cannot take attribute '{attr}' of {self._describe(base)} in a kernel")

    def visit_Subscript(self, node):
        base = self.visit(node.value)
        idx = self.visit(node.slice)
        if is_value(base):
            items = idx if isinstance(idx, tuple) else (idx,)
            out, dim = base, 0
            for item in items:
                if item is None:
                    out = S.expand_dims(self.b, out, dim)
                    dim += 1
                elif isinstance(item, slice) and item == slice(None):
                    dim += 1
                else:
                    raise self.error(node, f"unsupported tensor index: {item!r}; blocks can only be indexed with "
                                           "`:` and `None` (e.g. x[:, None])")
            if dim > max(len(out.shape), 1) and base.is_block:
                raise self.error(node, f"too many indices for a {len(base.shape)}-D block")
            return out
        if isinstance(base, (tuple, list)):
            if is_value(idx):
                raise self.error(node, "tuples can only be indexed with compile-time integers")
            return base[idx]
        if tl_core.is_aggregate(base) and hasattr(type(base), "__getitem__"):
            return self.call(node, self._aggregate_attribute(node, base, "__getitem__"), [idx], {})
        raise self.error(node, f"cannot index {self._describe(base)}")

    def visit_Slice(self, node):
        parts = [None if p is None else self.visit(p) for p in (node.lower, node.upper, node.step)]
        if any(is_value(p) for p in parts):
            raise self.error(node, "slice bounds must be compile-time constants")
        return slice(*parts)

    def visit_BinOp(self, node):
        return self.binop(node, node.op, self.visit(node.left), self.visit(node.right))

    _BINOPS = {ast.Add: S.add, ast.Sub: S.sub, ast.Mult: S.mul, ast.Div: S.truediv,
               ast.FloorDiv: S.floordiv, ast.Mod: S.mod, ast.BitAnd: S.and_, ast.BitOr: S.or_,
               ast.BitXor: S.xor_, ast.LShift: S.shl, ast.RShift: S.shr}
    _PYOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
              ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b, ast.Pow: lambda a, b: a ** b}

    _GROWING = {ast.Pow: "pow", ast.LShift: "lshift", ast.Mult: "mul"}

    def binop(self, node, op, left, right):
        if not is_value(left) and not is_value(right):
            growing = self._GROWING.get(type(op))
            problem = growing and binop_problem(growing, left, right)
            if problem:
                raise self.error(node, problem)
            return self._PYOPS[type(op)](unlift(left), unlift(right))     # Python's errors name int, float
        if type(op) not in self._BINOPS:
            raise self.error(node, f"operator {type(op).__name__} is not supported on runtime values")
        return self._BINOPS[type(op)](self.b, left, right)

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        if isinstance(v, (tuple, list)) or tl_core.is_aggregate(v):
            # as Triton, which has no unary operators on its tuples (`not (0, 0)` is a mistake)
            op = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}[type(node.op)]
            raise self.error(node, f"unary operator `{op}` is not supported on {self._describe(v)} in a kernel")
        if not is_value(v):
            return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Not: lambda x: not x,
                    ast.Invert: lambda x: ~x}[type(node.op)](v)
        if isinstance(node.op, ast.USub):
            return S.neg(self.b, v)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            if v.is_block:
                raise self.error(node, "`not` on a block is ambiguous; use `x == 0` or `~x`")
            return S.logical_not(self.b, v)
        return S.invert(self.b, v)

    _CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}

    def visit_Compare(self, node):
        left = self.visit(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self.visit(comp)
            if isinstance(op, (ast.Is, ast.IsNot)):
                if is_value(left) or is_value(right):
                    if right is None or left is None:
                        r = isinstance(op, ast.IsNot)
                    else:
                        raise self.error(node, "`is` only compares compile-time values")
                else:
                    r = (left is right) if isinstance(op, ast.Is) else (left is not right)
            elif isinstance(op, (ast.In, ast.NotIn)):
                if is_value(left) or is_value(right):
                    raise self.error(node, "`in` only works on compile-time values")
                r = (left in right) if isinstance(op, ast.In) else (left not in right)
            elif not is_value(left) and not is_value(right):
                r = _PY_CMP[self._CMP[type(op)]](left, right)
            else:
                r = S.compare(self.b, self._CMP[type(op)], left, right)
            result = r if result is None else self._and(result, r)
            left = right
        return result

    def _and(self, a, b):
        if not is_value(a) and not is_value(b):
            return a and b
        if not is_value(a):
            return b if a else False
        if not is_value(b):
            return a if b else False
        return S.logical(self.b, "and", a, b)

    def visit_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        acc = self.visit(node.values[0])
        for expr in node.values[1:]:
            if not is_value(acc) and (not acc if is_and else acc):
                return acc      # decided at compile time: as in Python, the value, the rest unevaluated
            v = self.visit(expr)
            if not is_value(acc):
                acc = v
            elif is_and:
                acc = self._and(acc, v)
            elif not is_value(v):
                acc = True if v else acc
            else:
                acc = S.logical(self.b, "or", acc, v)
        return acc

    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if not is_value(cond):
            return self.visit(node.body if cond else node.orelse)
        # Each side runs only when chosen, as in Triton (an if op): `tl.store(p, x) if c else
        # tl.store(q, y)` stores once, `tl.load(p) if ok else 0` loads only when ok. Sides that
        # compute without effects are spliced in before a select instead.
        outer = self.b.block
        blocks, sides = [ir.Block(), ir.Block()], []
        for block, expr in zip(blocks, (node.body, node.orelse)):
            self.b.block = block
            try:
                sides.append(self.visit(expr))
            finally:
                self.b.block = outer
        tv, ev = sides
        effects = any(_has_effect(op) for block in blocks for op in block.walk())
        if cond.is_block and (effects or tv is None or ev is None):
            raise self.error(node, "a conditional expression on a block condition would run both sides, and a side "
                                   "loads, stores or calls an atomic; use tl.where on values, or a mask= argument")
        if tv is None and ev is None:
            for block in blocks:
                block.ops.append(ir.Op("yield", [], [], loc=self.b.loc))
            self.b.create("if", [S.to_bool(self.b, cond)], [], regions=blocks)
            return None
        if tv is None or ev is None:
            raise self.error(node, "one side of the conditional expression has a value and the other has none")
        if not effects:
            if is_value(tv) and is_value(ev) and tv.dtype != ev.dtype and (tv.dtype.is_ptr() or ev.dtype.is_ptr()):
                raise self.error(node, _branch_type_mismatch("the conditional expression", tv.dtype, ev.dtype))
            for block in blocks:
                outer.ops.extend(block.ops)
            return S.where(self.b, cond, tv, ev)
        tv, ev = self._unify_branch_values(node, "the conditional expression", tv, ev, *blocks)
        for block, v in zip(blocks, (tv, ev)):
            block.ops.append(ir.Op("yield", [v], [], loc=self.b.loc))
        return self.b.create("if", [S.to_bool(self.b, cond)], [tv.type], regions=blocks).results[0]

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = self.visit(v.value)
                if is_value(val):
                    raise self.error(v, "f-strings can only format compile-time values")
                spec = self.visit(v.format_spec) if v.format_spec else ""
                problem = format_spec_problem(spec) or text_problem(val)
                if problem:
                    raise self.error(v, problem)
                parts.append(format(val, spec))
        return "".join(parts)

    def visit_FormattedValue(self, node):
        return self.text(node, self.visit(node.value))

    def text(self, node, v) -> str:
        """`str(v)` of a compile-time value, refused when it would be huge."""
        problem = text_problem(v)
        if problem:
            raise self.error(node, problem)
        return str(v)

    def visit_Call(self, node):
        fn = self.visit(node.func)
        must_use = getattr(fn, "_must_use_result", False)
        if must_use and getattr(node, "result_unused", False):
            why = f" {must_use}" if isinstance(must_use, str) else ""
            raise self.error(node, f"The result of {ast.unparse(node.func)} is not being used.{why}")
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.visit(a.value)
                if not isinstance(v, (tuple, list)):
                    raise self.error(a, "only tuples can be unpacked with *")
                args.extend(v)
            else:
                args.append(self.visit(a))
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        return self.call(node, fn, args, kwargs)

    def call(self, node, fn, args, kwargs):
        name = getattr(fn, "__blocktune_builtin__", None)
        if name is not None:
            kwargs = {k: v for k, v in kwargs.items() if k != "_semantic"}
            if not is_compiler_builtin(fn):
                return self._call_python(node, fn.__wrapped__, args, kwargs)
            lower = getattr(fn, "__blocktune_lower__", None)
            if lower is not None:
                return lower(self, node, *args, **kwargs)
            return BUILTINS[name](self, node, *args, **kwargs)
        if isinstance(fn, (TensorMethod, DescriptorMethod)):
            return fn(self, node, *args, **kwargs)
        if _is_jit(fn):
            return self.inline(node, fn, args, kwargs)
        if fn is tl_core.range or fn is tl_core.static_range:
            raise self.error(node, f"{fn.__name__} can only be used as the iterator of a for loop")
        if fn is T.pointer_type or fn is block_type:
            if any(is_value(a) for a in args) or any(is_value(v) for v in kwargs.values()):
                raise self.error(node, f"{fn.__name__}(...) needs compile-time arguments")
            return fn(*args, **kwargs)
        if isinstance(fn, dtype):
            if len(args) != 1:
                raise self.error(node, f"{fn}(x) takes one argument")
            return S.cast(self.b, args[0], fn)
        if fn is constexpr:
            return args[0]
        if fn is tl_core.condition:
            return tl_core.condition(*args, **kwargs)
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            return fn(*args, **kwargs)     # a NamedTuple groups kernel values, as a tuple does
        py = _PYTHON_BUILTINS.get(fn)
        if py is not None:
            return py(self, node, *args, **kwargs)
        if isinstance(getattr(fn, "__self__", None), dtype) and \
                all(not is_value(a) for a in args) and all(not is_value(v) for v in kwargs.values()):
            return fn(*args, **kwargs)  # x.dtype.is_int(), x.dtype.is_floating(), ... at compile time
        if isinstance(fn, _BoundMethod):
            return self.inline(node, fn.fn, [fn.self, *args], kwargs)
        if isinstance(fn, type) and getattr(fn, "__blocktune_aggregate__", False):
            return self._make_aggregate(node, fn, args, kwargs)
        if isinstance(fn, types.MethodType) and tl_core.is_aggregate(fn.__self__):
            return self._call_python(node, fn, args, kwargs)
        if isinstance(fn, AggregatePythonFunction):
            return self._call_python(node, fn.fn, args, kwargs)
        if getattr(fn, "__blocktune_host_helper__", False) and \
                all(not is_value(a) for a in args) and all(not is_value(v) for v in kwargs.values()):
            result = fn(*args, **kwargs)  # compiler.cdiv / next_power_of_2 on compile-time values
            return result.value if isinstance(result, constexpr) else result
        raise self.error(node, f"cannot call {self._describe(fn)} inside a kernel: only tl builtins, "
                               "@jit functions and a few Python builtins (range, min, max, len, int, float, getattr...) are allowed")

    def inline(self, node, callee, args, kwargs):
        if self.depth > MAX_INLINE_DEPTH:
            raise self.error(node, "@jit calls nest too deeply (recursion is not supported)")
        params = callee.arg_names
        if len(args) > len(params):
            raise self.error(node, f"{callee.__name__}() takes {len(params)} arguments but {len(args)} were given")
        local = dict(zip(params, args))
        for k, v in kwargs.items():
            if k not in params:
                raise self.error(node, f"{callee.__name__}() got an unexpected keyword argument '{k}'")
            if k in local:
                raise self.error(node, f"{callee.__name__}() got multiple values for argument '{k}'")
            local[k] = v
        for p in params:
            if p not in local:
                default = callee.defaults.get(p, _MISSING) if hasattr(callee, "defaults") else _MISSING
                if default is _MISSING:
                    raise self.error(node, f"{callee.__name__}() missing argument '{p}'")
                local[p] = default.value if isinstance(default, constexpr) else default
        if getattr(callee, "noinline", False):
            self._check_noinline_arguments(node, callee, local)
            called, returned = device_call(self, node, callee, local)   # a device function (GPU builds)
            if called:
                return returned
        # A tl.constexpr annotation on a called @jit function's parameter does not force a
        # compile-time value: Triton passes runtime values through (tutorial 06 hands its block
        # `offs_m` to `offs_m: tl.constexpr`); only kernel parameters are specialized.
        sub = CodeGenerator(callee, self.b, local, self.depth + 1)
        try:
            sub.visit_stmts(callee.fn_ast.body)
        except CompilationError as e:
            # Triton's shape: the error at the call, the callee's error as its cause (and in its text)
            raise self.error(node, e.message, type(e), within=e) from e
        ret = sub.scope.returned
        return None if ret is _MISSING else ret

    def _check_noinline_arguments(self, node, callee, local: dict) -> None:
        """Triton compiles a noinline function as a function of its own, which takes scalars only:
        a block argument is its compile error. blocktune inlines the call, and interpret mode runs
        it (as Triton's interpreter does); the GPU compile refuses it with Triton's words."""
        for p in callee.arg_names:
            v = local.get(p)
            if is_value(v) and v.is_block:
                self.b.gpu_refusals.append(self.error(
                    node, f"Function {callee.__name__} is marked noinline, but was called with non-scalar argument "
                          f"{p}:{v.type}"))
                return

    # -- Triton's aggregates (tl.core._aggregate) -------------------------------------------------
    def _make_aggregate(self, node, cls, args, kwargs):
        """`Cls(...)` in a kernel: the instance, made by running its __init__ at compile time."""
        inst = object.__new__(cls)
        init = cls.__dict__.get("__init__")
        if _is_jit(init):
            self.inline(node, init, [inst, *args], kwargs)
        elif init is not None:
            self._call_python(node, types.MethodType(init, inst), args, kwargs)
        missing = [f for f in getattr(cls, "__annotations__", {}) if not hasattr(inst, f)]
        if missing:
            raise self.error(node, f"constructor for {cls.__name__} did not initialize attribute '{missing[0]}'")
        return inst

    def _aggregate_attribute(self, node, base, attr):
        """A field (constexpr wrappers removed), or a method: @jit ones bound to the instance."""
        static = inspect.getattr_static(type(base), attr, None)
        try:
            v = getattr(base, attr)
        except AttributeError:
            raise self.error(node, f"{type(base).__name__} has no attribute '{attr}'") from None
        if _is_jit(v) and not isinstance(static, staticmethod) and attr not in vars(base):
            return _BoundMethod(v, base)
        return v.value if isinstance(v, constexpr) else v

    def _call_python(self, node, fn, args, kwargs):
        """A Python function of an aggregate (or a user's builtin), run at compile time on kernel
        values; as in Triton it gets a `_semantic`, through which the builtins it calls lower here."""
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        if "_semantic" in params:
            kwargs = dict(kwargs, _semantic=CompileTimeSemantic(self, node))
        try:
            result = fn(*args, **kwargs)
        except CompilationError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's Python code: report it at the call
            raise self.error(node, f"{type(e).__name__}: {e}") from e
        return result.value if isinstance(result, constexpr) else result

    # -- helpers ----------------------------------------------------------------------------------
    def _constexpr(self, node, v, what):
        if is_value(v):
            raise self.error(node, f"{what} must be compile-time constants (tl.constexpr), got a runtime value of type {v.type}")
        return v

    @staticmethod
    def _describe(v) -> str:
        if is_value(v):
            return f"a value of type {v.type}"
        if isinstance(v, types.ModuleType):
            return f"module {v.__name__}"
        if callable(v):
            return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', getattr(v, '__name__', repr(v)))}".lstrip(".")
        return f"{type(unlift(v)).__name__} {v!r}"


def _surface_cause(exc: BaseException, bare: bool = True) -> BaseException | None:
    """The cause to chain to a CompilationError: an error raised while lowering a `tl` builtin keeps
    its traceback from the builtin's frame in compiler/language (core.py, as Triton's points into its
    core.py) on, which shows the rule that refused; any other is the bare message (`bare`) or none."""
    tb = exc.__traceback__
    while tb is not None and _LANGUAGE_DIR not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    if tb is not None:
        return exc.with_traceback(tb)
    return exc.with_traceback(None) if bare else None


_LANGUAGE_DIR = os.path.dirname(tl_core.__file__) + os.sep

_PY_CMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


class _CarriedSlots:
    """Loop-carried names, with each block pointer / tensor descriptor spread over one slot per
    scalar part (`name.0`, `name.1`, …) so that loops carry plain IR values."""

    def __init__(self, gen, node, names: list[str]):
        self.gen, self.node, self.names = gen, node, names
        self.templates = {n: _slot_template(gen.scope.local[n]) for n in names
                          if isinstance(gen.scope.local[n], Composite) or tl_core.is_aggregate(gen.scope.local[n])}
        self.flat_names = []
        for n in names:
            t = self.templates.get(n)
            self.flat_names.extend([n] if t is None else [f"{n}.{i}" for i in builtins.range(len(t.parts()))])

    def flatten(self, scope: dict) -> dict:
        out = {}
        for n in self.names:
            v, t = scope[n], self.templates.get(n)
            if t is None:
                if isinstance(v, Composite) or tl_core.is_aggregate(v):
                    raise self.gen.error(self.node, f"`{n}` becomes a {_slot_template(v)!r} inside the loop; define it before the loop")
                out[n] = v
                continue
            if isinstance(v, Composite) or tl_core.is_aggregate(v):
                v = _slot_template(v)
            if not isinstance(v, (Composite, AggregateParts)) or v.structure() != t.structure():
                raise self.gen.error(self.node, f"loop-carried `{n}` must stay a {t!r}, got {self.gen._describe(v) if not isinstance(v, (Composite, AggregateParts)) else repr(v)}")
            out.update({f"{n}.{i}": p for i, p in enumerate(v.parts())})
        return out

    def bind(self, scope: dict, values) -> None:
        values = list(values)
        for n in self.names:
            t = self.templates.get(n)
            if t is None:
                scope[n] = values.pop(0)
            else:
                k = len(t.parts())
                scope[n], values = t.with_parts(values[:k]), values[k:]


def _slot_template(v):
    """What a loop carries a block pointer, descriptor or aggregate as (parts, structure)."""
    return AggregateParts(v) if tl_core.is_aggregate(v) else v


def _has_parts(v) -> bool:
    return isinstance(v, (Composite, AggregateParts)) or tl_core.is_aggregate(v)


def _same_parts(*lists) -> bool:
    return all(len(p) == len(lists[0]) and all(a is b for a, b in zip(p, lists[0])) for p in lists)


def _branch_copy(v):
    """An aggregate copied for one branch of a runtime `if` (other values as they are)."""
    if not tl_core.is_aggregate(v):
        return v
    parts = AggregateParts(v)
    return parts.with_parts(parts.parts())


# Triton's words, then ours
_RETURN_IN_LOOP = "Cannot have `return` statements inside `while` or `for` statements in triton (return inside a loop is not supported)"


def _compile_time(v) -> bool:
    """A number, string, None or tuple of them: what Triton holds as a constexpr."""
    if isinstance(v, (tuple, list)):
        return all(_compile_time(x) for x in v)
    return v is None or isinstance(v, (bool, int, float, str))


class _BoundMethod:
    """A @jit method of an aggregate instance (`pair.unpack`): called, it inlines with `self`."""

    def __init__(self, fn, self_):
        self.fn, self.self = fn, self_


_IN_PLACE_HINTS = ("multiple_of", "max_contiguous", "max_constancy")


def _has_effect(op: ir.Op) -> bool:
    """Whether running the op when its result is not wanted could be observed (or fault)."""
    return op.name == "load" or ir.has_effect(op)     # a load may fault


def _always_returns(stmts) -> bool:
    """Whether every path through the statements ends in a `return`."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _always_returns(last.body) and _always_returns(last.orelse)


def _contains_return(node) -> bool:
    """Whether a `return` of this function is somewhere inside the statement (not in a nested def)."""
    if isinstance(node, ast.Return):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return False
    return any(_contains_return(child) for child in ast.iter_child_nodes(node))


def _is_jit(obj) -> bool:
    return hasattr(obj, "fn_ast") and hasattr(obj, "constexpr_names")


# -- the few Python builtins a kernel may call ----------------------------------------------------
def _py_minmax(which):
    def impl(gen, node, *args, **kwargs):
        if kwargs:
            raise gen.error(node, f"{which}() takes no keyword arguments in a kernel")
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            args = tuple(args[0])
        if len(args) < 2:
            raise gen.error(node, f"{which}() needs at least two arguments in a kernel (use tl.{which}(x, axis) to reduce a block)")
        if all(not is_value(a) for a in args) and \
                any(isinstance(a, float) and (math.isnan(a) or (a == 0.0 and math.copysign(1.0, a) < 0)) for a in args):
            # Python's answer would depend on the order of the arguments (as Triton, refused)
            raise gen.error(node, f"{which}() of compile-time values cannot take NaN or -0.0 (Python's {which} depends "
                                  f"on the argument order there); use tl.{'minimum' if which == 'min' else 'maximum'}")
        acc = args[0]
        for v in args[1:]:
            if not is_value(acc) and not is_value(v):
                acc = builtins.min(acc, v) if which == "min" else builtins.max(acc, v)
            else:
                acc = S.minmax(gen.b, "minimum" if which == "min" else "maximum", acc, v)
        return acc
    return impl


def _py_len(gen, node, x):
    if is_value(x):
        if not x.is_block:
            raise gen.error(node, "len() of a scalar")
        return x.shape[0]
    return len(x)


def _py_cast(to):
    def impl(gen, node, x):
        if is_value(x):
            return S.cast(gen.b, x, to)
        return {T.int32: int, T.float32: float, T.int1: bool}[to](x)
    return impl


def _py_print(gen, node, *args, **kwargs):
    values = [a for a in args if is_value(a)]
    prefix = " ".join(gen.text(node, a) for a in args if not is_value(a))
    gen.b.create("print", values, [], {"prefix": prefix, "hex": False})


def _py_isinstance(gen, node, x, cls):
    # kernel values stand for tl classes: a block or scalar is a tl.tensor, a descriptor a tl.tensor_descriptor
    classes = cls if isinstance(cls, tuple) else (cls,)
    if is_value(x):
        return tl_core.tensor in classes
    if isinstance(x, TensorDescriptor):
        return tl_core.tensor_descriptor in classes or tl_core.tensor_descriptor_base in classes
    return isinstance(x, cls)


def _py_hasattr(gen, node, x, name):
    """`hasattr(x, "dtype")`: whether `x.<name>` would work in the kernel (decided at compile time)."""
    if not isinstance(name, str):
        raise gen.error(node, "hasattr() needs an attribute name known at compile time")
    if name.startswith("_"):
        return False
    if is_value(x):
        return tensor_has_attribute(name)
    if isinstance(x, (bool, int, float)):
        return False    # a compile-time number is Triton's constexpr, which has no tensor attributes
    try:
        gen.attribute(node, x, name)
    except (CompilationError, SemanticError, AttributeError):
        return False
    return True


_NO_DEFAULT = object()


def _py_getattr(gen, node, x, name, default=_NO_DEFAULT):
    """`getattr(libdevice, fn)` with `fn` known at compile time (a constexpr string): what `x.<fn>`
    is in the kernel; `default` when it has no such attribute."""
    if not isinstance(name, str):
        raise gen.error(node, "getattr() needs an attribute name known at compile time (a constexpr string)")
    if name.startswith("_"):
        raise gen.error(node, f"attribute '{name}' is not accessible in a kernel")
    if default is _NO_DEFAULT:
        return gen.attribute(node, x, name)
    return gen.attribute(node, x, name) if _py_hasattr(gen, node, x, name) else default


def _py_abs(gen, node, x):
    return S.unary_math(gen.b, "abs", x) if is_value(x) else builtins.abs(x)


def _py_range_error(gen, node, *a, **k):
    raise gen.error(node, "range() can only be used as the iterator of a for loop")


_PYTHON_BUILTINS = {
    builtins.min: _py_minmax("min"), builtins.max: _py_minmax("max"), builtins.len: _py_len,
    builtins.int: _py_cast(T.int32), builtins.float: _py_cast(T.float32), builtins.bool: _py_cast(T.int1),
    builtins.print: _py_print, builtins.isinstance: _py_isinstance, builtins.abs: _py_abs,
    builtins.hasattr: _py_hasattr, builtins.getattr: _py_getattr,
    builtins.range: _py_range_error,
    builtins.tuple: lambda gen, node, x=(): tuple(x), builtins.list: lambda gen, node, x=(): list(x),
    tl_core.tuple: lambda gen, node, x=(): tuple(x),
}


def _branch_type_mismatch(what: str, then_type, else_type) -> str:
    """Triton's words for a value whose type differs between the two sides of a runtime choice
    (pointers do not convert: a tl.const pointer and a plain one stay different types)."""
    if what == "the return value":
        return f"Inconsistent return types: {then_type} in one branch and {else_type} in the other"
    if what == "the conditional expression":
        return f"Ternary expression with dynamic condition has inconsistent type: {then_type} and {else_type}"
    return f"Mismatched type for {what} between then block ({then_type}) and else block ({else_type})"
