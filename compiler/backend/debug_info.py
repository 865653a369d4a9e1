"""Source line info in the LLVM module: a DISubprogram for the kernel and a DILocation on every
instruction, from the IR op it was lowered from. NVPTX then writes `.file`/`.loc` into the PTX,
and ptxas -lineinfo keeps them in the cubin, so profilers (Nsight Compute's source view, nvdisasm
-g) map SASS back to the kernel's Python lines, as with Triton. Ops inlined from another file (a
called @jit function, tl.cdiv) point at that file through a DILexicalBlockFile of the kernel."""
from __future__ import annotations

import os

from llvmlite import ir as ll

from .. import ir
from .llvm_types import I32

# LLVM's module flag behaviours: 2 = warning on a mismatch, 7 = max
_WARNING, _MAX = 2, 7


class LineInfo:
    def __init__(self, module: ll.Module, func: ll.Function, fn: ir.Function, kernel: "LineInfo | None" = None):
        """`kernel`: the kernel's LineInfo, when `func` is one of its device functions (a subprogram
        of the same compile unit)."""
        self.module = module
        self._files: dict[str, object] = {} if kernel is None else kernel._files
        self._scopes: dict[str, object] = {}
        self._locs: dict[tuple, object] = {}
        kernel_file = fn.loc.file if fn.loc.file and not fn.loc.file.startswith("<") else f"<{fn.name}>"
        self.kernel_file = kernel_file
        if kernel is not None:
            cu = self.cu = kernel.cu
        else:
            cu = self.cu = module.add_debug_info("DICompileUnit", {
                "language": ll.DIToken("DW_LANG_C"), "file": self._file(kernel_file), "producer": "blocktune",
                "isOptimized": True, "runtimeVersion": 0, "emissionKind": ll.DIToken("DebugDirectivesOnly"),
            }, is_distinct=True)
        fn_type = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})
        line = self.def_line = max(fn.loc.line, 0)
        self.subprogram = module.add_debug_info("DISubprogram", {
            "name": fn.name, "linkageName": fn.name, "scope": self._file(kernel_file), "file": self._file(kernel_file),
            "line": line, "type": fn_type, "scopeLine": line,
            "spFlags": ll.DIToken("DISPFlagDefinition | DISPFlagOptimized"), "unit": cu,
        }, is_distinct=True)
        func.set_metadata("dbg", self.subprogram)
        self._scopes[kernel_file] = self.subprogram
        if kernel is None:
            module.add_named_metadata("llvm.dbg.cu", cu)
            for behaviour, name, value in ((_WARNING, "Debug Info Version", 3), (_MAX, "Dwarf Version", 2)):
                module.add_named_metadata("llvm.module.flags", [I32(behaviour), name, I32(value)])
        self.entry = self.at(fn.loc)

    def _file(self, path: str):
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = self.module.add_debug_info(
                "DIFile", {"filename": os.path.basename(path), "directory": os.path.dirname(path)})
        return f

    def _scope(self, path: str):
        s = self._scopes.get(path)
        if s is None:
            s = self._scopes[path] = self.module.add_debug_info(
                "DILexicalBlockFile", {"scope": self.subprogram, "file": self._file(path), "discriminator": 0})
        return s

    def at(self, loc: ir.Loc):
        """The DILocation of `loc` (the kernel's own line where the op has none)."""
        if loc is None or loc.line <= 0 or not loc.file or loc.file.startswith("<"):
            loc = None
        key = (loc.file, loc.line, loc.col) if loc is not None else None
        d = self._locs.get(key)
        if d is None:
            if loc is None:
                line, col, scope = self.def_line, 0, self.subprogram
            else:
                line, col, scope = loc.line, loc.col + 1, self._scope(loc.file)
            d = self._locs[key] = self.module.add_debug_info("DILocation", {"line": line, "column": col, "scope": scope})
        return d
