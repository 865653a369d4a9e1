"""Shape ops, scans, custom reductions, sorts, histograms and gathers: interpret mode against
numpy/torch, and every kernel through the NVPTX backend and ptxas (GPU runs: test_shape_ops_gpu.py)."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
from compiler import ptxas
from compiler.backend import nvptx
from tests.compiler.kernels import shape_ops as SK
from tests.compiler.kernels import shape_refs as R
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401


# ---- join / split / interleave -------------------------------------------------------------------

@pytest.mark.parametrize("M,N", [(1, 4), (4, 8), (16, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int64])
def test_join_split_interleave(interpret, gen, M, N, dtype):
    x, y = rand(gen, (M, N), dtype, -100, 100), rand(gen, (M, N), dtype, -100, 100)
    joined, a, b = poisoned((M, N, 2), dtype), poisoned((M, N), dtype), poisoned((M, N), dtype)
    inter = poisoned((M, 2 * N), dtype)
    SK.join_split_kernel[(1,)](x, y, joined, a, b, inter, M=M, N=N)
    R.check_join_split_interleave(x, y, joined, a, b, inter)


@pytest.mark.parametrize("N", [2, 64])
def test_split_of_loaded_pairs(interpret, gen, N):
    x = rand(gen, (N, 2), torch.float32)
    a, b = poisoned((N + 1,), torch.float32), poisoned((N + 1,), torch.float32)
    SK.split_loaded_kernel[(1,)](x, a, b, N=N)
    assert torch.equal(a[:N], x[:, 0]) and torch.equal(b[:N], x[:, 1])
    assert a[N] == x[0, 1] and b[N] == x[0, 0]


@pytest.mark.parametrize("N", [1, 4, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int64])
def test_cat_holds_both_blocks(interpret, gen, N, dtype):
    x, y = rand(gen, (N,), dtype, -100, 100), rand(gen, (N,), dtype, -100, 100)
    z, total = poisoned((2 * N,), dtype), poisoned((1,), torch.float64)
    SK.cat_kernel[(1,)](x, y, z, total, N=N)
    R.check_cat(x, y, z, total)


def test_cat_needs_can_reorder_and_equal_blocks():
    src = '''
import compiler as triton
import compiler.language as tl
@triton.jit
def ordered(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X + tl.arange(0, 8), tl.cat(x, x))
@triton.jit
def mixed(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X + tl.arange(0, 8), tl.cat(x, x.to(tl.int32), can_reorder=True))
'''
    ns = _exec(src)
    with pytest.raises(triton.CompilationError, match=r"tl.cat may reorder elements and needs can_reorder=True"):
        triton.compile(ns["ordered"], signature={"X": "*fp32"}, target="sm_90")
    with pytest.raises(triton.CompilationError, match=r"tl.cat needs two 1-D blocks of one shape and type, got <4xfp32> and <4xi32>"):
        triton.compile(ns["mixed"], signature={"X": "*fp32"}, target="sm_90")


def test_join_needs_one_type():
    src = '''
import compiler as triton
import compiler.language as tl
@triton.jit
def k(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X + tl.arange(0, 4), tl.sum(tl.join(x, x.to(tl.int32)), 1))
'''
    ns = _exec(src)
    with pytest.raises(triton.CompilationError, match=r"(?s)tl.join needs two values of one type.*\n    tl.store\(X \+ tl.arange\(0, 4\), tl.sum\(tl.join"):
        triton.compile(ns["k"], signature={"X": "*fp32"}, target="sm_90")


# ---- custom reductions and scans ------------------------------------------------------------------

def _reduce_ref(x, axis, op):
    if op == 0:
        return x.double().sum(axis)
    return x.max(axis).values


@pytest.mark.parametrize("M,N", [(1, 32), (8, 16), (32, 64), (4, 256)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op,keep", [(0, False), (0, True), (1, False), (2, False), (3, False)])
def test_reduce_custom_combine(interpret, gen, M, N, axis, op, keep):
    dtype = torch.int32 if op == 2 else torch.float32
    x = rand(gen, (M, N), dtype, -8, 8) if op == 2 else rand(gen, (M, N), dtype)
    n_out = N if axis == 0 else M
    out, idx = poisoned((n_out,), dtype), poisoned((n_out,), torch.int32)
    SK.reduce_combine_kernel[(1,)](x, out, idx, M=M, N=N, AXIS=axis, OP=op, KEEP=keep)
    ref = _reduce_ref(x, axis, op)
    assert_close(out, ref.to(out.dtype) if op else ref, dtype=dtype)
    if op == 2:  # ties: the first index, as torch.argmax's first-occurrence rule
        vals = x.numpy()
        first = (vals == vals.max(axis, keepdims=True)).argmax(axis)
        assert idx.tolist() == first.tolist()


def test_reduce_custom_all_axes(interpret, gen):
    x = rand(gen, (16, 16), torch.float32)
    out = poisoned((1,), torch.float32)
    SK.reduce_all_kernel[(1,)](x, out, N=16)
    assert_close(out, x.double().sum().reshape(1), dtype=torch.float32)




@pytest.mark.parametrize("M,N", [(1, 64), (4, 32), (16, 128)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", [0, 1, 2, 3])
@pytest.mark.parametrize("reverse", [False, True])
def test_scans(interpret, gen, M, N, axis, op, reverse):
    x = rand(gen, (M, N), torch.float32, 0.9, 1.1) if op == 1 else rand(gen, (M, N), torch.float32)
    y = poisoned((M, N), torch.float32)
    SK.scan_kernel[(1,)](x, y, M=M, N=N, AXIS=axis, OP=op, REVERSE=reverse)
    torch.testing.assert_close(y.double(), R.scan_ref(x, axis, op, reverse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.float16])
def test_cumprod_dtypes(interpret, gen, dtype):
    x = rand(gen, (4, 8), dtype, 1, 2) if not dtype.is_floating_point else rand(gen, (4, 8), dtype, 0.9, 1.1)
    y = poisoned((4, 8), torch.int32 if dtype == torch.int8 else dtype)
    SK.scan_kernel[(1,)](x, y, M=4, N=8, AXIS=1, OP=1, REVERSE=False)
    ref = x.double().cumprod(1)
    if dtype.is_floating_point:
        assert_close(y, ref, dtype=dtype)
    else:  # tl.cumprod of int8 accumulates in int32 as Triton does; the store casts back
        assert torch.equal(y.to(torch.int64), ref.to(torch.int64).to(y.dtype).to(torch.int64))


def test_cumsum_promotes_bf16_and_takes_dtype(interpret, gen):
    x = rand(gen, (128,), torch.bfloat16, -50, 50)
    y, y64 = poisoned((128,), torch.float32), poisoned((128,), torch.int64)
    SK.cumsum_dtype_kernel[(1,)](x, y, y64, N=128)
    torch.testing.assert_close(y.double(), x.double().cumsum(0), rtol=1e-6, atol=1e-4)
    assert torch.equal(y64, x.to(torch.int32).long().cumsum(0) * 4294967296)


@pytest.mark.parametrize("N", [16, 256])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_tuple_scan(interpret, gen, N, reverse):
    a, b = rand(gen, (N,), torch.float32, 0.5, 1.0), rand(gen, (N,), torch.float32)
    h = poisoned((N,), torch.float32)
    SK.linear_recurrence_kernel[(1,)](a, b, h, N=N, REVERSE=reverse)
    torch.testing.assert_close(h.double(), R.linear_recurrence_ref(a, b, reverse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_2d(interpret, gen, axis, reverse):
    a, b = rand(gen, (8, 32), torch.float32, 0.5, 1.0), rand(gen, (8, 32), torch.float32)
    h = poisoned((8, 32), torch.float32)
    SK.linear_recurrence_2d_kernel[(1,)](a, b, h, M=8, N=32, AXIS=axis, REVERSE=reverse)
    torch.testing.assert_close(h.double(), R.linear_recurrence_ref(a, b, reverse, axis), rtol=1e-5, atol=1e-5)


def test_combine_fn_must_be_jit(monkeypatch):
    src = '''
import compiler as triton
import compiler.language as tl
def plain(a, b):
    return a + b
@triton.jit
def k(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X, tl.reduce(x, 0, plain))
'''
    kernel = _exec(src)["k"]
    # a plain function is a global a kernel may not read (Triton's rule) ...
    with pytest.raises(triton.CompilationError, match=r"Cannot access global variable plain"):
        triton.compile(kernel, signature={"X": "*fp32"}, target="sm_90")
    # ... and, where globals are let through, not a combine_fn either
    monkeypatch.setenv("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "1")
    with pytest.raises(triton.CompilationError, match=r"combine_fn must be a @triton.jit function"):
        triton.compile(kernel, signature={"X": "*fp32"}, target="sm_90")


def test_combine_fn_arity():
    src = '''
import compiler as triton
import compiler.language as tl
@triton.jit
def two(a, b):
    return a + b, a
@triton.jit
def k(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X + tl.arange(0, 4), tl.associative_scan(x, 0, two))
'''
    with pytest.raises(triton.CompilationError, match=r"returns 2 values for 1 inputs"):
        triton.compile(_exec(src)["k"], signature={"X": "*fp32"}, target="sm_90")


# ---- gather, flip, sort, histogram -------------------------------------------------------------------

@pytest.mark.parametrize("M,N,K,axis", [(8, 16, 8, 0), (8, 16, 32, 0), (16, 32, 64, 1), (32, 4, 2, 1), (1, 128, 128, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int8])
def test_gather(interpret, gen, M, N, K, axis, dtype):
    src = rand(gen, (M, N), dtype, -100, 100)
    size = (M, N)[axis]
    idx_shape = (K, N) if axis == 0 else (M, K)
    idx = rand(gen, idx_shape, torch.int32, 0, size - 1)
    out = poisoned(idx_shape, dtype)
    SK.gather_kernel[(1,)](src, idx, out, M=M, N=N, K=K, AXIS=axis)
    assert torch.equal(out, torch.gather(src, axis, idx.long()))


def test_gather_index_out_of_range_in_interpreter(interpret):
    src = torch.zeros((8, 16))
    idx = torch.full((8, 16), 8, dtype=torch.int32)
    with pytest.raises(Exception, match=r"tl.gather index 8 out of range for a dim of size 8"):
        SK.gather_kernel[(1,)](src, idx, torch.empty((8, 16)), M=8, N=16, K=8, AXIS=0)


@pytest.mark.parametrize("M,N", [(1, 2), (4, 32), (8, 128), (2, 1024)])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16, torch.uint8])
def test_flip_sort(interpret, gen, M, N, dim, descending, dtype):
    x = rand(gen, (M, N), dtype, 0, 255) if dtype == torch.uint8 else rand(gen, (M, N), dtype, -1000, 1000)
    flipped, srt = poisoned((M, N), dtype), poisoned((M, N), dtype)
    SK.flip_sort_kernel[(1,)](x, flipped, srt, M=M, N=N, DIM=dim, DESCENDING=descending)
    R.check_flip_sort(x, flipped, srt, dim, descending)


def test_sort_nan_and_method(interpret, gen):
    x = rand(gen, (64,), torch.float32)
    x[[3, 17, 40]] = float("nan")
    y = poisoned((64,), torch.float32)
    SK.sort_1d_kernel[(1,)](x, y, N=64)
    assert torch.allclose(y, torch.sort(x).values, equal_nan=True)
    assert torch.isnan(y[-3:]).all() and not torch.isnan(y[:-3]).any()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64])
@pytest.mark.parametrize("n,N,bins", [(1000, 256, 64), (77, 128, 512), (4096, 1024, 16)])
def test_histogram(interpret, gen, dtype, n, N, bins):
    x = rand(gen, (n,), dtype, -5, min(bins + 5, 127) if dtype == torch.int8 else bins + 5)
    out = torch.zeros((bins,), dtype=torch.int32)
    grid = ((n + N - 1) // N,)
    SK.histogram_kernel[grid](x, out, n, N=N, BINS=bins)
    xs = x.long()
    ref = torch.bincount(xs[(xs >= 0) & (xs < bins)], minlength=bins)
    assert torch.equal(out.long(), ref)


@pytest.mark.parametrize("body,message", [
    ("tl.store(X + r, tl.histogram(tl.load(X + r), 8))", "tl.histogram needs integers, got fp32"),
    ("tl.store(X + r, tl.histogram(r, 6))", "num_bins must be a power of two, got 6"),
    ("tl.store(X + r, tl.gather(tl.load(X + r), r.to(tl.float32), 0))", "tl.gather's index must hold integers"),
    ("tl.store(X + r, tl.sum(tl.gather(tl.load(X + r)[:, None], r[None, :], 0), 0))",
     "must equal the source's \\[16, 1\\] in every dim but axis 0"),
    ("tl.store(X + r, tl.sort(tl.load(X + r), dim=1))", "tl.sort: dim 1 out of range for a 1-D block"),
    ("a, b = tl.split(tl.load(X + r))", "tl.split needs a block whose last dimension has size 2"),
])
def test_errors_name_the_source_line(body, message):
    src = f'''
import compiler as triton
import compiler.language as tl
@triton.jit
def k(X):
    r = tl.arange(0, 16)
    {body}
'''
    with pytest.raises(triton.CompilationError, match=message) as info:
        triton.compile(_exec(src)["k"], signature={"X": "*fp32"}, target="sm_90")
    assert ":7:" in str(info.value)


def test_pointer_effects_through_custom_combines():
    from compiler.pointer_effects import pointer_effects
    from compiler.runtime.compile import build_ir
    fn = build_ir(SK.linear_recurrence_kernel, {"A": "*fp32", "B": "*fp32", "H": "*fp32"}, {"N": 64, "REVERSE": False})
    eff = pointer_effects(fn)
    assert eff.stored == {"H"} and eff.loaded == {"A", "B"}


# ---- PTX: every kernel compiles and assembles ------------------------------------------------------

PTX_CASES = {
    "join_split_fp32": (SK.join_split_kernel, dict(X="*fp32", Y="*fp32", Joined="*fp32", A="*fp32", B="*fp32", Inter="*fp32"),
                        dict(M=16, N=32), 4),
    "join_split_i8": (SK.join_split_kernel, dict(X="*i8", Y="*i8", Joined="*i8", A="*i8", B="*i8", Inter="*i8"),
                      dict(M=4, N=8), 1),
    "split_loaded": (SK.split_loaded_kernel, dict(X="*fp16", A="*fp16", B="*fp16"), dict(N=256), 4),
    **{f"reduce_combine_ax{ax}_op{op}": (SK.reduce_combine_kernel, dict(X="*i32" if op == 2 else "*fp32",
                                                                       Out="*i32" if op == 2 else "*fp32", Idx="*i32"),
                                         dict(M=32, N=64, AXIS=ax, OP=op, KEEP=False), 4)
       for ax in (0, 1) for op in (0, 1, 2, 3)},
    "cumsum_dtype": (SK.cumsum_dtype_kernel, dict(X="*bf16", Y="*fp32", Y64="*i64"), dict(N=512), 4),
    "reduce_all": (SK.reduce_all_kernel, dict(X="*fp32", Out="*fp32"), dict(N=64), 8),
    **{f"scan_ax{ax}_op{op}_rev{int(rev)}": (SK.scan_kernel, dict(X="*fp32", Y="*fp32"),
                                              dict(M=16, N=128, AXIS=ax, OP=op, REVERSE=rev), 4)
       for ax in (0, 1) for op in (0, 1, 2) for rev in (False, True)},
    "linear_recurrence": (SK.linear_recurrence_kernel, dict(A="*fp32", B="*fp32", H="*fp32"), dict(N=1024, REVERSE=False), 4),
    "linear_recurrence_rev": (SK.linear_recurrence_kernel, dict(A="*fp32", B="*fp32", H="*fp32"), dict(N=256, REVERSE=True), 8),
    "linear_recurrence_2d_ax0_rev": (SK.linear_recurrence_2d_kernel, dict(A="*fp32", B="*fp32", H="*fp32"),
                                     dict(M=512, N=16, AXIS=0, REVERSE=True), 8),
    "linear_recurrence_2d_ax1": (SK.linear_recurrence_2d_kernel, dict(A="*fp32", B="*fp32", H="*fp32"),
                                 dict(M=16, N=256, AXIS=1, REVERSE=False), 4),
    "gather_ax0": (SK.gather_kernel, dict(Src="*fp32", Index="*i32", Out="*fp32"), dict(M=64, N=32, K=16, AXIS=0), 4),
    "gather_ax1_i64": (SK.gather_kernel, dict(Src="*fp16", Index="*i64", Out="*fp16"), dict(M=16, N=128, K=256, AXIS=1), 4),
    **{f"flip_sort_dim{d}_desc{int(desc)}_{dt}": (SK.flip_sort_kernel, dict(X=f"*{dt}", Flipped=f"*{dt}", Sorted=f"*{dt}"),
                                                   dict(M=8, N=128, DIM=d, DESCENDING=desc), 4)
       for d in (0, 1) for desc in (False, True) for dt in ("fp32", "i32", "u8", "bf16")},
    "flip_sort_over_warps": (SK.flip_sort_kernel, dict(X="*fp32", Flipped="*fp32", Sorted="*fp32"),
                             dict(M=2, N=1024, DIM=1, DESCENDING=True), 8),
    "sort_big": (SK.flip_sort_kernel, dict(X="*fp32", Flipped="*fp32", Sorted="*fp32"), dict(M=4, N=4096, DIM=1, DESCENDING=False), 4),
    "sort_1d": (SK.sort_1d_kernel, dict(X="*fp32", Y="*fp32"), dict(N=64), 4),
    "histogram_i32": (SK.histogram_kernel, dict(X="*i32", Out="*i32", n="i32"), dict(N=1024, BINS=64), 4),
    "histogram_i8_many_bins": (SK.histogram_kernel, dict(X="*i8", Out="*i32", n="i32"), dict(N=128, BINS=512), 4),
    "histogram_i64": (SK.histogram_kernel, dict(X="*i64", Out="*i32", n="i32"), dict(N=256, BINS=16), 2),
    "cat_fp16": (SK.cat_kernel, dict(X="*fp16", Y="*fp16", Z="*fp16", Total="*fp64"), dict(N=128), 4),
    "cat_i8_one_warp": (SK.cat_kernel, dict(X="*i8", Y="*i8", Z="*i8", Total="*fp64"), dict(N=256), 1),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_ptx_assembles(name):
    kern, sig, cx, nw = PTX_CASES[name]
    ck = triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, target="sm_90")
    rep = ptxas.report(ck.asm["ptx"])
    assert "0 bytes spill stores" in rep, rep


def test_sort_within_a_warp_needs_no_shared_memory():
    """Registers and lanes hold the whole dim: compare-and-swap through shuffles, no barrier."""
    ck = triton.compile(SK.sort_1d_kernel, signature=dict(X="*fp32", Y="*fp32"), constexprs=dict(N=128), num_warps=1,
                        target="sm_90")
    ptx = ck.asm["ptx"]
    assert "shfl.sync.bfly" in ptx and "bar.sync" not in ptx and ck.metadata["shared"] == 0


def _exec(src):
    import linecache
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    linecache.checkcache(f.name)
    ns = {"__file__": f.name}
    exec(compile(src, f.name, "exec"), ns)
    return ns
