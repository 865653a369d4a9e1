"""CompilationError in Triton's shape as well as ours: a `file:line:col: error:` diagnostic first,
then Triton's layout (each @jit function's "at line:col:", its source up to the line, a caret, the
message last), `.src`/`.node`, errors in called functions raised at the call with the callee's as
cause, builtins' refusals that point into the tl surface, and Triton's rule on global variables.
"""
from __future__ import annotations

import os
import pickle
import traceback
from typing import NamedTuple

import pytest

import compiler as triton
import compiler.language as tl
from compiler import knobs
from compiler.errors import CompilationError, CompileTimeAssertionFailure, SourceNode
from compiler.frontend import generate_ir

THIS_FILE = __file__


def _error(kernel, constexprs=None) -> CompilationError:
    with pytest.raises(CompilationError) as info:
        generate_ir(kernel, {}, constexprs or {})
    return info.value


def _line_of(fn, text: str) -> int:
    """The file line number of the first line of @jit function `fn` holding `text`."""
    for i, line in enumerate(fn.src.splitlines()):
        if text in line:
            return fn.first_lineno + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


@triton.jit
def bad_operand_kernel():
    x = tl.arange(0, 16)
    y = x + "text"  # noqa: F841


def test_layout_diagnostic_first_then_source_caret_and_message_last():
    err = _error(bad_operand_kernel)
    lines = str(err).splitlines()
    line = _line_of(bad_operand_kernel, 'x + "text"')
    assert lines[0] == f"{THIS_FILE}:{line}:9: error: {err.message}"
    assert lines[1] == f"{THIS_FILE}:{line}:9: in bad_operand_kernel() at 3:8:"
    assert lines[2:5] == ["def bad_operand_kernel():", "    x = tl.arange(0, 16)", '    y = x + "text"  # noqa: F841']
    assert lines[5] == " " * 8 + "^"                      # under the `x` the operation starts at
    assert lines[-1] == err.message == err.error_message
    assert err.src.startswith("def bad_operand_kernel():") and err.node == SourceNode(3, 8)


def test_error_survives_pickling_with_its_layout():
    err = _error(bad_operand_kernel)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.node == err.node and back.src == err.src


@triton.jit
def _innermost():
    undefined_here  # noqa: F821, B018


@triton.jit
def _middle(x):
    # a comment: the call is on line 3 of this function
    return _innermost()


@triton.jit
def nested_kernel():
    _middle(1)


def test_error_in_called_function_is_raised_at_the_call_with_the_callee_error_as_cause():
    err = _error(nested_kernel)
    assert err.node == SourceNode(2, 4) and err.loc.line == _line_of(nested_kernel, "_middle(1)")
    middle = err.__cause__
    assert middle is err.within and middle.node == SourceNode(3, 11) and middle.loc.fn == "_middle"
    inner = middle.__cause__
    assert inner is err.root and inner.within is None and inner.node == SourceNode(2, 4)
    assert err.message == middle.message == inner.message == "name 'undefined_here' is not defined"
    text = str(err)
    # the diagnostic names the innermost line; the calls follow, outermost first
    assert text.startswith(f"{THIS_FILE}:{_line_of(_innermost, 'undefined_here')}:5: error: name 'undefined_here'")
    assert text.index("in nested_kernel(), calling _middle() at 2:4:") < text.index("in _middle(), calling _innermost() at 3:11:") \
        < text.index("in _innermost() at 2:4:")
    assert "at 2:4:" in "".join(traceback.format_exception(type(inner), inner, inner.__traceback__, chain=False))


@triton.jit
def _recurse(n: tl.constexpr):
    _recurse(n + 1)


@triton.jit
def recursion_kernel():
    _recurse(0)


def test_a_deep_chain_of_calls_shows_the_outermost_and_innermost_few():
    err = _error(recursion_kernel)
    text = str(err)
    assert "recursion is not supported" in err.message and "more @jit calls ..." in text
    assert text.count("calling _recurse()") <= 6 and len(text) < 4000


@triton.jit
def builtin_refusal_kernel():
    tl.expand_dims(None, -1)


def test_a_builtin_refusal_keeps_its_traceback_from_the_tl_function_on():
    err = _error(builtin_refusal_kernel)
    cause = err.__cause__
    shown = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    assert f"compiler{os.sep}language{os.sep}core.py" in shown and "codegen.py" not in shown
    assert "at 2:4:" in str(err)


@triton.jit
def not_a_tuple_kernel():
    not (0, 0)  # noqa: B015


def test_unary_operator_on_a_tuple_is_refused_where_it_is():
    err = _error(not_a_tuple_kernel)
    assert err.__cause__ is None and err.node == SourceNode(2, 4)
    assert "unary operator `not` is not supported on tuple (0, 0)" in err.message


@triton.jit
def static_assert_kernel():
    tl.static_assert(1 == 2, "one is not two")


def test_static_assert_failure_is_its_own_class_without_cause():
    err = _error(static_assert_kernel)
    assert isinstance(err, CompileTimeAssertionFailure) and err.__cause__ is None
    assert "at 2:4:" in str(err) and str(err).splitlines()[-1] == "static assertion failed: one is not two"


@triton.jit
def _returns_two_shapes(n):
    if n == 0:
        return tl.arange(0, 4)
    else:
        return tl.arange(0, 8)


@triton.jit
def inconsistent_return_kernel(n):
    _returns_two_shapes(n)


def test_inconsistent_returns_point_at_the_later_return():
    with pytest.raises(CompilationError) as info:
        generate_ir(inconsistent_return_kernel, {"n": tl.int32}, {})
    err = info.value
    assert err.node == SourceNode(2, 4) and err.__cause__.node == SourceNode(5, 8)
    assert "Inconsistent return types" in err.message


@triton.jit
def arange_kernel():
    tl.arange(2, 7)


@triton.jit
def full_kernel():
    tl.full((33, ), 0, dtype=tl.int64)


@pytest.mark.parametrize("kernel,words,detail", [
    (arange_kernel, "arange's range must be a power of 2", "tl.arange(2, 7) has 5 elements"),
    (full_kernel, "Shape element 0 must be a power of 2", "shape [33]"),
])
def test_power_of_two_refusals_have_triton_words_and_ours(kernel, words, detail):
    err = _error(kernel)
    assert str(err.__cause__) == words          # Triton's words, which its tests compare
    assert err.message == f"{words}: {detail}"  # and what was found


@triton.must_use_result("Keep what it computes.")
@triton.jit
def _cube(x):
    return x * x * x


@triton.jit
def unused_result_kernel():
    _cube(tl.full((16, ), 1.0, tl.float32))


def test_must_use_result_message_is_the_last_line():
    err = _error(unused_result_kernel)
    assert str(err).splitlines()[-1] == "The result of _cube is not being used. Keep what it computes."


# -- global variables: Triton's rule ----------------------------------------------------------
PLAIN_GLOBAL = 42
ANNOTATED_GLOBAL: tl.constexpr = 42
CONSTEXPR_GLOBAL = tl.constexpr(42)
DTYPE_ALIAS = tl.float16


class Pair(NamedTuple):
    a: int
    b: int


@triton.jit
def plain_global_kernel():
    a = PLAIN_GLOBAL  # noqa: F841


@triton.jit
def annotated_global_kernel():
    a = ANNOTATED_GLOBAL  # noqa: F841


@triton.jit
def allowed_globals_kernel(X):
    p = Pair(1, 2)
    tl.store(X + tl.arange(0, 16), tl.full((16, ), CONSTEXPR_GLOBAL + p.a, DTYPE_ALIAS))
    tl.store(X, os.sep == "/")      # a module's attribute: Triton reads those too


@pytest.mark.parametrize("kernel,name", [(plain_global_kernel, "PLAIN_GLOBAL"),
                                         (annotated_global_kernel, "ANNOTATED_GLOBAL")])
def test_a_kernel_cannot_read_a_non_constexpr_global(kernel, name):
    err = _error(kernel)
    assert f"Cannot access global variable {name} from within @jit'ed function" in err.message
    assert "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1" in err.message and err.node == SourceNode(2, 8)


def test_constexpr_globals_dtypes_modules_and_namedtuples_are_readable():
    fn = generate_ir(allowed_globals_kernel, {"X": tl.pointer_type(tl.float16)}, {})
    assert any(op.name == "store" for op in fn.walk())


def test_the_knob_lets_kernels_read_plain_globals(monkeypatch):
    monkeypatch.setenv("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "1")
    assert knobs.compilation.allow_non_constexpr_globals is True
    generate_ir(plain_global_kernel, {}, {})


# -- numbers assigned to variables: Triton's scalar tensors (compiler/frontend/lifted.py) -------
@triton.jit
def _type_of(x, expected: tl.constexpr):
    tl.static_assert(x.type == expected)


@triton.jit
def assigned_numbers_kernel(LIT: tl.constexpr, TY: tl.constexpr):
    annotated: tl.constexpr = LIT
    tl.static_assert(annotated.type == tl.constexpr_type(LIT))
    tl.static_assert(LIT.type == tl.constexpr_type(LIT))
    assigned = LIT
    tl.static_assert(assigned.type == TY)
    _type_of(assigned, TY)                        # a called function sees the scalar tensor too
    again: tl.constexpr = assigned
    tl.static_assert(again.type == tl.constexpr_type(LIT))
    if LIT < 1024:
        tl.static_assert(tl.arange(0, assigned * 2).shape[0] == 2 * LIT)    # still known at compile time


@pytest.mark.parametrize("literal,ty", [(8, tl.int32), (2**40, tl.int64), (32.5, tl.float32)])
def test_a_number_assigned_to_a_variable_has_the_type_of_tritons_scalar_tensor(literal, ty):
    if isinstance(literal, float):
        with pytest.raises(CompilationError, match="arange"):   # only the float case cannot size a block
            generate_ir(assigned_numbers_kernel, {}, {"LIT": literal, "TY": ty})
    else:
        generate_ir(assigned_numbers_kernel, {}, {"LIT": literal, "TY": ty})
