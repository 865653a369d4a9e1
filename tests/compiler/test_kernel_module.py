"""compiler.runtime.kernel_module: a launched kernel written as a strict module of its own (what the
service accepts), with the helpers, aliases and literal constants it reads, and nothing else of its
file; same fingerprint as the original, or a refusal naming the reason."""
from __future__ import annotations

import types

import pytest

import compiler
import compiler as triton
import compiler.language as tl
from compiler.language import float32 as f32
from compiler.runtime.kernel_module import NotSelfContained, kernel_module_source

SCALE = 3
OFFSET: tl.constexpr = tl.constexpr(7)
NOT_A_LITERAL = float("inf")
UNRELATED = object()        # in the file, never read by a kernel: must not be sent


@triton.jit
def times_scale(x):
    return x * SCALE


@triton.jit
def shifted(x):
    return times_scale(x) + OFFSET


@triton.jit(do_not_specialize=["n"])
def uses_helpers(x_ptr, out_ptr, n, BLOCK: tl.constexpr = 16):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n).to(f32)
    tl.store(out_ptr + offs, shifted(x), mask=offs < n)


def test_helpers_constants_and_aliases_are_written_and_the_fingerprint_kept():
    text = kernel_module_source(uses_helpers)
    back = compiler.jit_from_source(text, "uses_helpers")          # strict mode, as the service
    assert back.fingerprint == uses_helpers.fingerprint
    assert "from compiler.language import float32 as f32" in text and "SCALE = 3" in text
    assert "OFFSET = compiler.language.constexpr(7)" in text and "@compiler.jit(do_not_specialize=['n'])" in text
    assert text.index("def times_scale") < text.index("def shifted") < text.index("def uses_helpers")
    assert "UNRELATED" not in text and "pytest" not in text and "NOT_A_LITERAL" not in text
    assert back.do_not_specialize == ["n"]


def test_a_kernel_inside_a_function_sends_its_closure_constants():
    def make(block_rows: int):
        @triton.jit
        def rows(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK) * block_rows
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
        return rows
    text = kernel_module_source(make(4))
    assert "block_rows = 4" in text
    assert compiler.jit_from_source(text, "rows").fingerprint == make(4).fingerprint


@triton.jit
def reads_inf(x_ptr):
    tl.store(x_ptr, NOT_A_LITERAL)


helpers = types.ModuleType("helpers")
helpers.times_scale = times_scale
renamed = times_scale


@triton.jit
def via_module(x_ptr):
    tl.store(x_ptr, helpers.times_scale(tl.load(x_ptr)))


@triton.jit
def via_alias(x_ptr):
    tl.store(x_ptr, renamed(tl.load(x_ptr)))


@pytest.mark.parametrize("kernel, why", [
    (reads_inf, "'NOT_A_LITERAL' read by reads_inf is not a literal"),
    (via_module, "reads the global 'helpers' \\(helpers\\)"),
    (via_alias, "calls the @jit function times_scale under the name 'renamed'"),
])
def test_what_strict_source_cannot_say_is_refused(kernel, why):
    with pytest.raises(NotSelfContained, match=why):
        kernel_module_source(kernel)
