"""`blocktune compile`: compile one kernel of a file and print its IR, LLVM IR or PTX.

    blocktune compile kernels.py::add_kernel --signature x_ptr=*fp32,y_ptr=*fp32,n=i32 \\
        --constexpr BLOCK_SIZE=1024 --num-warps 4 --target sm_90 --emit ptx

The file is parsed, never executed (`jit_from_source`); top-level statements that are not triton
imports, @jit functions or literal constants (`import torch`, `if __name__ == "__main__":`, ...)
are skipped with a note, or refused with `--strict` (what the service does). `--signature` takes
`name=type` pairs or Triton's positional form (`*fp32,*fp32,i32`, over the non-constexpr
parameters). A CompilationError prints the diagnostic on stderr and exits with status 1; bad
arguments exit with status 2.
"""
from __future__ import annotations

import argparse
import ast
import sys

from .errors import CompilationError
from .language import dtypes
from .runtime.build import default_target
from .runtime.compile import build_ir, compile as compile_kernel, normalize_signature
from .runtime.source import load_source


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="compile a @jit kernel from a file and print its IR / LLVM IR / PTX",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", metavar="FILE::KERNEL", help="path to a Python file and the @jit function's name")
    p.add_argument("--signature", "-s", required=True,
                   help="types of the runtime parameters: 'x_ptr=*fp32,n=i32' or positional '*fp32,i32'")
    p.add_argument("--constexpr", "-c", action="append", default=[], metavar="NAME=VALUE",
                   help="a compile-time value (repeatable, or comma-separated): BLOCK_SIZE=1024")
    p.add_argument("--num-warps", type=int, default=4)
    p.add_argument("--num-stages", type=int, default=3)
    p.add_argument("--target", default=None, help="sm_XY (default: this machine's GPU, else sm_90)")
    p.add_argument("--divisible-by-16", default="", metavar="NAMES",
                   help="comma-separated parameters known divisible by 16 (pointers: 16-byte aligned)")
    p.add_argument("--equal-to-1", default="", metavar="NAMES",
                   help="comma-separated integer parameters specialized to the value 1")
    p.add_argument("--emit", choices=("ir", "llir", "ptx"), default="ptx")
    p.add_argument("--output", "-o", default=None, help="write to this file instead of stdout")
    p.add_argument("--strict", action="store_true",
                   help="refuse the file (as the service does) when it has top-level statements other than "
                        "triton imports, @jit functions and literal constants; by default they are skipped "
                        "(never executed)")
    p.set_defaults(func=run)


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_signature(text: str):
    items = _split(text)
    if any("=" in i for i in items):
        sig = {}
        for i in items:
            if "=" not in i:
                raise ValueError(f"--signature: mix of 'name=type' and positional types near {i!r}")
            k, v = i.split("=", 1)
            sig[k.strip()] = v.strip()
        return sig
    return items


def parse_value(text: str):
    t = text.strip()
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError):
        pass
    name = t.split(".")[-1]
    for cand in (name, {"float16": "fp16", "float32": "fp32", "float64": "fp64", "bfloat16": "bf16",
                        "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "int1": "i1"}.get(name, "")):
        if cand:
            try:
                return dtypes.from_signature(cand)
            except ValueError:
                pass
    return t


def parse_constexprs(values: list[str]) -> dict:
    out = {}
    for v in values:
        for item in _split(v):
            if "=" not in item:
                raise ValueError(f"--constexpr expects NAME=VALUE, got {item!r}")
            k, val = item.split("=", 1)
            out[k.strip()] = parse_value(val)
    return out


def run(args) -> int:
    if "::" not in args.kernel:
        print("error: the kernel is given as path/to/file.py::kernel_name", file=sys.stderr)
        return 2
    path, name = args.kernel.rsplit("::", 1)
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        signature = parse_signature(args.signature)
        constexprs = parse_constexprs(args.constexpr)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    div16, eq1 = tuple(_split(args.divisible_by_16)), tuple(_split(args.equal_to_1))
    try:
        ignored: list[int] = []
        kernels = load_source(source, filename=path, strict=args.strict, ignored=ignored)
        if ignored:
            print(f"note: {path}: skipped (not executed) top-level statement(s) at line(s) "
                  f"{', '.join(map(str, ignored))}", file=sys.stderr)
        if name not in kernels:
            raise CompilationError(f"no @jit function named '{name}' in {path} (found: "
                                   f"{', '.join(sorted(kernels)) or 'none'})", None, None)
        fn = kernels[name]
        if args.emit == "ir":
            sig = normalize_signature(fn, signature, constexprs)
            text = str(build_ir(fn, sig, constexprs, div16, eq1, args.target or default_target()))   # what the backend gets
        else:
            ck = compile_kernel(fn, signature, constexprs, num_warps=args.num_warps, num_stages=args.num_stages,
                                target=args.target, divisible_by_16=div16, equal_to_1=eq1)
            text = ck.asm[args.emit]
    except CompilationError as e:
        print(str(e), file=sys.stderr)
        return 1
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not text.endswith("\n"):
        text += "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="blocktune")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
