"""compiler._filecheck (Triton's `triton._filecheck`): run_parser runs the front end for real; the
FileCheck helpers, which match Triton's MLIR, say that they do not apply."""
from __future__ import annotations

import pytest

import compiler as triton
import compiler.language as tl
from compiler import _filecheck
from compiler.errors import CompilationError


@triton.jit
def _scaled(x_ptr, n, SCALE: tl.constexpr):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


@triton.jit
def _returns_in_while():
    i = 0
    while i < 10:
        if i == 5:
            return
        i += 1


def test_run_parser_specializes_like_a_launch():
    import torch
    fn = _filecheck.run_parser(_scaled, args=(torch.empty(16), 7), kwargs={"SCALE": 3, "num_warps": 2,
                                                                           "sanitize_overflow": False})
    text = str(fn)
    assert "_scaled" in text and "load" in text and "store" in text


def test_run_parser_reports_front_end_errors():
    with pytest.raises(CompilationError, match="return"):
        _filecheck.run_parser(_returns_in_while)


def test_filecheck_helpers_say_they_do_not_apply():
    check = _filecheck.filecheck_test(_scaled)
    with pytest.raises(_filecheck.NotApplicable, match="blocktune has no MLIR"):
        _filecheck.run_filecheck("x", "module {}", "# CHECK: module")

    @triton.jit
    def ok():
        pass
    with pytest.raises(_filecheck.NotApplicable, match="ok checks the MLIR"):
        _filecheck.filecheck_test(ok)()
    with pytest.raises(CompilationError):       # a kernel that does not compile says so first
        _filecheck.run_filecheck_test(_returns_in_while)
    assert check.__name__ == "_scaled"
