"""Kernels made from edited source text, as Triton's own tests and kernel generators make them:
exec() of a template's edited source (the caller still holds the string), and
JITFunction(fn)._unsafe_update_src(...)."""
from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest

import compiler
import compiler.language as tl
from tests.compiler.kernels.util import interpret  # noqa: F401


@compiler.jit
def unary_template(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, GENERATE_OP(tl.load(x_ptr + offs)))  # noqa: F821 - replaced before use


def exec_variant(template, to_replace):
    """What Triton's test_core.patch_kernel does under its interpreter."""
    namespace = {}
    src = textwrap.dedent(inspect.getsource(template.fn))
    for k, v in to_replace.items():
        src = src.replace(k, v)
    exec(src, globals(), namespace)
    return namespace[template.fn.__name__]


@pytest.mark.parametrize("op,ref", [("tl.exp", np.exp), ("tl.sqrt", np.sqrt), ("-", np.negative)])
def test_a_kernel_made_by_exec_of_edited_source_runs(interpret, op, ref):
    kernel = exec_variant(unary_template, {"GENERATE_OP": op})
    x = np.linspace(0.1, 2.0, 16, dtype=np.float32)
    y = np.full_like(x, np.nan)
    kernel[(1,)](x, y, N=16)
    np.testing.assert_allclose(y, ref(x), rtol=1e-6)
    assert kernel.fingerprint != unary_template.fingerprint


def test_exec_source_is_taken_only_when_it_compiles_to_the_same_function():
    """A caller's string that defines a function of the same name but other code is not taken for
    its source: the error says the source cannot be read."""
    decoy = "def lone(x_ptr):\n    return 1\n"   # noqa: F841 - read from this frame by jit
    namespace = {}
    exec("def lone(x_ptr):\n    return 2\n", {}, namespace)
    with pytest.raises(TypeError, match="cannot read the source of 'lone'"):
        compiler.jit(namespace["lone"])
    del decoy


def test_unsafe_update_src_makes_a_variant_and_leaves_the_template_alone(interpret):
    variant = compiler.JITFunction(unary_template.fn)
    variant._unsafe_update_src(variant.src.replace("GENERATE_OP", "tl.abs"))
    x = np.linspace(-2.0, 2.0, 16, dtype=np.float32)
    y = np.full_like(x, np.nan)
    variant[(1,)](x, y, N=16)
    np.testing.assert_array_equal(y, np.abs(x))
    assert "GENERATE_OP" in unary_template.src and variant.fingerprint != unary_template.fingerprint
    with pytest.raises(compiler.CompilationError, match="not a function definition"):
        variant._unsafe_update_src("x = 1\n")
