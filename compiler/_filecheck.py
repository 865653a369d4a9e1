"""Triton's `triton._filecheck`, the helpers of its front-end tests.

`run_parser(kernel, args, kwargs)` runs blocktune's front end on the kernel specialized for those
arguments, as Triton's runs its own, and returns the block IR (an `ir.Function`); a kernel that does
not compile raises the CompilationError a launch would.

The FileCheck helpers (`run_filecheck`, `run_filecheck_test`, `filecheck_test`) match the text of
Triton's MLIR (TTIR) against `# CHECK:` lines written for it. blocktune has no MLIR (its front end
emits its own block IR), so they cannot apply: they raise NotApplicable, which says so, and the
tests built on them fail with that message (docs/compatibility.md lists them).
"""
from __future__ import annotations

import functools
import inspect

from .not_applicable import NotApplicable
from .runtime import build
from .runtime.jit import _TRITON_LAUNCH_OPTIONS, JITFunction

_LAUNCH_OPTIONS = {"num_warps", "num_stages"} | {o.split("=")[0] for o in _TRITON_LAUNCH_OPTIONS}


def run_parser(kernel_fn: JITFunction, args=(), kwargs=None, target=None):
    """The block IR of `kernel_fn` specialized for `args`/`kwargs` (launch options among the kwargs
    are left out). `target` is accepted for Triton's signature: the front end's IR does not depend
    on it."""
    kwargs = {k: v for k, v in dict(kwargs or {}).items() if k not in _LAUNCH_OPTIONS}
    bound = inspect.signature(kernel_fn.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    values = tuple(bound.arguments[name] for name in kernel_fn.arg_names)
    # interpret=True: host tensors are fine here, nothing is launched
    sig, constexprs, div16, eq1, _ = kernel_fn.specialize(values, interpret=True)
    return build.build_ir(kernel_fn, sig, constexprs, div16, eq1)


def _no_mlir(what: str) -> NotApplicable:
    return NotApplicable(f"{what} checks the MLIR (TTIR) that Triton's front end emits, with FileCheck; blocktune "
                         "has no MLIR (its front end emits its own block IR), so this check does not apply")


def run_filecheck(name, module_str, check_template):
    raise _no_mlir(f"run_filecheck({name!r})")


def run_filecheck_test(kernel_fn):
    run_parser(kernel_fn)   # the kernel must still compile: a front-end error is reported as such
    raise _no_mlir(getattr(kernel_fn, "__name__", "this test"))


def filecheck_test(fn):

    @functools.wraps(fn)
    def test_fn():
        run_filecheck_test(fn)

    return test_fn


__all__ = ["run_parser", "run_filecheck", "run_filecheck_test", "filecheck_test", "NotApplicable"]
