"""The interpreter backend on hand-built block IR (independent of the front end)."""
from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="runs kernels over torch CPU tensors against torch (torch is not installed)")

from compiler import interpreter, ir
from compiler.language import dtypes as T
from compiler.language.dtypes import block_type, pointer_type

LOC = ir.Loc("kern.py", 7, 4, "kern")


class B:
    """A tiny IR builder for tests: b.op(name, operands, type, **attrs) -> Value."""

    def __init__(self, arg_types, arg_names=None):
        names = arg_names or [f"a{i}" for i in range(len(arg_types))]
        self.fn = ir.Function("kern", list(names), list(arg_types), ir.Block(arg_types, names),
                              [{} for _ in arg_types], {}, LOC)
        self.stack = [self.fn.body]

    @property
    def args(self):
        return self.fn.args

    def op(self, name, operands=(), ty=None, regions=(), loc=LOC, **attrs):
        o = ir.Op(name, operands, [ty] if ty is not None else [], attrs, regions, loc)
        self.stack[-1].ops.append(o)
        return o.result if ty is not None else o

    def ops(self, name, operands, types, regions=(), **attrs):
        o = ir.Op(name, operands, types, attrs, regions, LOC)
        self.stack[-1].ops.append(o)
        return o.results

    def const(self, v, ty):
        return self.op("const", [], ty, value=v)

    def region(self, arg_types=()):
        blk = ir.Block(arg_types)
        return blk

    def into(self, blk):
        b = self

        class _Ctx:
            def __enter__(self):
                b.stack.append(blk)
                return blk

            def __exit__(self, *exc):
                b.stack.pop()
        return _Ctx()


def blk(dt, *shape):
    return block_type(dt, shape)


def ptr(dt):
    return pointer_type(dt)


def offsets(b, n, block):
    """pid * block + arange(block), its mask against n (an i32 arg), both shape [block]."""
    pid = b.op("program_id", [], T.int32, axis=0)
    start = b.op("mul", [pid, b.const(block, T.int32)], T.int32)
    offs = b.op("add", [b.op("splat", [start], blk(T.int32, block)),
                        b.op("arange", [], blk(T.int32, block), start=0, end=block)], blk(T.int32, block))
    mask = b.op("cmp", [offs, b.op("splat", [n], blk(T.int32, block))], blk(T.int1, block), pred="lt")
    return offs, mask


def ptrs(b, p, offs):
    shape = offs.shape
    return b.op("addptr", [b.op("splat", [p], block_type(p.type, shape)), offs], block_type(p.type, shape))


def elementwise_kernel(dt, opname, block=16, out_dt=None, unary=False):
    out_dt = out_dt or dt
    b = B([ptr(dt), ptr(dt), ptr(out_dt), T.int32], ["x", "y", "out", "n"])
    x, y, out, n = b.args
    offs, mask = offsets(b, n, block)
    xv = b.op("load", [ptrs(b, x, offs), mask, None], blk(dt, block))
    if unary:
        r = b.op(opname, [xv], blk(out_dt, block))
    else:
        yv = b.op("load", [ptrs(b, y, offs), mask, None], blk(dt, block))
        if opname == "cmp":
            r = b.op("cmp", [xv, yv], blk(T.int1, block), pred="lt")
        else:
            r = b.op(opname, [xv, yv], blk(out_dt, block))
    b.op("store", [ptrs(b, out, offs), r, mask])
    b.op("return")
    return b.fn


def test_interpret_mode_env(monkeypatch):
    monkeypatch.delenv("BLOCKTUNE_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not interpreter.interpret_mode()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreter.interpret_mode()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not interpreter.interpret_mode()
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "true")
    assert interpreter.interpret_mode()


@pytest.mark.parametrize("dt", [T.float32, T.float16, T.float64, T.int32])
def test_vector_add_numpy(dt):
    rng = np.random.default_rng()
    n = 100
    x = (rng.standard_normal(n) * 100).astype(dt.np)
    y = (rng.standard_normal(n) * 100).astype(dt.np)
    out = np.full(n + 8, 77, dt.np)
    interpreter.run(elementwise_kernel(dt, "add"), (7, 1, 1), [x, y, out[:n], n])
    np.testing.assert_array_equal(out[:n], x + y)
    assert (out[n:] == 77).all()  # nothing written past the mask


def test_vector_add_bf16_torch():
    n = 50
    x = torch.randn(n, dtype=torch.bfloat16)
    y = torch.randn(n, dtype=torch.bfloat16)
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    interpreter.run(elementwise_kernel(T.bfloat16, "add"), (4,), [x, y, out, n])
    assert torch.equal(out, x + y)  # torch adds bf16 in fp32 and rounds once: same as us
    out2 = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    interpreter.run(elementwise_kernel(T.bfloat16, "mul"), (4,), [x, y, out2, n])
    assert torch.equal(out2, x * y)


def test_bf16_rounding_bits():
    vals = np.array([1.0, 1.00390625, 1.01171875, 1.005859375, -2.5e-3, 3.0e38, np.inf, -np.inf], np.float32)
    expect = torch.from_numpy(vals).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(interpreter.bf16_round(vals), expect)
    assert np.isnan(interpreter.bf16_round(np.float32(np.nan)))


@pytest.mark.parametrize("dt", [T.int32, T.int8, T.int64])
def test_int_div_rem_truncate(dt):
    a = np.array([7, -7, 7, -7, 0, 5, -128 if dt is T.int8 else -9, 100], dt.np)
    b = np.array([2, 2, -2, -2, 3, 1, 3, -7], dt.np)
    n = a.size
    for opname, ref in [("div", np.trunc(a.astype(float) / b).astype(dt.np)), ("rem", np.fmod(a, b))]:
        out = np.zeros(n, dt.np)
        interpreter.run(elementwise_kernel(dt, opname, block=8), (1,), [a, b, out, n])
        np.testing.assert_array_equal(out, ref, err_msg=opname)


def test_float_rem_is_fmod():
    a = np.array([5.5, -5.5, 5.5, -5.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    out = np.zeros(4, np.float32)
    interpreter.run(elementwise_kernel(T.float32, "rem", block=4), (1,), [a, b, out, 4])
    np.testing.assert_array_equal(out, [1.5, -1.5, 1.5, -1.5])


def test_int_wraps_and_shifts():
    a = np.array([2**31 - 1, -2**31, 1, -8, 3, 1 << 30, -1, 5], np.int32)
    b = np.array([1, -1, 31, 1, 2, 2, 40, 0], np.int32)
    n = 8
    out = np.zeros(n, np.int32)
    interpreter.run(elementwise_kernel(T.int32, "add", block=8), (1,), [a, b, out, n])
    np.testing.assert_array_equal(out, (a.astype(np.int64) + b).astype(np.int32))
    interpreter.run(elementwise_kernel(T.int32, "mul", block=8), (1,), [a, b, out, n])
    np.testing.assert_array_equal(out, (a.astype(np.int64) * b & 0xFFFFFFFF).astype(np.uint32).view(np.int32))
    interpreter.run(elementwise_kernel(T.int32, "shr", block=8), (1,), [a, b, out, n])
    assert out[3] == -4 and out[4] == 0 and out[6] == -1  # arithmetic shift, saturating amount
    u = a.view(np.uint32)
    uo = np.zeros(n, np.uint32)
    interpreter.run(elementwise_kernel(T.uint32, "shr", block=8), (1,), [u, b.view(np.uint32), uo, n])
    assert uo[3] == (np.uint32(2**32 - 8) >> 1) and uo[6] == 0  # logical shift
    interpreter.run(elementwise_kernel(T.int32, "shl", block=8), (1,), [a, b, out, n])
    assert out[2] == -2**31 and out[4] == 12 and out[6] == 0


def test_minmax_nan():
    a = np.array([1, np.nan, 3, np.nan], np.float32)
    b = np.array([2, 5, np.nan, np.nan], np.float32)
    out = np.zeros(4, np.float32)
    interpreter.run(elementwise_kernel(T.float32, "maximum", block=4), (1,), [a, b, out, 4])
    np.testing.assert_array_equal(out, [2, 5, 3, np.nan])
    interpreter.run(elementwise_kernel(T.float32, "minimum_nan", block=4), (1,), [a, b, out, 4])
    np.testing.assert_array_equal(out, [1, np.nan, np.nan, np.nan])


@pytest.mark.parametrize("name,ref", [("exp", np.exp), ("sqrt", np.sqrt), ("rsqrt", lambda v: 1 / np.sqrt(v)),
                                      ("log2", np.log2), ("erf", None), ("floor", np.floor), ("abs", np.abs)])
def test_unary_fp32(name, ref):
    rng = np.random.default_rng()
    x = rng.uniform(0.1, 4, 32).astype(np.float32)
    out = np.zeros(32, np.float32)
    interpreter.run(elementwise_kernel(T.float32, name, block=32, unary=True), (1,), [x, x, out, 32])
    expect = torch.erf(torch.from_numpy(x)).numpy() if ref is None else ref(x)
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def test_cmp_gives_bool_and_store_to_bool_buffer():
    x = np.array([1, 5, 3, 2], np.float32)
    y = np.array([2, 2, 3, 9], np.float32)
    out = np.zeros(4, np.bool_)
    interpreter.run(elementwise_kernel(T.float32, "cmp", block=4, out_dt=T.int1), (1,), [x, y, out, 4])
    np.testing.assert_array_equal(out, x < y)


def cast_kernel(src, dst, block=8, bitcast=False):
    b = B([ptr(src), ptr(dst)])
    x, out = b.args
    offs = b.op("arange", [], blk(T.int32, block), start=0, end=block)
    v = b.op("load", [ptrs(b, x, offs), None, None], blk(src, block))
    r = b.op("bitcast" if bitcast else "cast", [v], blk(dst, block))
    b.op("store", [ptrs(b, out, offs), r, None])
    return b.fn


def test_casts():
    f = np.array([1.9, -1.9, 3e10, -3e10, np.nan, 0.5, -0.5, 255.7], np.float32)
    out = np.zeros(8, np.int32)
    interpreter.run(cast_kernel(T.float32, T.int32), (1,), [f, out])
    np.testing.assert_array_equal(out, [1, -1, 2**31 - 1, -2**31, 0, 0, 0, 255])
    u8 = np.zeros(8, np.uint8)
    interpreter.run(cast_kernel(T.float32, T.uint8), (1,), [f, u8])
    np.testing.assert_array_equal(u8, [1, 0, 255, 0, 0, 0, 0, 255])
    i8 = np.array([-1, 127, -128, 0, 1, 2, 3, -5], np.int8)
    u32 = np.zeros(8, np.uint32)
    interpreter.run(cast_kernel(T.int8, T.uint32), (1,), [i8, u32])
    np.testing.assert_array_equal(u32, i8.astype(np.int64) & 0xFFFFFFFF)
    i16 = np.zeros(8, np.int16)
    big = np.array([70000, -70000, 32768, 1, 2, 3, 4, 5], np.int32)
    interpreter.run(cast_kernel(T.int32, T.int16), (1,), [big, i16])
    np.testing.assert_array_equal(i16, big.astype(np.int16))
    bf = torch.zeros(8, dtype=torch.bfloat16)
    interpreter.run(cast_kernel(T.float32, T.bfloat16), (1,), [f, bf])
    assert torch.equal(bf[~torch.isnan(bf)], torch.from_numpy(f).to(torch.bfloat16)[~torch.isnan(bf)])
    back = np.zeros(8, np.float16)
    interpreter.run(cast_kernel(T.bfloat16, T.float16), (1,), [bf, back])
    np.testing.assert_array_equal(back[:2], bf[:2].to(torch.float16).numpy())
    b1 = np.zeros(8, np.bool_)
    interpreter.run(cast_kernel(T.float32, T.int1), (1,), [f, b1])
    np.testing.assert_array_equal(b1, f != 0)
    bits = np.zeros(8, np.int32)
    interpreter.run(cast_kernel(T.float32, T.int32, bitcast=True), (1,), [f, bits])
    np.testing.assert_array_equal(bits, f.view(np.int32))


def test_fp16_math_stays_fp16():
    x = np.array([60000, 1, 0.1, 3], np.float16)
    y = np.array([60000, 2**-12, 0.2, 3], np.float16)
    out = np.zeros(4, np.float16)
    interpreter.run(elementwise_kernel(T.float16, "add", block=4), (1,), [x, y, out, 4])
    assert np.isinf(out[0]) and out[1] == 1 and out[2] == np.float16(0.1) + np.float16(0.2)


def reduce_kernel(dt, M, N, kind, axis, out_dt=None, tie_break_left=True):
    """x: [M, N] row-major; out gets reduce(x, axis)."""
    out_dt = out_dt or (T.int32 if kind in ("argmax", "argmin") else dt)
    b = B([ptr(dt), ptr(out_dt)])
    x, out = b.args
    rows = b.op("expand_dims", [b.op("arange", [], blk(T.int32, M), start=0, end=M)], blk(T.int32, M, 1), axis=1)
    cols = b.op("expand_dims", [b.op("arange", [], blk(T.int32, N), start=0, end=N)], blk(T.int32, 1, N), axis=0)
    rowoff = b.op("mul", [rows, b.const(N, blk(T.int32, M, 1))], blk(T.int32, M, 1))
    offs = b.op("add", [b.op("broadcast", [rowoff], blk(T.int32, M, N)), b.op("broadcast", [cols], blk(T.int32, M, N))],
                blk(T.int32, M, N))
    v = b.op("load", [ptrs(b, x, offs), None, None], blk(dt, M, N))
    keep = N if axis == 0 else M
    r = b.op("reduce", [v], blk(out_dt, keep), axis=axis, kind=kind, tie_break_left=tie_break_left)
    b.op("store", [ptrs(b, out, b.op("arange", [], blk(T.int32, keep), start=0, end=keep)), r, None])
    return b.fn


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind", ["sum", "max", "min", "argmax", "argmin"])
def test_reduce_2d(kind, axis):
    rng = np.random.default_rng()
    x = rng.integers(-5, 5, (8, 16)).astype(np.float32)  # many ties
    out = np.zeros(16 if axis == 0 else 8, np.int32 if kind.startswith("arg") else np.float32)
    interpreter.run(reduce_kernel(T.float32, 8, 16, kind, axis), (1,), [x, out])
    ref = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}[kind](x, axis=axis)
    np.testing.assert_array_equal(out, ref)


def test_argmax_tie_break_right():
    x = np.tile(np.array([1, 3, 3, 0], np.float32), (4, 1))
    out = np.zeros(4, np.int32)
    interpreter.run(reduce_kernel(T.float32, 4, 4, "argmax", 1, tie_break_left=False), (1,), [x, out])
    np.testing.assert_array_equal(out, [2, 2, 2, 2])


def test_reduce_int_sum_wraps():
    x = np.full((2, 4), 2**30, np.int32)
    out = np.zeros(2, np.int32)
    interpreter.run(reduce_kernel(T.int32, 2, 4, "sum", 1), (1,), [x, out])
    np.testing.assert_array_equal(out, [0, 0])


@pytest.mark.parametrize("kind", ["sum", "prod", "max"])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan(kind, reverse):
    rng = np.random.default_rng()
    x = rng.integers(1, 4, 16).astype(np.int32)
    b = B([ptr(T.int32), ptr(T.int32)])
    xp, op = b.args
    offs = b.op("arange", [], blk(T.int32, 16), start=0, end=16)
    v = b.op("load", [ptrs(b, xp, offs), None, None], blk(T.int32, 16))
    r = b.op("scan", [v], blk(T.int32, 16), axis=0, kind=kind, reverse=reverse)
    b.op("store", [ptrs(b, op, offs), r, None])
    out = np.zeros(16, np.int32)
    interpreter.run(b.fn, (1,), [x, out])
    acc = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate}[kind]
    ref = acc(x[::-1])[::-1] if reverse else acc(x)
    np.testing.assert_array_equal(out, ref.astype(np.int32))


def dot_kernel(dt, M, N, K, prec="ieee", out_dt=T.float32):
    b = B([ptr(dt), ptr(dt), ptr(out_dt)])
    a, bb, c = b.args

    def tile(p, R, C, ty):
        rows = b.op("expand_dims", [b.op("arange", [], blk(T.int32, R), start=0, end=R)], blk(T.int32, R, 1), axis=1)
        cols = b.op("expand_dims", [b.op("arange", [], blk(T.int32, C), start=0, end=C)], blk(T.int32, 1, C), axis=0)
        offs = b.op("add", [b.op("broadcast", [b.op("mul", [rows, b.const(C, blk(T.int32, R, 1))], blk(T.int32, R, 1))],
                                 blk(T.int32, R, C)), b.op("broadcast", [cols], blk(T.int32, R, C))], blk(T.int32, R, C))
        return ptrs(b, p, offs)
    av = b.op("load", [tile(a, M, K, dt), None, None], blk(dt, M, K))
    bv = b.op("load", [tile(bb, K, N, dt), None, None], blk(dt, K, N))
    acc = b.const(1.0 if out_dt.is_floating() else 1, blk(out_dt, M, N))
    r = b.op("dot", [av, bv, acc], blk(out_dt, M, N), input_precision=prec, max_num_imprecise_acc=None)
    b.op("store", [tile(c, M, N, out_dt), r, None])
    return b.fn


@pytest.mark.parametrize("dt", [T.float16, T.bfloat16, T.float32, T.int8])
def test_dot(dt):
    M, N, K = 16, 32, 64
    if dt is T.int8:
        a = torch.randint(-128, 127, (M, K), dtype=torch.int8)
        bm = torch.randint(-128, 127, (K, N), dtype=torch.int8)
        out = torch.zeros(M, N, dtype=torch.int32)
        interpreter.run(dot_kernel(dt, M, N, K, out_dt=T.int32), (1,), [a, bm, out])
        assert torch.equal(out, a.int() @ bm.int() + 1)
        return
    tdt = {T.float16: torch.float16, T.bfloat16: torch.bfloat16, T.float32: torch.float32}[dt]
    a = torch.randn(M, K).to(tdt)
    bm = torch.randn(K, N).to(tdt)
    out = torch.full((M, N), float("nan"))
    interpreter.run(dot_kernel(dt, M, N, K), (1,), [a, bm, out])
    torch.testing.assert_close(out, a.float() @ bm.float() + 1, rtol=1e-5, atol=1e-4)


def test_dot_tf32_rounds_inputs():
    M = N = K = 16
    a = torch.full((M, K), 1 + 2**-12)  # not representable in tf32: rounds to 1
    bm = torch.eye(K)
    out = torch.zeros(M, N)
    interpreter.run(dot_kernel(T.float32, M, N, K, prec="tf32"), (1,), [a, bm, out])
    assert torch.equal(out, torch.full((M, N), 2.0))
    interpreter.run(dot_kernel(T.float32, M, N, K, prec="ieee"), (1,), [a, bm, out])
    assert torch.equal(out, torch.full((M, N), 2 + 2**-12))


def atomic_kernel(kind, dt, block, same_address, with_mask=False):
    """Every program does atomic_<kind>(p + (0 if same_address else arange), val[arange]), stores old."""
    b = B([ptr(dt), ptr(dt), ptr(dt), T.int32])
    p, v, old, n = b.args
    pid = b.op("program_id", [], T.int32, axis=0)
    offs = b.op("arange", [], blk(T.int32, block), start=0, end=block)
    tgt = b.const(0, blk(T.int32, block)) if same_address else offs
    mask = b.op("cmp", [offs, b.op("splat", [n], blk(T.int32, block))], blk(T.int1, block), pred="lt") if with_mask else None
    vals = b.op("load", [ptrs(b, v, offs), None, None], blk(dt, block))
    r = b.op("atomic_rmw", [ptrs(b, p, tgt), vals, mask], blk(dt, block), kind=kind, sem="acq_rel", scope="gpu")
    oo = b.op("add", [b.op("splat", [b.op("mul", [pid, b.const(block, T.int32)], T.int32)], blk(T.int32, block)), offs],
              blk(T.int32, block))
    b.op("store", [ptrs(b, old, oo), r, None])
    return b.fn


def test_atomic_add_same_address_is_sequential():
    block, progs = 8, 5
    vals = np.arange(1, block + 1, dtype=np.int32)
    acc = np.zeros(1, np.int32)
    old = np.zeros(block * progs, np.int32)
    interpreter.run(atomic_kernel("add", T.int32, block, True), (progs,), [acc, vals, old, block])
    assert acc[0] == progs * vals.sum()
    running = np.concatenate([[0], np.cumsum(np.tile(vals, progs))[:-1]])
    np.testing.assert_array_equal(old, running)


@pytest.mark.parametrize("kind", ["add", "max", "min", "xchg", "and", "or", "xor"])
def test_atomic_rmw_kinds_masked(kind):
    rng = np.random.default_rng()
    block = 16
    vals = rng.integers(0, 1000, block).astype(np.int32)
    start = rng.integers(0, 1000, block).astype(np.int32)
    mem = start.copy()
    old = np.full(block, -7, np.int32)
    interpreter.run(atomic_kernel(kind, T.int32, block, False, with_mask=True), (1,), [mem, vals, old, 10])
    fn = {"add": np.add, "max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b, "and": np.bitwise_and,
          "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
    np.testing.assert_array_equal(mem[:10], fn(start[:10], vals[:10]))
    np.testing.assert_array_equal(mem[10:], start[10:])
    np.testing.assert_array_equal(old[:10], start[:10])


def test_atomic_add_fp16_and_bf16():
    block = 8
    vals = torch.full((block,), 0.5, dtype=torch.bfloat16)
    acc = torch.zeros(1, dtype=torch.bfloat16)
    old = torch.zeros(block * 3, dtype=torch.bfloat16)
    interpreter.run(atomic_kernel("add", T.bfloat16, block, True), (3,), [acc, vals, old, block])
    assert acc.item() == 12.0
    v16 = np.full(block, 0.25, np.float16)
    a16 = np.zeros(block, np.float16)
    o16 = np.zeros(block * 2, np.float16)
    interpreter.run(atomic_kernel("add", T.float16, block, False), (2,), [a16, v16, o16, block])
    np.testing.assert_array_equal(a16, 0.5)
    np.testing.assert_array_equal(o16, [0] * block + [0.25] * block)


def test_atomic_cas_lock_pattern():
    """Each program: while atomic_cas(lock, 0, 1) != 0: pass; counter += 1; xchg(lock, 0)."""
    b = B([ptr(T.int32), ptr(T.int32)])
    lock, counter = b.args
    before = ir.Block([])
    after = ir.Block([])
    with b.into(before):
        old = b.op("atomic_cas", [lock, b.const(0, T.int32), b.const(1, T.int32)], T.int32, sem="acq_rel", scope="gpu")
        busy = b.op("cmp", [old, b.const(0, T.int32)], T.int1, pred="ne")
        b.op("condition", [busy])
    with b.into(after):
        b.op("yield", [])
    b.ops("while", [], [], regions=[before, after])
    c = b.op("load", [counter, None, None], T.int32)
    b.op("store", [counter, b.op("add", [c, b.const(1, T.int32)], T.int32), None])
    b.op("atomic_rmw", [lock, b.const(0, T.int32), None], T.int32, kind="xchg", sem="acq_rel", scope="gpu")
    lk = np.zeros(1, np.int32)
    cnt = np.zeros(1, np.int32)
    interpreter.run(b.fn, (6, 2, 1), [lk, cnt])
    assert cnt[0] == 12 and lk[0] == 0


def test_for_loop_with_carried_block_and_if_yield():
    """acc = zeros; for i in range(lb, n, 2): acc += x[i*4 + arange(4)]; out = acc if pid==0 else -acc."""
    b = B([ptr(T.float32), ptr(T.float32), T.int32, T.int32])
    x, out, lb, n = b.args
    acc0 = b.const(0.0, blk(T.float32, 4))
    body = ir.Block([T.int32, blk(T.float32, 4)])
    iv, acc = body.args
    with b.into(body):
        base = b.op("mul", [iv, b.const(4, T.int32)], T.int32)
        offs = b.op("add", [b.op("splat", [base], blk(T.int32, 4)), b.op("arange", [], blk(T.int32, 4), start=0, end=4)],
                    blk(T.int32, 4))
        v = b.op("load", [ptrs(b, x, offs), None, None], blk(T.float32, 4))
        b.op("yield", [b.op("add", [acc, v], blk(T.float32, 4))])
    (res,) = b.ops("for", [lb, n, b.const(2, T.int32), acc0], [blk(T.float32, 4)], regions=[body])
    pid = b.op("program_id", [], T.int32, axis=0)
    cond = b.op("cmp", [pid, b.const(0, T.int32)], T.int1, pred="eq")
    then, other = ir.Block(), ir.Block()
    with b.into(then):
        b.op("yield", [res])
    with b.into(other):
        b.op("yield", [b.op("neg", [res], blk(T.float32, 4))])
    (sel,) = b.ops("if", [cond], [blk(T.float32, 4)], regions=[then, other])
    o = b.op("add", [b.op("splat", [b.op("mul", [pid, b.const(4, T.int32)], T.int32)], blk(T.int32, 4)),
                     b.op("arange", [], blk(T.int32, 4), start=0, end=4)], blk(T.int32, 4))
    b.op("store", [ptrs(b, out, o), sel, None])
    xs = np.random.default_rng().standard_normal(40).astype(np.float32)
    out = np.full(8, np.nan, np.float32)
    interpreter.run(b.fn, (2,), [xs, out, 1, 9])
    ref = sum(xs[i * 4:i * 4 + 4] for i in range(1, 9, 2))
    np.testing.assert_allclose(out[:4], ref, rtol=1e-6)
    np.testing.assert_allclose(out[4:], -ref, rtol=1e-6)


def test_while_loop_and_early_return():
    """k = 1; while k < n: k *= 3; store k (scalar pointer); then return before a second store if pid==1."""
    b = B([ptr(T.int32), T.int32])
    out, n = b.args
    before = ir.Block([T.int32])
    after = ir.Block([T.int32])
    with b.into(before):
        k = before.args[0]
        b.op("condition", [b.op("cmp", [k, n], T.int1, pred="lt"), k])
    with b.into(after):
        b.op("yield", [b.op("mul", [after.args[0], b.const(3, T.int32)], T.int32)])
    (k,) = b.ops("while", [b.const(1, T.int32)], [T.int32], regions=[before, after])
    pid = b.op("program_id", [], T.int32, axis=0)
    p = b.op("addptr", [out, pid], ptr(T.int32))
    b.op("store", [p, k, None])
    then = ir.Block()
    with b.into(then):
        b.op("return")
    b.ops("if", [b.op("cmp", [pid, b.const(1, T.int32)], T.int1, pred="eq")], [], regions=[then, ir.Block()])
    p2 = b.op("addptr", [p, b.const(2, T.int32)], ptr(T.int32))
    b.op("store", [p2, b.op("num_programs", [], T.int32, axis=0), None])
    o = np.full(4, -1, np.int32)
    interpreter.run(b.fn, (2,), [o, 50])
    np.testing.assert_array_equal(o, [81, 81, 2, -1])


def test_scalar_pointer_load_store_torch():
    b = B([ptr(T.float32), ptr(T.float32)])
    x, y = b.args
    v = b.op("load", [b.op("addptr", [x, b.const(3, T.int32)], ptr(T.float32)), None, None], T.float32)
    b.op("store", [b.op("addptr", [y, b.const(1, T.int64)], ptr(T.float32)), b.op("mul", [v, v], T.float32), None])
    xt = torch.arange(5, dtype=torch.float32)
    yt = torch.zeros(3)
    interpreter.run(b.fn, (1,), [xt, yt])
    assert yt.tolist() == [0, 9, 0]


def test_torch_view_with_offset_and_strides():
    base = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    col = base[1:, 2]  # storage offset 10, stride 8
    out = torch.zeros(3)
    b = B([ptr(T.float32), ptr(T.float32), T.int32])
    x, o, stride = b.args
    offs = b.op("arange", [], blk(T.int32, 4), start=0, end=4)
    mask = b.op("cmp", [offs, b.const(3, blk(T.int32, 4))], blk(T.int1, 4), pred="lt")
    v = b.op("load", [ptrs(b, x, b.op("mul", [offs, b.op("splat", [stride], blk(T.int32, 4))], blk(T.int32, 4))), mask,
                      b.const(0.0, blk(T.float32, 4))], blk(T.float32, 4))
    b.op("store", [ptrs(b, o, offs), v, mask])
    interpreter.run(b.fn, (1,), [col, out, col.stride(0)])
    assert out.tolist() == [10, 18, 26]


def test_masked_lanes_never_touched_and_oob_raises():
    b = B([ptr(T.float32), ptr(T.float32), T.int32])
    x, o, n = b.args
    offs = b.op("arange", [], blk(T.int32, 8), start=0, end=8)
    far = b.op("mul", [offs, b.const(1 << 24, blk(T.int32, 8))], blk(T.int32, 8))  # lanes ≥ 1 are far away
    mask = b.op("cmp", [offs, b.op("splat", [n], blk(T.int32, 8))], blk(T.int1, 8), pred="lt")
    v = b.op("load", [ptrs(b, x, far), mask, b.const(-1.0, blk(T.float32, 8))], blk(T.float32, 8),
             loc=ir.Loc("kern.py", 12, 8, "kern"))
    b.op("store", [ptrs(b, o, offs), v, None])
    xs = np.array([5.0], np.float32)
    out = np.zeros(8, np.float32)
    interpreter.run(b.fn, (1,), [xs, out, 1])
    np.testing.assert_array_equal(out, [5] + [-1] * 7)
    with pytest.raises(IndexError, match=r"kern\.py:12:9: out-of-bounds load .*lane \(1,\)"):
        interpreter.run(b.fn, (1,), [xs, out, 2])


def test_store_out_of_bounds_names_location():
    b = B([ptr(T.int32)])
    (o,) = b.args
    offs = b.op("arange", [], blk(T.int32, 8), start=0, end=8)
    b.op("store", [ptrs(b, o, offs), offs, None], loc=ir.Loc("k.py", 3, 4, "k"))
    with pytest.raises(IndexError, match=r"k\.py:3:5: out-of-bounds store .*lane \(4,\)"):
        interpreter.run(b.fn, (1,), [np.zeros(4, np.int32)])


def test_two_buffers_in_one_access():
    """A block of pointers selected from two arguments (where) gathers from both."""
    b = B([ptr(T.int32), ptr(T.int32), ptr(T.int32)])
    x, y, o = b.args
    offs = b.op("arange", [], blk(T.int32, 4), start=0, end=4)
    even = b.op("cmp", [b.op("rem", [offs, b.const(2, blk(T.int32, 4))], blk(T.int32, 4)), b.const(0, blk(T.int32, 4))],
                blk(T.int1, 4), pred="eq")
    p = b.op("select", [even, ptrs(b, x, offs), ptrs(b, y, offs)], blk(ptr(T.int32), 4))
    b.op("store", [ptrs(b, o, offs), b.op("load", [p, None, None], blk(T.int32, 4)), None])
    out = np.zeros(4, np.int32)
    interpreter.run(b.fn, (1,), [np.array([1, 2, 3, 4], np.int32), np.array([10, 20, 30, 40], np.int32), out])
    np.testing.assert_array_equal(out, [1, 20, 3, 40])


def test_print_format(capsys):
    b = B([T.int32])
    (n,) = b.args
    pid = b.op("program_id", [], T.int32, axis=1)
    v = b.op("add", [b.op("arange", [], blk(T.int32, 2), start=0, end=2), b.op("splat", [n], blk(T.int32, 2))],
             blk(T.int32, 2))
    b.op("print", [v], prefix="v: ")
    b.op("print", [pid], prefix="pid: ")
    interpreter.run(b.fn, (1, 2, 1), [10])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["pid (0, 0, 0) idx (0) v: 10", "pid (0, 0, 0) idx (1) v: 11", "pid (0, 0, 0) idx () pid: 0",
                     "pid (0, 1, 0) idx (0) v: 10", "pid (0, 1, 0) idx (1) v: 11", "pid (0, 1, 0) idx () pid: 1"]


def test_assert_raises_with_message_and_loc():
    b = B([T.int32])
    (n,) = b.args
    v = b.op("arange", [], blk(T.int32, 4), start=0, end=4)
    ok = b.op("cmp", [v, b.op("splat", [n], blk(T.int32, 4))], blk(T.int1, 4), pred="lt")
    b.op("assert", [ok], loc=ir.Loc("k.py", 9, 4, "k"), message="v < n")
    interpreter.run(b.fn, (2,), [4])
    with pytest.raises(AssertionError, match=r"k\.py:9:5: .*v < n.*pid \(0, 0, 0\) idx \(3\)"):
        interpreter.run(b.fn, (2,), [3])


def test_trans_reshape_expand_broadcast_umulhi_fma():
    b = B([ptr(T.int32), ptr(T.int32), ptr(T.float32)])
    o, u, f = b.args
    a = b.op("arange", [], blk(T.int32, 8), start=0, end=8)
    m = b.op("reshape", [a], blk(T.int32, 2, 4), can_reorder=False)
    t = b.op("trans", [m], blk(T.int32, 4, 2), perm=(1, 0))
    flat = b.op("reshape", [t], blk(T.int32, 8), can_reorder=False)
    b.op("store", [ptrs(b, o, a), flat, None])
    big = b.const(0x7FFFFFFF, blk(T.int32, 8))
    hi = b.op("umulhi", [big, a], blk(T.int32, 8))
    b.op("store", [ptrs(b, u, a), hi, None])
    af = b.op("cast", [a], blk(T.float32, 8))
    r = b.op("fma", [af, af, b.const(0.5, blk(T.float32, 8))], blk(T.float32, 8))
    b.op("store", [ptrs(b, f, a), r, None])
    oo, uu, ff = np.zeros(8, np.int32), np.zeros(8, np.int32), np.zeros(8, np.float32)
    interpreter.run(b.fn, (1,), [oo, uu, ff])
    np.testing.assert_array_equal(oo, np.arange(8).reshape(2, 4).T.ravel())
    np.testing.assert_array_equal(uu, (np.arange(8) * 0x7FFFFFFF) >> 32)
    np.testing.assert_array_equal(ff, np.arange(8.0) ** 2 + 0.5)


def test_equal_to_1_argument_may_be_left_out():
    b = B([ptr(T.int32), T.int32, T.int32])
    b.fn.arg_attrs = [{}, {"equal_to_1": True}, {}]
    o, one, n = b.args
    b.op("store", [o, b.op("add", [one, n], T.int32), None])
    out = np.zeros(1, np.int32)
    interpreter.run(b.fn, (1,), [out, 41])
    assert out[0] == 42


def test_many_programs_are_fast():
    import time
    n = 256 * 64
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    fn = elementwise_kernel(T.float32, "add", block=64)
    t = time.perf_counter()
    interpreter.run(fn, (256,), [x, x, out, n])
    assert time.perf_counter() - t < 2.0
    np.testing.assert_array_equal(out, 2 * x)


def test_print_prefix_normalized_like_triton(capsys):
    b = B([T.int32])
    (n,) = b.args
    v = b.op("arange", [], blk(T.int32, 2), start=0, end=2)
    b.op("print", [v, n], prefix="vals")
    b.op("print", [], prefix="hello")
    interpreter.run(b.fn, (1,), [7])
    assert capsys.readouterr().out.splitlines() == [
        "pid (0, 0, 0) idx (0) vals: (operand 0) 0", "pid (0, 0, 0) idx (1) vals: (operand 0) 1",
        "pid (0, 0, 0) idx () vals: (operand 1) 7", "pid (0, 0, 0) hello"]


def test_overlapping_numpy_views_from_one_buffer():
    """Arguments that are partially overlapping views of one allocation merge into one buffer."""
    t = torch.arange(16, dtype=torch.int32)
    a, c = t[0:8].numpy(), t[4:12].numpy()  # two numpy roots over parts of one torch storage
    b = B([ptr(T.int32), ptr(T.int32)])
    x, y = b.args
    offs = b.op("arange", [], blk(T.int32, 16), start=0, end=16)
    mask = b.op("cmp", [offs, b.const(12, blk(T.int32, 16))], blk(T.int1, 16), pred="lt")
    v = b.op("load", [ptrs(b, x, offs), mask, None], blk(T.int32, 16))  # x[0:12] spans both views
    s = b.op("reduce", [v], T.int32, axis=0, kind="sum")
    b.op("store", [y, s, None])
    interpreter.run(b.fn, (1,), [a, c])
    assert t[4].item() == sum(range(12))


@pytest.mark.parametrize("dt,opname", [(T.float16, "add"), (T.int32, "div"), (T.bfloat16, "mul"), (T.float32, "cmp")])
def test_vectorized_matches_per_program(dt, opname):
    """Straight-line kernels run all programs of a chunk at once; results equal one-by-one runs."""
    block, progs = 1024, 600  # 600 programs of 1024 lanes: several chunks
    n = block * progs - 77
    rng = np.random.default_rng()
    fn = elementwise_kernel(dt, opname, block=block, out_dt=T.int1 if opname == "cmp" else None)
    mk = (lambda: torch.randn(n + 77).to(torch.bfloat16)) if dt is T.bfloat16 else \
        (lambda: torch.from_numpy((rng.standard_normal(n + 77) * 100).astype(dt.np) + (dt is T.int32)))
    x, y = mk(), mk()
    outs = []
    for vec in (True, False):
        prog = interpreter.compile_function(fn, vectorize=vec)
        assert isinstance(prog, interpreter.VectorizedProgram) == vec
        out = torch.zeros(n + 77, dtype=torch.bool if opname == "cmp" else x.dtype)
        prog.launch((progs,), [x, y, out, n])
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert not outs[0][n:].any()


def test_control_flow_is_not_vectorized():
    b = B([ptr(T.int32), T.int32])
    o, n = b.args
    body = ir.Block([T.int32, T.int32])
    with b.into(body):
        b.op("yield", [b.op("add", [body.args[1], body.args[0]], T.int32)])
    (r,) = b.ops("for", [b.const(0, T.int32), n, b.const(1, T.int32), b.const(0, T.int32)], [T.int32], regions=[body])
    b.op("store", [b.op("addptr", [o, b.op("program_id", [], T.int32, axis=0)], ptr(T.int32)), r, None])
    assert not isinstance(interpreter.compile_function(b.fn, vectorize=True), interpreter.VectorizedProgram)
    out = np.zeros(3, np.int32)
    interpreter.run(b.fn, (3,), [out, 5])
    assert out.tolist() == [10, 10, 10]


def test_vectorized_out_of_bounds_names_the_program():
    b = B([ptr(T.float32), T.int32])
    o, n = b.args
    offs, _ = offsets(b, n, 8)
    b.op("store", [ptrs(b, o, offs), b.const(1.0, blk(T.float32, 8)), None], loc=ir.Loc("k.py", 5, 4, "k"))
    with pytest.raises(IndexError, match=r"k\.py:5:5: out-of-bounds store .*program \(3, 0, 0\), lane \(4,\)"):
        interpreter.run(b.fn, (4,), [np.zeros(28, np.float32), 28])
