"""The front end alone: the IR it builds (types, promotion, control flow), without running anything."""
from __future__ import annotations

import pytest

import compiler
import compiler.language as tl
from compiler import ir
from compiler.frontend import generate_ir
from compiler.language.dtypes import from_signature


def build(kernel, constexprs=None, **signature):
    return generate_ir(kernel, {k: from_signature(v) for k, v in signature.items()}, constexprs or {})


def ops(fn, name):
    return [op for op in fn.walk() if op.name == name]


@compiler.jit
def _binary(x_ptr, y_ptr, out_ptr, OP: tl.constexpr):
    x = tl.load(x_ptr)
    y = tl.load(y_ptr)
    if OP == "add":
        z = x + y
    elif OP == "div":
        z = x / y
    elif OP == "mod":
        z = x % y
    elif OP == "scalar_mul":
        z = x * 2.0
    else:
        z = x + 3
    tl.store(out_ptr, z)


@pytest.mark.parametrize("a,b,op,expected", [
    ("fp16", "fp32", "add", "fp32"),
    ("i32", "fp16", "add", "fp16"),
    ("fp16", "fp16", "div", "fp32"),      # / on halves computes in fp32, as Triton does
    ("bf16", "bf16", "add", "bf16"),
    ("bf16", "fp16", "add", "fp16"),     # Triton checks fp16 before bf16
    ("i8", "i32", "add", "i32"),
    ("u32", "i32", "add", "u32"),
    ("i32", "i32", "div", "fp32"),
    ("i64", "i32", "mod", "i64"),
    ("fp16", "fp16", "scalar_mul", "fp16"),  # Python scalars are weakly typed
    ("i8", "i8", "other", "i8"),
    ("fp64", "fp32", "add", "fp64"),
])
def test_promotion(a, b, op, expected):
    fn = build(_binary, {"OP": op}, x_ptr="*" + a, y_ptr="*" + b, out_ptr="*fp64")
    (store,) = ops(fn, "store")
    value = store.operands[1]
    if expected != "fp64":
        assert value.owner.name == "cast"  # stored through an implicit cast to fp64
        value = value.owner.operands[0]
    assert value.dtype == from_signature(expected)


def test_mod_with_mixed_signedness_is_rejected():
    with pytest.raises(compiler.CompilationError) as exc:
        build(_binary, {"OP": "mod"}, x_ptr="*i32", y_ptr="*u32", out_ptr="*i32")
    assert "signedness" in str(exc.value)


@compiler.jit
def _loops(x_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    total = 0
    for i in range(0, n, BLOCK):
        acc += tl.load(x_ptr + i + tl.arange(0, BLOCK))
        total += 1
    k = 0
    while k < n:
        k += 3
    s = tl.sum(acc, axis=0)
    if s > 0:
        s = s * 2
    tl.store(x_ptr, s + total + k)


def test_loop_carried_values_become_loop_results():
    fn = build(_loops, {"BLOCK": 128}, x_ptr="*fp32", n="i32")
    (loop,) = ops(fn, "for")
    assert [ir.type_text(t.type) for t in loop.results] == ["<128xfp32>", "i32"]
    (w,) = ops(fn, "while")
    assert [ir.type_text(t.type) for t in w.results] == ["i32"]
    (branch,) = ops(fn, "if")
    assert [str(t.type) for t in branch.results] == ["fp32"]
    assert branch.regions[0].ops[-1].name == "yield" and branch.regions[1].ops[-1].name == "yield"


@compiler.jit
def _two_d(x_ptr, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(x_ptr + rows, tl.argmax(x, axis=1))
    tl.store(x_ptr + cols, tl.max(x.T, axis=1))


def test_two_d_broadcasts_and_reductions():
    fn = build(_two_d, {"M": 16, "N": 32}, x_ptr="*fp32")
    assert {op.attrs["axis"] for op in ops(fn, "expand_dims")} == {0, 1}
    kinds = [(op.attrs["kind"], str(op.result.type)) for op in ops(fn, "reduce")]
    assert kinds == [("argmax", "<16xi32>"), ("max", "<32xfp32>")]
    assert ops(fn, "trans")[0].attrs["perm"] == (1, 0)


@compiler.jit
def _helper(x, FACTOR: tl.constexpr):
    if FACTOR == 1:
        return x
    return x * FACTOR


@compiler.jit
def _calls(x_ptr):
    tl.store(x_ptr, _helper(tl.load(x_ptr), 3) + _helper(tl.load(x_ptr), FACTOR=1))


def test_jit_calls_are_inlined_and_constexpr_branches_resolved():
    fn = build(_calls, x_ptr="*fp32")
    assert not ops(fn, "if")  # FACTOR is known at compile time
    assert len(ops(fn, "mul")) == 1


@compiler.jit
def _early_exit(x_ptr, n):
    pid = tl.program_id(0)
    if pid >= n:
        return
    tl.store(x_ptr + pid, 1.0)


def test_early_return_guards_the_rest_of_the_kernel():
    fn = build(_early_exit, x_ptr="*fp32", n="i32")
    (branch,) = ops(fn, "if")
    assert not any(op.name == "store" for op in branch.regions[0].ops)
    assert any(op.name == "store" for op in branch.regions[1].ops)


@compiler.jit
def _negative_step(x_ptr):
    for i in range(10, 0, -3):
        tl.store(x_ptr + i, 1.0)


def test_negative_constant_step_counts_upwards():
    fn = build(_negative_step, x_ptr="*fp32")
    (loop,) = ops(fn, "for")
    step = loop.operands[2]
    assert step.owner.name == "const" and step.owner.attrs["value"] == 1


def test_ir_prints_and_locations_point_into_this_file():
    fn = build(_two_d, {"M": 16, "N": 32}, x_ptr="*fp32")
    text = str(fn)
    assert text.startswith("func @_two_d(") and "reduce(" in text
    load = ops(fn, "load")[0]
    assert load.loc.file.endswith("test_frontend.py")
    import inspect
    lines, start = inspect.getsourcelines(_two_d.fn)
    assert load.loc.line == start + next(i for i, line in enumerate(lines) if "tl.load" in line)


@compiler.jit
def _bad_shape(x_ptr, n):
    tl.store(x_ptr + tl.arange(0, n), 1.0)


@compiler.jit
def _bad_construct(x_ptr):
    try:
        tl.store(x_ptr, 1.0)
    except Exception:
        pass


@compiler.jit
def _unknown_name(x_ptr):
    tl.store(x_ptr, undefined_thing)  # noqa: F821


@pytest.mark.parametrize("kernel,needle", [
    (_bad_shape, "compile-time constant"),
    (_bad_construct, "unsupported Python construct in a kernel: Try"),
    (_unknown_name, "name 'undefined_thing' is not defined"),
])
def test_errors_name_file_line_and_column(kernel, needle):
    sig = {"x_ptr": "*fp32"}
    if "n" in kernel.arg_names:
        sig["n"] = "i32"
    with pytest.raises(compiler.CompilationError) as exc:
        build(kernel, **sig)
    text = str(exc.value)
    assert needle in text
    assert "test_frontend.py:" in text.splitlines()[0]
    assert exc.value.loc.line > kernel.first_lineno


def test_dead_code_is_removed():
    fn = build(_binary, {"OP": "scalar_mul"}, x_ptr="*fp32", y_ptr="*fp32", out_ptr="*fp32")
    used = {o.id for op in fn.walk() for o in op.operands if o is not None}
    for op in fn.walk():
        if op.results and op.name not in ir.SIDE_EFFECTS:
            assert any(r.id in used for r in op.results), op
