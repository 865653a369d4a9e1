"""Import `compiler.backend` / `compiler.ir` even while other parts of `compiler` are unfinished.

If `import compiler` fails (a sibling module not written yet), a bare package object is put in
`sys.modules` so that the submodules (ir, language, backend) still import.
"""
from __future__ import annotations

import importlib
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ensure_compiler():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    try:
        return importlib.import_module("compiler")
    except Exception:
        for k in [k for k in sys.modules if k == "compiler" or k.startswith("compiler.")]:
            del sys.modules[k]
        pkg = types.ModuleType("compiler")
        pkg.__path__ = [os.path.join(ROOT, "compiler")]
        pkg.__file__ = os.path.join(ROOT, "compiler", "__init__.py")
        sys.modules["compiler"] = pkg
        return pkg


ensure_compiler()
