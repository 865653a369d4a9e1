"""Bad kernels fail to compile with a `compiler.CompilationError` that points at the offending source.

Each bad line carries a `# ERR` marker; the test finds it in this file and expects the error text to
name `file:line:col` and to show that source line.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.modes import interpret  # noqa: F401

pytestmark = pytest.mark.usefixtures("interpret")

THIS_FILE = __file__


@triton.jit
def unknown_name_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.load(x_ptr + offs) + undefined_thing  # noqa: F821  # ERR
    tl.store(x_ptr + offs, y)


@triton.jit
def unknown_tl_function_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.no_such_builtin(tl.load(x_ptr + offs))  # ERR
    tl.store(x_ptr + offs, y)


@triton.jit
def load_not_a_pointer_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.load(n + offs)  # ERR
    tl.store(x_ptr + offs, y)


@triton.jit
def bitwise_on_float_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, x ^ x)  # ERR


@triton.jit
def runtime_shape_kernel(x_ptr, n):
    offs = tl.arange(0, n)  # ERR
    tl.store(x_ptr + offs, offs)


@triton.jit
def runtime_zeros_shape_kernel(x_ptr, n):
    z = tl.zeros((n,), dtype=tl.float32)  # ERR
    tl.store(x_ptr + tl.arange(0, 16), z)


@triton.jit
def non_power_of_two_kernel(x_ptr):
    offs = tl.arange(0, 10)  # ERR
    tl.store(x_ptr + offs, offs)


@triton.jit
def try_kernel(x_ptr):
    try:  # ERR
        tl.store(x_ptr, 1.0)
    except Exception:
        pass


@triton.jit
def with_kernel(x_ptr):
    with open("f"):  # ERR
        tl.store(x_ptr, 1.0)


@triton.jit
def lambda_kernel(x_ptr):
    f = lambda v: v + 1  # noqa: E731  # ERR
    tl.store(x_ptr, f(1.0))


@triton.jit
def shape_mismatch_kernel(x_ptr):
    a = tl.arange(0, 16)
    b = tl.arange(0, 32)
    tl.store(x_ptr + a, a + b)  # ERR


@triton.jit
def _helper_with_error(x):
    return x + missing_in_helper  # noqa: F821  # ERR


@triton.jit
def error_in_callee_kernel(x_ptr):
    tl.store(x_ptr, _helper_with_error(tl.load(x_ptr)))  # CALL


@triton.jit
def static_assert_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 64, "BLOCK too small")  # ERR
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


@triton.jit
def scalar_out_of_range_kernel(x_ptr):
    x = tl.full((), 32, dtype=tl.int32)
    tl.store(x_ptr, (x + 0xFFFFFFFFFFFFFF).to(tl.float32))  # ERR


@triton.jit
def negative_scalar_with_unsigned_kernel(x_ptr):
    u = tl.full((16,), 7, dtype=tl.uint32)
    tl.store(x_ptr + tl.arange(0, 16), (u * -1).to(tl.float32))  # ERR


@triton.jit
def narrow_atomic_kernel(x_ptr, DT: tl.constexpr):
    tl.atomic_add(x_ptr.to(tl.pointer_type(DT)), 1)  # ERR


def _err_line(kernel_or_src) -> tuple[int, str]:
    """(1-based line number in this file, source text) of the `# ERR` line of a kernel."""
    return _marked_line(kernel_or_src, "# ERR")


def _marked_line(fn, marker: str) -> tuple[int, str]:
    src_lines, start = inspect.getsourcelines(getattr(fn, "fn", None) or _pyfn(fn))
    for i, line in enumerate(src_lines):
        if line.rstrip().endswith(marker):
            return start + i, line
    raise AssertionError(f"no {marker} marker")


def _pyfn(kernel):
    for attr in ("fn", "__wrapped__", "_fn"):
        f = getattr(kernel, attr, None)
        if f is not None and inspect.isfunction(f):
            return f
    raise AssertionError(f"cannot find the Python function of {kernel!r}")


def _check(err: triton.CompilationError, lineno: int, line: str, col_of: str | None = None, message: str = ""):
    text = str(err)
    m = re.search(re.escape(THIS_FILE) + r":(\d+):(\d+)", text)
    assert m, f"no {THIS_FILE}:line:col in:\n{text}"
    assert int(m.group(1)) == lineno, f"expected line {lineno}, got:\n{text}"
    code = line.split("#")[0].strip()
    assert code in text, f"the source line {code!r} is not shown in:\n{text}"
    col = int(m.group(2))
    assert 1 <= col <= len(line), text
    if col_of is not None:
        assert col == line.index(col_of) + 1, f"expected the column of {col_of!r} ({line.index(col_of) + 1}):\n{text}"
    if message:
        assert re.search(message, text, re.I), f"{message!r} not in:\n{text}"
    loc = err.root.loc   # an error inside a called @jit function: the callee's line
    assert str(loc).startswith(f"{THIS_FILE}:{lineno}:"), loc



def _x():
    return np.zeros(64, dtype=np.float32)


@pytest.mark.parametrize("kernel,args,kwargs,col_of,message", [
    (unknown_name_kernel, (), {"BLOCK": 16}, "undefined_thing", "undefined_thing"),
    (unknown_tl_function_kernel, (), {"BLOCK": 16}, None, "no_such_builtin"),
    (load_not_a_pointer_kernel, (5,), {"BLOCK": 16}, None, "pointer"),
    (bitwise_on_float_kernel, (), {"BLOCK": 16}, None, ""),
    (runtime_shape_kernel, (5,), {}, None, "constexpr|compile-time|constant"),
    (runtime_zeros_shape_kernel, (5,), {}, None, "constexpr|compile-time|constant"),
    (non_power_of_two_kernel, (), {}, None, "power of 2|power of two"),
    (try_kernel, (), {}, "try", "try|unsupported"),
    (with_kernel, (), {}, "with", "with|unsupported"),
    (lambda_kernel, (), {}, "lambda", "lambda|unsupported"),
    (shape_mismatch_kernel, (), {}, None, "shape|broadcast"),
    (static_assert_kernel, (), {"BLOCK": 16}, None, "BLOCK too small"),
    (scalar_out_of_range_kernel, (), {}, None, r"Scalar 72057594037927935 is out of range for type int32"),
    (negative_scalar_with_unsigned_kernel, (), {}, None, r"between an unsigned tensor \(uint32\) and a negative scalar \(-1\)"),
    (narrow_atomic_kernel, (), {"DT": tl.int8}, None, r"tl.atomic_add does not support int8"),
    (narrow_atomic_kernel, (), {"DT": tl.uint16}, None, r"tl.atomic_add does not support uint16"),
    (narrow_atomic_kernel, (), {"DT": tl.float8e4nv}, None, r"tl.atomic_add does not support fp8e4nv"),
], ids=lambda v: getattr(v, "__name__", None) if hasattr(v, "__name__") else None)
def test_compilation_error_points_at_source(kernel, args, kwargs, col_of, message):
    lineno, line = _err_line(kernel)
    with pytest.raises(triton.CompilationError) as info:
        kernel[(1,)](_x(), *args, **kwargs)
    _check(info.value, lineno, line, col_of, message)


def test_error_message_is_the_message_without_the_location():
    """Triton's CompilationError.error_message, which its tests read; it is also the last line."""
    with pytest.raises(triton.CompilationError) as info:
        error_in_callee_kernel[(1,)](_x())
    err = info.value
    assert err.error_message == err.message and "missing_in_helper" in err.error_message
    assert ": error: " in str(err) and ": error: " not in err.error_message
    assert str(err).splitlines()[-1] == err.error_message


def test_error_inside_called_jit_function():
    """Triton's shape: the error is raised at the call, the callee's error is its cause; the text
    names the callee's line first (a diagnostic), then each call on the way, outermost first."""
    lineno, line = _err_line(_helper_with_error)
    with pytest.raises(triton.CompilationError) as info:
        error_in_callee_kernel[(1,)](_x())
    err = info.value
    _check(err, lineno, line, "missing_in_helper", "missing_in_helper")
    call_line, call_text = _marked_line(error_in_callee_kernel, "# CALL")
    assert err.loc.line == call_line and err.loc.col == call_text.index("_helper_with_error")
    assert isinstance(err.__cause__, triton.CompilationError) and err.within is err.__cause__
    assert err.__cause__.loc.line == lineno and err.__cause__.within is None
    text = str(err)
    assert text.index(f"in error_in_callee_kernel(), calling _helper_with_error() at 2:20:") \
        < text.index("in _helper_with_error() at 2:15:"), text
    assert "tl.store(x_ptr, _helper_with_error(tl.load(x_ptr)))" in text


def test_jit_from_source_errors_name_the_submitted_file():
    src = (
        "import triton\n"
        "import triton.language as tl\n"
        "\n"
        "@triton.jit\n"
        "def k(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, nope + 1.0)\n"
    )
    k = triton.jit_from_source(src, "k", filename="<submitted>")
    with pytest.raises(triton.CompilationError) as info:
        k[(1,)](_x(), BLOCK=16)
    text = str(info.value)
    assert "<submitted>:7:28" in text, text
    assert "tl.store(x_ptr + offs, nope + 1.0)" in text and "nope" in text


def test_jit_from_source_runs_a_good_kernel():
    src = (
        "import triton\n"
        "import triton.language as tl\n"
        "SCALE = tl.constexpr(3)\n"
        "\n"
        "@triton.jit\n"
        "def _twice(x):\n"
        "    return x * 2\n"
        "\n"
        "@triton.jit\n"
        "def k(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    m = offs < n\n"
        "    tl.store(x_ptr + offs, _twice(tl.load(x_ptr + offs, mask=m)) + SCALE, mask=m)\n"
    )
    k = triton.jit_from_source(src, "k")
    x = np.arange(50, dtype=np.float32)
    k[(4,)](x, 50, BLOCK=16)
    np.testing.assert_array_equal(x, np.arange(50, dtype=np.float32) * 2 + 3)


def test_jit_from_source_rejects_code_outside_kernels():
    src = "import os\nos.system('true')\n"
    with pytest.raises(triton.CompilationError):
        triton.jit_from_source(src, "k")


@triton.jit
def uses_n_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs * 1.0, mask=offs < n)  # ERR


def test_wrong_argument_type_at_launch():
    with pytest.raises(TypeError, match="'n'"):
        uses_n_kernel[(1,)](_x(), "ten", BLOCK=16)
    # None specializes to a constant; the kernel then misuses it where it is compared
    lineno, line = _err_line(uses_n_kernel)
    with pytest.raises(triton.CompilationError) as info:
        uses_n_kernel[(1,)](_x(), None, BLOCK=16)
    _check(info.value, lineno, line)


def test_a_constexpr_cannot_be_left_unspecialized():
    """Triton's error, at the first compile (the decoration itself is fine)."""
    @triton.jit(do_not_specialize=["N"])
    def kernel(X, N: tl.constexpr):
        pass

    with pytest.raises(triton.CompilationError, match="N marked as constexpr and listed in do_not_specialize"):
        triton.compile(kernel, {"X": "*fp32"}, {"N": 5}, target="sm_90")
