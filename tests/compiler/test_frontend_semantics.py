"""Front-end semantics Triton's tests rely on: returns inside runtime ifs, conditional expressions
that run one side, compile-time Python (`hasattr`, `value.dtype`, keyword loop bounds), Triton's
promotion of Python scalars, `tl.topk`, and Triton's error wording with the bare error as
`__cause__`. Interpret mode against torch references, and every kernel through the NVPTX backend
and ptxas (GPU runs: test_frontend_semantics_gpu.py)."""
from __future__ import annotations

import itertools

import os

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.frontend import generate_ir
from compiler.language.dtypes import from_signature
from tests.compiler.kernels import frontend_semantics as K
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401


def _flag(v, dtype=torch.int32):
    return torch.tensor([v], dtype=dtype)


# ---- returns ----------------------------------------------------------------------------------

@pytest.mark.parametrize("c1,c2,c3", list(itertools.product([False, True], repeat=3)))
def test_return_in_a_nested_runtime_if(interpret, c1, c2, c3):
    vals = [_flag(1), _flag(2), _flag(3)]
    out = _flag(-1)
    K.nested_return_kernel[(1,)](_flag(c1), _flag(c2), _flag(c3), *vals, out)
    expected = (1 if c2 else -1) if c1 else (2 if c3 else 3)
    assert out.item() == expected


@pytest.mark.parametrize("dynamic", [False, True])
def test_return_under_a_compile_time_if_runs_what_follows(interpret, dynamic):
    out = _flag(-1)
    K.return_under_static_if_kernel[(1,)](_flag(1), out, DYNAMIC=dynamic)
    assert out.item() == (0 if dynamic else 1)
    K.return_under_static_if_kernel[(1,)](_flag(0), out, DYNAMIC=dynamic)
    assert out.item() == 1


def test_callee_returns_at_several_depths(interpret, gen):
    x = rand(gen, (16,), torch.int32, -10, 10)
    out = poisoned((16,), torch.int32)
    K.callee_returns_kernel[(1,)](x, out, N=16)
    assert torch.equal(out, torch.where(x < 5, torch.full_like(x, 5), x))


@triton.jit
def _double_if_positive(x):
    if x > 0:
        return x * 2
    tl.device_print("no value")


@triton.jit
def _half_return_kernel(X, Out):
    x = tl.load(X)
    y = _double_if_positive(x)
    if x > 0:
        tl.store(Out, y)


@pytest.mark.parametrize("x", [7, -3])
def test_a_path_that_falls_through_returns_an_undefined_value(interpret, x):
    """As in Triton (its `ub.poison`): a function that returns a value on some paths returns an
    undefined value of that type on a path that falls off its end, instead of refusing."""
    out = _flag(-1)
    _half_return_kernel[(1,)](_flag(x), out)
    assert out.item() == (2 * x if x > 0 else -1)


def test_the_undefined_return_value_is_llvm_poison():
    ck = triton.compile(_half_return_kernel, signature=dict(X="*i32", Out="*i32"), num_warps=4, target="sm_90")
    assert "poison=True" in ck.asm["ir"] and "poison" in ck.asm["llir"]
    ptxas.report(ck.asm["ptx"])


@triton.jit
def _return_under_assigned_false(x):
    a = False
    if a:
        return x


@triton.jit
def _return_under_constexpr_false(x):
    a: tl.constexpr = False
    if a:
        return x


def test_an_if_on_an_assigned_bool_returns_as_a_runtime_if():
    """`a = False` is an int1 tensor in Triton, so `if a: return x` is a runtime `if` there and the
    function returns x's type (undefined: the path taken falls through); `a: tl.constexpr = False`
    drops the branch at compile time, and the function returns nothing, in both."""
    @triton.jit
    def kernel(Out):
        tl.store(Out, _return_under_assigned_false(0))

    ck = triton.compile(kernel, signature=dict(Out="*i32"), num_warps=4, target="sm_90")
    assert "i32 poison" in ck.asm["llir"]
    ptxas.report(ck.asm["ptx"])

    @triton.jit
    def static_kernel(Out):
        tl.store(Out, _return_under_constexpr_false(0))

    with pytest.raises(triton.CompilationError, match="expected a tensor or a number, got NoneType None"):
        generate_ir(static_kernel, {"Out": from_signature("*i32")}, {})


def test_return_inside_a_loop_is_still_refused():
    @triton.jit
    def kernel(X, N):
        for i in range(N):
            if tl.load(X + i) < 0:
                return
            tl.store(X + i, 0)

    with pytest.raises(triton.CompilationError, match="Cannot have `return` statements inside `while` or `for` statements in triton"):
        generate_ir(kernel, {"X": from_signature("*i32"), "N": from_signature("i32")}, {})


# ---- conditional expressions -----------------------------------------------------------------

@pytest.mark.parametrize("flag", [0, 1])
def test_conditional_expression_runs_only_the_chosen_side(interpret, gen, flag):
    N = 8
    x = rand(gen, (N + 1,), torch.float32)
    out = poisoned((2 * N + 1,), torch.float32)
    count = torch.zeros(2, dtype=torch.int32)
    K.ifexp_effects_kernel[(1,)](_flag(flag), x, out, count, N=N)
    stored, other = (out[:N], out[N:2 * N]) if flag else (out[N:2 * N], out[:N])
    assert torch.equal(stored, x[:N]) and torch.isnan(other).all()
    assert out[2 * N].item() == (x[N].item() if flag else -1.0)
    assert count.tolist() == ([1, 0] if flag else [0, 1])


def test_pure_conditional_expression_is_a_select():
    """Sides without effects are computed before a select (no branch), as before."""
    @triton.jit
    def kernel(X, Y):
        x = tl.load(X)
        tl.store(Y, x * 2 if x > 0 else x - 1)

    fn = generate_ir(kernel, {"X": from_signature("*fp32"), "Y": from_signature("*fp32")}, {})
    names = [op.name for op in fn.walk()]
    assert "if" not in names and "select" in names


# ---- compile-time Python on kernel values -----------------------------------------------------

def test_loop_bounds_by_keyword(interpret):
    out = _flag(-1)
    K.static_range_kwargs_kernel[(1,)](out, N=100, STEP=7)
    assert out.item() == 2 * sum(range(0, 100, 7))


@pytest.mark.parametrize("value,dtype,expected", [(37, torch.int32, 37), (100000, torch.int32, 42),
                                                  (100000, torch.int64, 100000), (84.0, torch.float32, 84.0)])
def test_hasattr_and_isinstance_decide_at_compile_time(interpret, value, dtype, expected):
    x = torch.full((1,), value, dtype=dtype)
    has = _flag(-1)
    K.hasattr_kernel[(1,)](x, has)
    assert x.item() == expected and has.item() == 1


@pytest.mark.parametrize("fn,ref", [("j0", torch.special.bessel_j0), ("y1", torch.special.bessel_y1),
                                    ("cyl_bessel_i0", torch.special.i0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_getattr_with_a_constexpr_name(interpret, gen, fn, ref, dtype):
    x = rand(gen, (128,), dtype, 0.1, 5.0)
    out = poisoned((128,), dtype)
    K.getattr_kernel[(1,)](x, out, FN=fn, N=128)
    torch.testing.assert_close(out, ref(x.double()).to(dtype))


def test_methods_of_a_number_make_it_a_scalar_tensor(interpret):
    out = torch.full((1,), -1, dtype=torch.int64)
    K.number_method_kernel[(1,)](out, START=2**35, N=20)
    assert out.item() == sum(range(2**35, 2**35 + 20))


def test_where_with_a_non_boolean_condition_warns_as_in_triton():
    @triton.jit
    def kernel(X, Out):
        offs = tl.arange(0, 16)
        tl.store(Out + offs, tl.where(tl.load(X + offs), 1.0, 2.0))

    with pytest.warns(UserWarning, match="tl.where with a non-boolean condition is deprecated.*uint32"):
        generate_ir(kernel, {"X": from_signature("*u32"), "Out": from_signature("*fp32")}, {})


def test_a_tuple_of_constexprs_holds_numbers(interpret):
    out = _flag(-1)
    K.constexpr_tuple_kernel[(1,)](out, tuple(tl.constexpr(v) for v in (2, 3, 7)))
    assert out.item() == 42


def test_aggregates_and_constexpr_functions(interpret, gen):
    """Triton's tl.core._aggregate and @triton.constexpr_function."""
    x, y = rand(gen, (16,), torch.float32), rand(gen, (16,), torch.float32)
    out = poisoned((64,), torch.float32)
    K.aggregate_kernel[(1,)](x, y, out, N=16)
    assert torch.equal(out[:16], x * 3 + y) and torch.equal(out[16:32], ((x + y) - x) - y)
    assert torch.equal(out[32:], torch.arange(32, dtype=torch.float32))
    assert K._twice(7) == 14                                   # from Python it is the function


def test_an_aggregate_must_set_its_fields():
    @tl.core._aggregate
    class Half:
        a: tl.tensor
        b: tl.tensor

        def __init__(self, a):
            self.a = a

    @triton.jit
    def kernel(X):
        h = Half(tl.load(X))
        tl.store(X, h.a)

    with pytest.raises(triton.CompilationError, match="constructor for Half did not initialize attribute 'b'"):
        generate_ir(kernel, {"X": from_signature("*fp32")}, {})


@pytest.mark.parametrize("args", [(1.0, float("nan")), (1.0, -0.0)])
def test_compile_time_min_max_refuse_nan_and_negative_zero(args):
    """Python's min/max depend on the argument order there (Triton refuses them too)."""
    @triton.jit
    def kernel(X, A: tl.constexpr, B: tl.constexpr):
        tl.store(X, min(A, B))

    with pytest.raises(triton.CompilationError, match="min\\(\\) of compile-time values cannot take NaN or -0.0"):
        generate_ir(kernel, {"X": from_signature("*fp32")}, {"A": args[0], "B": args[1]})


def test_type_of_compile_time_values(interpret):
    out = torch.zeros(8, dtype=torch.int32)
    K.constexpr_type_kernel[(1,)](out, (5, 1), N=8)
    assert (out == 5).all()
    assert tl.constexpr(3).type == tl.constexpr_type(3) != tl.constexpr_type(4)


def test_dtype_annotations_type_scalar_parameters(interpret):
    out = torch.zeros(8)
    K.annotated_scalars_kernel[(1,)](out, 1.0009765625, 1, N=8)   # 1 + 2**-10: exact in fp16
    assert torch.equal(out, torch.arange(8) + 2.0009765625)
    sig, *_ = K.annotated_scalars_kernel.specialize((out, 0.1, 1, 8), interpret=True)
    assert sig == {"Out": "*fp32", "half": "fp16", "small": "u8"}   # an annotated 1 is not specialized


def test_getattr_needs_a_compile_time_name():
    @triton.jit
    def kernel(X, i):
        tl.store(X, getattr(tl, i))

    with pytest.raises(triton.CompilationError, match="getattr\\(\\) needs an attribute name known at compile time"):
        generate_ir(kernel, {"X": from_signature("*fp32"), "i": from_signature("i32")}, {})


@pytest.mark.parametrize("x", [None, 1, 2])
def test_hasattr_of_none_and_numbers(interpret, x):
    has = _flag(-1)
    K.hasattr_kernel[(1,)](x, has)
    assert has.item() == (1 if x == 2 else 0)   # 2 is a runtime i32 scalar; 1 is specialized to a constant


def test_dtype_of_a_python_number(interpret):
    out = poisoned((16,), torch.int32)
    K.literal_dtype_kernel[(1,)](out, BLOCK=16)
    assert torch.equal(out, torch.ones(16, dtype=torch.int32))


def test_a_namedtuple_is_built_in_a_kernel(interpret, gen):
    from typing import NamedTuple

    class Span(NamedTuple):
        ptr: object
        n: int

    @triton.jit
    def shifted(span):
        return Span(ptr=span.ptr + 1, n=span.n - 1)

    @triton.jit
    def kernel(X, Y, N: tl.constexpr):
        s = shifted(Span(X, N))
        offs = tl.arange(0, N)
        tl.store(Y + offs, tl.load(s.ptr + offs, mask=offs < s.n, other=0.0))

    x = rand(gen, (8,), torch.float32)
    y = poisoned((8,), torch.float32)
    kernel[(1,)](x, y, N=8)
    assert torch.equal(y[:7], x[1:]) and y[7].item() == 0.0


def test_uint8_with_a_python_int_stays_uint8(interpret, gen):
    x = rand(gen, (32,), torch.uint8, 0, 255)
    out = poisoned((32,), torch.uint8)
    K.uint_with_literal_kernel[(1,)](x, out, N=32)
    assert torch.equal(out, ((x.to(torch.int64) + 200) % 256 // 3).to(torch.uint8))


def test_pointers_of_tl_pi32_t_are_selected_and_stored_as_integers(interpret, gen):
    a, b = rand(gen, (64,), torch.int64, 0, 2**40), rand(gen, (64,), torch.int64, 0, 2**40)
    cond = rand(gen, (64,), torch.bool)
    out = poisoned((64,), torch.int64)
    K.where_pointers_kernel[(1,)](cond, a, b, out, N=64)
    assert tl.pi32_t == tl.pointer_type(tl.int32) and torch.equal(out, torch.where(cond, a, b))


# ---- tl.topk ------------------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,k", [(1, 8, 8), (4, 64, 8), (2, 512, 1), (8, 16, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_topk(interpret, gen, M, N, k, dtype):
    x = rand(gen, (M, N), dtype, -1000, 1000)
    z = poisoned((M, k), dtype)
    K.topk_kernel[(1,)](x, z, M=M, N=N, K=k)
    assert torch.equal(z, torch.topk(x, k).values)


@pytest.mark.parametrize("k,message", [(3, "k must be a power of two"), (16, "no larger than the dim's size 8")])
def test_topk_rejects_bad_k(k, message):
    with pytest.raises(triton.CompilationError, match=message):
        generate_ir(K.topk_kernel, {"X": from_signature("*fp32"), "Z": from_signature("*fp32")},
                    {"M": 2, "N": 8, "K": k})


# ---- errors: Triton's wording, the bare error as __cause__ --------------------------------------

def _compile_error(body: str, **signature) -> triton.CompilationError:
    ns = {}
    src = "import compiler as triton\nimport compiler.language as tl\n\n@triton.jit\ndef kernel(X):\n" + \
        "".join(f"    {line}\n" for line in body.splitlines())
    import linecache
    filename = f"<frontend-semantics-{abs(hash(src))}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    with pytest.raises(triton.CompilationError) as info:
        generate_ir(ns["kernel"], {"X": from_signature("*fp32")}, {})
    return info.value


@pytest.mark.parametrize("body,cause", [
    ("tl.program_id(3)", "program_id axis must be 0, 1, or 2 but got 3"),
    ("tl.expand_dims(tl.arange(0, 4), -3)", "invalid axis -3. Expected -2 <= axis < 2"),
    ("tl.expand_dims(tl.arange(0, 4), (0, -3))", r"duplicate axes, normalized axes = [0, 0]"),
    ("tl.expand_dims(tl.sum(tl.arange(0, 4)), 1)", "invalid axis 1. Expected -1 <= axis < 1"),
    ("tl.arange(0, 4).to(tl.uint32) % tl.arange(0, 4)",
     "Cannot use /, //, or % with uint32 and int32 because they have different signedness"),
    ("tl.arange(0, 4).to(tl.uint8) + (-1)", "between an unsigned tensor (uint8) and a negative scalar (-1)"),
])
def test_error_cause_carries_the_message(body, cause):
    err = _compile_error(body)
    assert cause in str(err.__cause__) and cause in str(err)
    # a builtin's refusal keeps its frames from the tl function on (Triton's point into its core.py);
    # the code generator's frames are not shown
    tb = err.__cause__.__traceback__
    assert tb is None or f"compiler{os.sep}language{os.sep}" in tb.tb_frame.f_code.co_filename
    assert err.source_line.strip() == body and ":6:" in str(err)


def test_unsupported_tensor_index():
    err = _compile_error("X[10:]")
    assert "unsupported tensor index: slice(10, None, None)" in str(err)


def test_expand_dims_with_many_axes(interpret):
    @triton.jit
    def kernel(X, N: tl.constexpr):
        offs = tl.arange(0, N)
        t = tl.expand_dims(offs, (-4, 2, -1))
        tl.static_assert(t.shape == [1, N, 1, 1])
        t = tl.expand_dims(offs, (3, 1, 2))
        tl.static_assert(t.shape == [N, 1, 1, 1])
        t = tl.expand_dims(N, -1)
        tl.static_assert(t.shape == [1])
        tl.store(X + tl.reshape(t, [1]) - N, 1.0)

    x = torch.zeros(1)
    kernel[(1,)](x, N=8)
    assert x.item() == 1.0


# ---- the NVPTX backend ----------------------------------------------------------------------------

PTX_CASES = {
    "nested_return": (K.nested_return_kernel, dict.fromkeys(["Cond1", "Cond2", "Cond3", "Val1", "Val2", "Val3", "Out"], "*i32"), {}),
    "return_under_static_if": (K.return_under_static_if_kernel, dict(ExitEarly="*i32", Out="*i32"), dict(DYNAMIC=True)),
    "callee_returns": (K.callee_returns_kernel, dict(X="*i32", Out="*i32"), dict(N=4)),
    "ifexp_effects": (K.ifexp_effects_kernel, dict(Flag="*i32", X="*fp32", Out="*fp32", Count="*i32"), dict(N=128)),
    "static_range_kwargs": (K.static_range_kwargs_kernel, dict(Z="*i32"), dict(N=100, STEP=7)),
    "literal_dtype": (K.literal_dtype_kernel, dict(Out="*i32"), dict(BLOCK=128)),
    "uint_with_literal": (K.uint_with_literal_kernel, dict(X="*u8", Out="*u8"), dict(N=256)),
    "where_pointers": (K.where_pointers_kernel, dict(Cond="*i1", A="*i64", B="*i64", Out="*i64"), dict(N=256)),
    "getattr_libdevice_fp32": (K.getattr_kernel, dict(X="*fp32", Out="*fp32"), dict(FN="cyl_bessel_i1", N=128)),
    "getattr_libdevice_fp64": (K.getattr_kernel, dict(X="*fp64", Out="*fp64"), dict(FN="y0", N=128)),
    "number_method": (K.number_method_kernel, dict(Out="*i64"), dict(START=2**35, N=20)),
    "aggregate": (K.aggregate_kernel, dict(X="*fp32", Y="*fp32", Out="*fp32"), dict(N=16)),
    "annotated_scalars": (K.annotated_scalars_kernel, dict(Out="*fp32", half="fp16", small="u8"), dict(N=128)),
    "topk_fp32": (K.topk_kernel, dict(X="*fp32", Z="*fp32"), dict(M=4, N=64, K=8)),
    "topk_i32_rows": (K.topk_kernel, dict(X="*i32", Z="*i32"), dict(M=8, N=16, K=4)),
    "topk_bf16_wide": (K.topk_kernel, dict(X="*bf16", Z="*bf16"), dict(M=1, N=1024, K=16)),
    "topk_fp16_k1": (K.topk_kernel, dict(X="*fp16", Z="*fp16"), dict(M=2, N=512, K=1)),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_ptx_assembles(name):
    kern, sig, cx = PTX_CASES[name]
    ck = triton.compile(kern, signature=sig, constexprs=cx, num_warps=4, target="sm_90")
    rep = ptxas.report(ck.asm["ptx"])
    assert "0 bytes spill stores" in rep, rep


@pytest.mark.parametrize("hint", [True, False])
def test_nested_hint_statements_vectorize(hint):
    sig = dict(Dst="*fp32", Src="*fp32", Off="*i32", N="i32")
    ptx = triton.compile(K.nested_hints_kernel, signature=sig, constexprs=dict(BLOCK=1024, HINT=hint), target="sm_90",
                         divisible_by_16=list(sig)).asm["ptx"]
    assert ("ld.global.v4.b32" in ptx) is hint and ("st.global.v4.b32" in ptx) is hint


def test_conditional_stores_branch_in_ptx():
    """The atomics of `a if c else b` sit behind a branch on `c`, one per side, and so does the
    load of `tl.load(p) if c else -1.0` (LLVM may merge the two plain stores into one)."""
    kern, sig, cx = PTX_CASES["ifexp_effects"]
    ptx = triton.compile(kern, signature=sig, constexprs=cx, num_warps=4, target="sm_90").asm["ptx"]
    first_branch = ptx.index("bra")
    atomics = [i for i in range(len(ptx)) if ptx.startswith("atom.", i)]
    assert len(atomics) == 2 and all(i > first_branch for i in atomics)
    assert ptx.index("+512]") > first_branch       # X + N: 128 floats past X


# ---- @must_use_result ---------------------------------------------------------------------------

@triton.must_use_result("Square it into a variable.")
@triton.jit
def _square(x):
    return x * x


def test_a_dropped_must_use_result_is_an_error():
    @triton.jit
    def dropped(X):
        x = tl.load(X)
        _square(x)

    @triton.jit
    def kept(X):
        x = _square(tl.load(X))
        tl.store(X, x)

    generate_ir(kept, {"X": from_signature("*fp32")}, {})
    with pytest.raises(triton.CompilationError, match=r"The result of _square is not being used\. Square it into a "
                                                      r"variable\.") as info:
        generate_ir(dropped, {"X": from_signature("*fp32")}, {})
    assert info.value.source_line.strip() == "_square(x)"


def test_a_dropped_tl_advance_is_an_error():
    @triton.jit
    def kernel(X, N):
        p = tl.make_block_ptr(X, (N,), (1,), (0,), (16,), (0,))
        tl.advance(p, (16,))
        tl.store(p, tl.zeros((16,), tl.float32), boundary_check=(0,))

    with pytest.raises(triton.CompilationError, match="The result of tl.advance is not being used. Note that "
                                                      "tl.advance does not have any side effects"):
        generate_ir(kernel, {"X": from_signature("*fp32"), "N": from_signature("i32")}, {})


def test_conditional_expression_on_a_block_with_effects_is_refused():
    @triton.jit
    def kernel(X, Y):
        offs = tl.arange(0, 16)
        m = offs < 8
        tl.store(Y + offs, tl.load(X + offs) if m else 0.0)

    with pytest.raises(triton.CompilationError, match="on a block condition would run both sides"):
        generate_ir(kernel, {"X": from_signature("*fp32"), "Y": from_signature("*fp32")}, {})


def test_conditional_expression_on_a_block_of_values_is_a_select(interpret, gen):
    @triton.jit
    def kernel(X, Y):
        offs = tl.arange(0, 16)
        x = tl.load(X + offs)
        tl.store(Y + offs, x * 2 if x > 0 else -x)

    x, y = rand(gen, (16,), torch.float32), poisoned((16,), torch.float32)
    kernel[(1,)](x, y)
    assert torch.equal(y, torch.where(x > 0, x * 2, -x))


# ---- reductions over every axis, keeping them ----------------------------------------------------

@triton.jit
def _reduce_all_keep_dims_kernel(X, Out, M: tl.constexpr, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    mx = tl.max(x, axis=None, keep_dims=True)
    tl.static_assert(mx.shape == [1, 1])
    s = tl.reduce(x, None, _add, keep_dims=True)
    tl.static_assert(s.shape == [1, 1])
    z = tl.zeros([1, 1], dtype=tl.int32)
    tl.store(Out + z, mx)
    tl.store(Out + 1 + z, s)


@triton.jit
def _add(a, b):
    return a + b


def test_reduction_over_every_axis_keeps_dims(interpret, gen):
    x = rand(gen, (4, 8), torch.float32)
    out = poisoned((2,), torch.float32)
    _reduce_all_keep_dims_kernel[(1,)](x, out, M=4, N=8)
    assert out[0].item() == x.max().item()
    torch.testing.assert_close(out[1], x.sum(), rtol=1e-6, atol=1e-6)


def test_reduction_over_every_axis_keeping_dims_assembles():
    ck = triton.compile(_reduce_all_keep_dims_kernel, signature=dict(X="*fp32", Out="*fp32"),
                        constexprs=dict(M=32, N=64), num_warps=4, target="sm_90")
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"])
