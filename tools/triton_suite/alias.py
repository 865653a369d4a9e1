"""The import hook behind the `triton` shim: `triton.X` is the very module object `compiler.X`.

Triton's tests import `triton`, `triton.language`, `triton.runtime.jit`, `triton.compiler.errors`...
The shim answers each such import with blocktune's module of the same path under `compiler`
(`triton.compiler.*` with `compiler.*`: blocktune's top-level package is Triton's `triton.compiler`
too), registered under both names, so `triton.jit is compiler.jit` and a class is never loaded
twice. A module blocktune does not have is a ModuleNotFoundError that names the blocktune module
it looked for, and the test that needs it fails with that message.

The modules that live in the shim's own `triton/` folder (Triton's test-support files, copied from
the checkout by shim.py) load from there instead.

This file is copied into the shim directory as a top-level module, so it uses the standard library
only.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

# Triton module path prefix -> blocktune's, longest first; anything else under `triton` maps to
# the same path under `compiler`.
RENAMES = (("triton.compiler", "compiler"), ("triton", "compiler"))


def blocktune_name(triton_name: str) -> str:
    """`triton.language.core` -> `compiler.language.core`; `triton.compiler.errors` -> `compiler.errors`."""
    for src, dst in RENAMES:
        if triton_name == src or triton_name.startswith(src + "."):
            return dst + triton_name[len(src):]
    raise ValueError(f"{triton_name!r} is not a triton module")


class _Existing(importlib.abc.Loader):
    """Hands the import system a module that is already loaded (blocktune's)."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module  # the import system keeps its __name__/__spec__: they are set already

    def exec_module(self, module):
        pass


class CompilerAlias(importlib.abc.MetaPathFinder):
    def __init__(self, local_root: str):
        self.local_root = local_root  # the shim's triton/ folder

    def _local_spec(self, fullname: str):
        rel = os.path.join(self.local_root, *fullname.split(".")[1:])
        if os.path.isfile(rel + ".py"):
            return importlib.util.spec_from_file_location(fullname, rel + ".py")
        init = os.path.join(rel, "__init__.py")
        if fullname != "triton" and os.path.isfile(init):
            return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[rel])
        return None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "triton" and not fullname.startswith("triton."):
            return None
        local = self._local_spec(fullname)
        if local is not None:
            return local
        name = blocktune_name(fullname)
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and not name.startswith(e.name):
                raise  # blocktune's module exists but an import inside it failed
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocktune has no {name!r})",
                                      name=fullname) from None
        return importlib.util.spec_from_loader(fullname, _Existing(module))


def install(local_root: str) -> None:
    """Put the hook first on sys.meta_path (once) and make `triton` the `compiler` package."""
    if not any(isinstance(f, CompilerAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, CompilerAlias(local_root))
    sys.modules["triton"] = importlib.import_module("compiler")
