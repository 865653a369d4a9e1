"""The front end refuses absurd compile-time work and values (compiler.frontend.limits) with a
`CompilationError` at file:line:col that shows the source line — before doing the work: each case
here would otherwise run for minutes or take gigabytes (`9**9**9`, `'a' * 10**9`, ...)."""
from __future__ import annotations

import re
import time

import pytest

import compiler
from compiler.frontend import limits
from compiler.runtime import compile as rc

HEAD = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
HEAD_LINES = HEAD.count("\n")      # the body starts on line HEAD_LINES + 1
TAIL = "    tl.store(x_ptr + tl.arange(0, BLOCK), 0)\n"


def build(source: str, name: str = "k", block: int = 16):
    """jit_from_source + the front end on one specialization, as the service and the tuner run them."""
    fn = compiler.jit_from_source(source, name, filename="<submitted>")
    constexprs = {"BLOCK": block} if "BLOCK" in fn.arg_names else {}
    return rc.build_ir(fn, rc.normalize_signature(fn, {"x_ptr": "*i32"}, constexprs), constexprs, (), ())


def refused(source: str, *, line: int, col_of: str | None, message: str, within_s: float = 30.0) -> str:
    """Compile `source`; assert a CompilationError at <submitted>:line:(column of `col_of` on that
    line, any column when None) that shows the line and matches `message`, raised within `within_s`
    seconds."""
    t = time.monotonic()
    with pytest.raises(compiler.CompilationError) as info:
        build(source)
    took = time.monotonic() - t
    text = str(info.value)
    src_line = source.splitlines()[line - 1]
    col = src_line.index(col_of) + 1 if col_of is not None else r"\d+"
    assert re.search(f"<submitted>:{line}:{col}:", text), text
    assert src_line.strip()[:100] in text, text
    assert re.search(message, text), text
    assert took < within_s, f"refused only after {took:.1f} s"
    return text


def body(*lines: str) -> str:
    return HEAD + "".join(f"    {ln}\n" for ln in lines) + TAIL


def test_huge_power_is_refused_before_it_is_computed():
    text = refused(body("X = 9**9**9"), line=HEAD_LINES + 1, col_of="9**9**9",
                   message=r"9 \*\* 387420489 would have about \d+ bits, over the limit of 4096 bits", within_s=5)
    assert "X = 9**9**9" in text


def test_huge_shift_and_big_int_constants():
    refused(body("x = 1 << 10**9"), line=HEAD_LINES + 1, col_of="1 <<", message="1 << 1000000000 would have")
    refused(body("x = 0x" + "f" * 2000), line=HEAD_LINES + 1, col_of="0x",
            message="compile-time integer of 8000 bits is over the limit of 4096 bits")
    # repeated squaring grows each step: refused at the step that passes the bound
    refused(body("x = 3", "for i in tl.static_range(20):", "    x = x * x"), line=HEAD_LINES + 3, col_of="x * x",
            message="over the limit of 4096 bits")


def test_huge_strings_and_tuples():
    refused(body("s = 'a' * 10**9"), line=HEAD_LINES + 1, col_of="'a'",
            message="str \\* 1000000000 would have 1000000000 characters, over the limit of 100000")
    refused(body("t = (1,) * 10**8"), line=HEAD_LINES + 1, col_of="(1,)", message="over the limit of 10000")
    refused(body("s = 'ab'", "for i in tl.static_range(40):", "    s = s + s"), line=HEAD_LINES + 3, col_of="s + s",
            message="str of 131072 characters is over the limit of 100000")
    refused(body("s = f'{1:>999999999}'"), line=HEAD_LINES + 1, col_of="f'",
            message="format width or precision 999999999 is over the limit")
    refused(body("t = ('a' * 90000,) * 9000", "tl.static_print(t)"), line=HEAD_LINES + 2, col_of="tl.static_print",
            message="text of this compile-time value would be over the limit of 100000")


def test_module_level_constants_are_bounded():
    src = "import triton\nBIG = 0x" + "f" * 2000 + "\n" + HEAD.split("\n", 2)[2] + TAIL
    with pytest.raises(compiler.CompilationError) as info:
        compiler.jit_from_source(src, "k", filename="<submitted>")
    assert "<submitted>:2:7:" in str(info.value) and "module-level constant 'BIG'" in str(info.value)
    assert "integer of 8000 bits" in str(info.value)
    src = "import triton\nDOC = '" + "x" * 200_000 + "'\n" + HEAD.split("\n", 2)[2] + TAIL
    with pytest.raises(compiler.CompilationError, match="str of 200000 characters is over the limit of 100000"):
        compiler.jit_from_source(src, "k", filename="<submitted>")


def test_static_range_is_bounded():
    refused(body("for i in tl.static_range(10**7):", "    x = i"), line=HEAD_LINES + 1, col_of="tl.static_range",
            message="tl.static_range of 10000000 iterations is over the limit of 4096 unrolled iterations; use tl.range",
            within_s=5)
    # over a huge module-level constant
    src = "import triton\nimport triton.language as tl\nN = tl.constexpr(1099511627776)\n\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n" \
          "    for i in tl.static_range(0, N, 2):\n        x = i\n" + TAIL
    refused(src, line=7, col_of="tl.static_range", message="of 549755813888 iterations is over the limit of 4096")


def test_unrolling_that_blows_up_the_ir_is_refused():
    # 4096 unrolled iterations (allowed) of a body of ~6 ops: over MAX_IR_OPS
    text = refused(body("acc = tl.zeros((BLOCK,), dtype=tl.int32)", "for i in tl.static_range(4096):",
                        "    acc = acc + tl.load(x_ptr + tl.arange(0, BLOCK) + i)"),
                   line=HEAD_LINES + 3, col_of="acc + tl.load", message=f"more than {limits.MAX_IR_OPS} IR operations")
    assert "static_range" in text


def test_compile_time_evaluation_is_bounded():
    refused(body("a = 0", "for i in tl.static_range(4096):", "    for j in tl.static_range(4096):", "        a = a + 1"),
            line=HEAD_LINES + 4, col_of=None, message=f"more than {limits.MAX_FRONTEND_STEPS} steps")


def test_exponential_inlining_is_bounded():
    src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef f0(x):\n    return x + 1\n"
    for i in range(1, 30):     # each calls the previous twice: 2**29 calls
        src += f"\n@triton.jit\ndef f{i}(x):\n    return f{i - 1}(x) + f{i - 1}(x)\n"
    src += "\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    y = f29(1)\n" + TAIL
    with pytest.raises(compiler.CompilationError, match=f"more than {limits.MAX_FRONTEND_STEPS} steps") as info:
        build(src)
    assert re.search(r"<submitted>:\d+:\d+:", str(info.value))


@pytest.mark.parametrize("stmt,col_of", [
    ("z = tl.zeros((2048, 1024), dtype=tl.float32)", "tl.zeros"),
    ("z = tl.arange(0, 2**21)", "tl.arange"),
    ("z = tl.arange(0, 2048)[:, None] + tl.arange(0, 1024)[None, :]", "tl.arange(0, 2048)[:"),
])
def test_blocks_over_tritons_numel_limit(stmt, col_of):
    refused(body(stmt), line=HEAD_LINES + 1, col_of=col_of,
            message=re.escape(f"exceeds triton maximum tensor numel ({limits.TRITON_MAX_TENSOR_NUMEL})"))


def test_the_largest_block_triton_allows_compiles():
    build(body("z = tl.zeros((1024, 1024), dtype=tl.float32)", "y = tl.arange(0, 2**20)"))


def test_deep_nesting_after_parsing():
    refused(body("x = " + "1+" * 150 + "1"), line=HEAD_LINES + 1, col_of="x =",
            message="nests more than 100 levels deep")
    refused(body("x = " + "[" * 120 + "1" + "]" * 120), line=HEAD_LINES + 1, col_of="x =",
            message="nests more than 100 levels deep")


@pytest.mark.parametrize("stmt,message", [
    ("x = " + "-" * 100_000 + "1", "nests too deeply to parse"),            # the parser: MemoryError
    ("x = " + "1+" * 5000 + "1", "nests too deeply to parse"),              # the parser: RecursionError
    ("x = a" + ".b" * 5000, "nests too deeply to parse"),
])
def test_nesting_that_python_cannot_parse(stmt, message):
    refused(body(stmt), line=HEAD_LINES + 1, col_of="x =", message=message, within_s=10)


def test_elif_chain_too_long_to_parse():
    chain = ["if BLOCK == 0:", "    x = 0"] + [ln for i in range(4000) for ln in (f"elif BLOCK == {i + 1}:", "    x = 1")]
    src = body(*chain)
    with pytest.raises(compiler.CompilationError, match="nests too deeply to parse") as info:
        build(src)
    m = re.search(r"<submitted>:(\d+):5:", str(info.value))
    assert m and src.splitlines()[int(m.group(1)) - 1].strip().startswith("elif"), str(info.value)


def test_nested_inlined_calls_that_exhaust_the_stack_are_located():
    """Each function is within the nesting bound; inlined into one another they are not."""
    src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef f0(x):\n    return x + 1\n"
    for i in range(1, 33):
        src += f"\n@triton.jit\ndef f{i}(x):\n    return " + "(" * 25 + f"f{i - 1}(x)" + "+1)" * 25 + "\n"
    src += "\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    y = f32(1)\n" + TAIL
    with pytest.raises(compiler.CompilationError, match="the kernel nests too deeply") as info:
        build(src)
    m = re.search(r"<submitted>:(\d+):(\d+):", str(info.value))
    assert m and "return (((" in src.splitlines()[int(m.group(1)) - 1], str(info.value)


def test_long_source_lines_are_shown_around_the_column():
    text = refused(body("x = " + "1+" * 150 + "1"), line=HEAD_LINES + 1, col_of="x =", message="levels deep")
    assert max(len(ln) for ln in text.splitlines()) < 200, text
