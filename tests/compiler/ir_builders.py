"""Hand-built block IR for backend tests (independent of the front end).

`K` is a tiny builder: `k = K("add", x="*fp32", y="*fp32", n="i32")`, then `k.op(...)`-style helpers
that append ops to the current block and return result Values; `k.fn()` gives the `ir.Function`.
"""
from __future__ import annotations

import contextlib



from compiler import ir  # noqa: E402
from compiler.language import dtypes as T  # noqa: E402

bt = T.block_type


class K:
    def __init__(self, name: str, divisible=(), **args):
        self.names = list(args)
        self.types = [T.from_signature(t) if isinstance(t, str) else t for t in args.values()]
        self.body = ir.Block(self.types, self.names)
        self.blocks = [self.body]
        self.name = name
        self.attrs = [{"divisibility": 16 if (n in divisible or divisible == "all") else 1} for n in self.names]
        self.a = {n: v for n, v in zip(self.names, self.body.args)}

    def __getitem__(self, n):
        return self.a[n]

    def fn(self) -> ir.Function:
        return ir.Function(self.name, self.names, self.types, self.body, self.attrs)

    # ---- generic -------------------------------------------------------------------------
    def op(self, name, operands, rtype=None, **attrs):
        op = ir.Op(name, operands, [rtype] if rtype is not None else [], attrs)
        self.blocks[-1].ops.append(op)
        return op.result if rtype is not None else op

    @staticmethod
    def ty(v):
        return v.type

    # ---- values --------------------------------------------------------------------------
    def const(self, value, dt, shape=()):
        dt = T.from_signature(dt) if isinstance(dt, str) else dt
        return self.op("const", [], bt(dt, shape) if shape else dt, value=value)

    def arange(self, n, start=0):
        return self.op("arange", [], bt(T.int32, (n - start,)), start=start, end=n)

    def pid(self, axis=0):
        return self.op("program_id", [], T.int32, axis=axis)

    def splat(self, x, shape):
        return self.op("splat", [x], bt(x.type, shape))

    def bcast(self, x, shape):
        return self.op("broadcast", [x], bt(x.dtype, shape))

    def expand(self, x, axis):
        s = list(x.shape)
        s.insert(axis, 1)
        return self.op("expand_dims", [x], bt(x.dtype, s), axis=axis)

    def trans(self, x, perm=(1, 0)):
        return self.op("trans", [x], bt(x.dtype, tuple(x.shape[p] for p in perm)), perm=tuple(perm))

    def reshape(self, x, shape):
        return self.op("reshape", [x], bt(x.dtype, shape), can_reorder=False)

    def _match(self, a, b):
        """Scalar/block broadcasting like the front end (splat + broadcast)."""
        if not a.is_block and b.is_block:
            a = self.splat(a, b.shape)
        if not b.is_block and a.is_block:
            b = self.splat(b, a.shape)
        if a.is_block and b.is_block and a.shape != b.shape:
            shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
            if a.shape != shape:
                a = self.bcast(a, shape)
            if b.shape != shape:
                b = self.bcast(b, shape)
        return a, b

    def bin(self, name, a, b, **attrs):
        a, b = self._match(a, b)
        return self.op(name, [a, b], a.type, **attrs)

    def add(self, a, b): return self.bin("add", a, b)
    def sub(self, a, b): return self.bin("sub", a, b)
    def mul(self, a, b): return self.bin("mul", a, b)
    def fdiv(self, a, b): return self.bin("fdiv", a, b)

    def cmp(self, pred, a, b):
        a, b = self._match(a, b)
        shape = a.shape
        return self.op("cmp", [a, b], bt(T.int1, shape) if shape else T.int1, pred=pred)

    def unary(self, name, x, **attrs):
        return self.op(name, [x], x.type, **attrs)

    def cast(self, x, dt):
        dt = T.from_signature(dt) if isinstance(dt, str) else dt
        return self.op("cast", [x], bt(dt, x.shape) if x.is_block else dt)

    def select(self, c, a, b):
        a, b = self._match(a, b)
        c, a = self._match(c, a)
        return self.op("select", [c, a, b], a.type)

    def addptr(self, p, off):
        p, off = self._match(p, off)
        return self.op("addptr", [p, off], p.type)

    def load(self, p, mask=None, other=None, **attrs):
        rt = bt(p.dtype.element_ty, p.shape) if p.is_block else p.dtype.element_ty
        if other is not None and not other.is_block and p.is_block:
            other = self.splat(other, p.shape)
        return self.op("load", [p, mask, other], rt, cache=attrs.get("cache", ""), eviction="", volatile=False)

    def store(self, p, v, mask=None):
        if not v.is_block and p.is_block:
            v = self.splat(v, p.shape)
        return self.op("store", [p, v, mask], None, cache="", eviction="")

    def reduce(self, x, axis, kind):
        shape = x.shape[:axis] + x.shape[axis + 1:]
        elt = T.int32 if kind in ("argmax", "argmin") else x.dtype
        return self.op("reduce", [x], bt(elt, shape) if shape else elt, axis=axis, kind=kind, tie_break_left=True)

    def scan(self, x, axis, kind="sum", reverse=False):
        return self.op("scan", [x], x.type, axis=axis, kind=kind, reverse=reverse)

    def atomic(self, kind, p, v, mask=None, sem="acq_rel"):
        if not v.is_block and p.is_block:
            v = self.splat(v, p.shape)
        return self.op("atomic_rmw", [p, v, mask], v.type, kind=kind, sem=sem, scope="gpu")

    def cas(self, p, c, v):
        return self.op("atomic_cas", [p, c, v], v.type, sem="acq_rel", scope="gpu")

    def dot(self, a, b, c=None):
        m, n = a.shape[0], b.shape[1]
        out = T.int32 if a.dtype.is_int() else T.float32
        if c is None:
            c = self.const(0 if out.is_int() else 0.0, out, (m, n))
        return self.op("dot", [a, b, c], bt(c.dtype, (m, n)), input_precision="ieee", max_num_imprecise_acc=None)

    # ---- control flow --------------------------------------------------------------------
    @contextlib.contextmanager
    def for_(self, lb, ub, step, *inits):
        """with k.for_(lb, ub, step, x0) as (iv, x, results): ...; k.yield_(...)"""
        body = ir.Block([lb.type] + [i.type for i in inits])
        op = ir.Op("for", [lb, ub, step, *inits], [i.type for i in inits], {}, [body])
        self.blocks[-1].ops.append(op)
        self.blocks.append(body)
        try:
            yield body.args[0], body.args[1:], op.results
        finally:
            self.blocks.pop()

    def yield_(self, *vals):
        self.op("yield", list(vals))

    @contextlib.contextmanager
    def if_(self, cond, *result_types):
        then, els = ir.Block(), ir.Block()
        op = ir.Op("if", [cond], list(result_types), {}, [then, els])
        self.blocks[-1].ops.append(op)
        state = {"op": op}

        @contextlib.contextmanager
        def region(i):
            self.blocks.append(op.regions[i])
            try:
                yield
            finally:
                self.blocks.pop()
        state["then"], state["else"] = region(0), region(1)
        yield state

    @contextlib.contextmanager
    def while_(self, *inits):
        before = ir.Block([i.type for i in inits])
        after = ir.Block([i.type for i in inits])
        op = ir.Op("while", list(inits), [i.type for i in inits], {}, [before, after])
        self.blocks[-1].ops.append(op)
        state = {"op": op, "before": before, "after": after}

        @contextlib.contextmanager
        def region(blk):
            self.blocks.append(blk)
            try:
                yield blk.args
            finally:
                self.blocks.pop()
        state["in_before"], state["in_after"] = region(before), region(after)
        yield state

    def ret(self):
        self.op("return", [])


# ---- the kernels used by the tests ------------------------------------------------------------

def vector_add(block=1024, dt="fp32"):
    k = K("add_kernel", ("x", "y", "out", "n"), x=f"*{dt}", y=f"*{dt}", out=f"*{dt}", n="i32")
    pid = k.pid()
    offs = k.add(k.mul(pid, k.const(block, "i32")), k.arange(block))
    mask = k.cmp("lt", offs, k["n"])
    x = k.load(k.addptr(k["x"], offs), mask)
    y = k.load(k.addptr(k["y"], offs), mask)
    k.store(k.addptr(k["out"], offs), k.add(x, y), mask)
    k.ret()
    return k.fn()


def softmax(block=1024, dt="fp32"):
    """Triton tutorial 02 (one row per program)."""
    k = K("softmax_kernel", ("out", "inp", "in_stride", "out_stride", "n_cols"),
          out=f"*{dt}", inp=f"*{dt}", in_stride="i32", out_stride="i32", n_cols="i32")
    row = k.pid()
    row_start = k.addptr(k["inp"], k.mul(row, k["in_stride"]))
    cols = k.arange(block)
    mask = k.cmp("lt", cols, k["n_cols"])
    ninf = k.const(float("-inf"), dt)
    x = k.load(k.addptr(row_start, cols), mask, ninf)
    xf = k.cast(x, "fp32") if dt != "fp32" else x
    m = k.reduce(xf, 0, "max")
    z = k.sub(xf, m)
    num = k.unary("exp", z)
    den = k.reduce(num, 0, "sum")
    y = k.fdiv(num, den)
    if dt != "fp32":
        y = k.cast(y, dt)
    out_row = k.addptr(k["out"], k.mul(row, k["out_stride"]))
    k.store(k.addptr(out_row, cols), y, mask)
    k.ret()
    return k.fn()


def layer_norm_fwd(block=1024, dt="fp16"):
    """Triton tutorial 05 forward: loops over the row in BLOCK chunks (mean, var, then normalize)."""
    k = K("_layer_norm_fwd_fused", ("X", "Y", "W", "B", "Mean", "Rstd", "stride", "N"),
          X=f"*{dt}", Y=f"*{dt}", W=f"*{dt}", B=f"*{dt}", Mean="*fp32", Rstd="*fp32", stride="i32", N="i32", eps="fp32")
    row = k.pid()
    X = k.addptr(k["X"], k.mul(row, k["stride"]))
    Y = k.addptr(k["Y"], k.mul(row, k["stride"]))
    zero = k.const(0, "i32")
    step = k.const(block, "i32")
    acc0 = k.const(0.0, "fp32", (block,))
    with k.for_(zero, k["N"], step, acc0) as (off, (acc,), res):
        cols = k.add(off, k.arange(block))
        a = k.load(k.addptr(X, cols), k.cmp("lt", cols, k["N"]), k.const(0.0, dt))
        a = k.cast(a, "fp32")
        k.yield_(k.add(acc, a))
    mean = k.fdiv(k.reduce(res[0], 0, "sum"), k.cast(k["N"], "fp32"))
    with k.for_(zero, k["N"], step, acc0) as (off, (acc,), res2):
        cols = k.add(off, k.arange(block))
        m = k.cmp("lt", cols, k["N"])
        x = k.cast(k.load(k.addptr(X, cols), m, k.const(0.0, dt)), "fp32")
        xm = k.select(m, k.sub(x, mean), k.const(0.0, "fp32"))
        k.yield_(k.add(acc, k.mul(xm, xm)))
    var = k.fdiv(k.reduce(res2[0], 0, "sum"), k.cast(k["N"], "fp32"))
    rstd = k.fdiv(k.const(1.0, "fp32"), k.unary("sqrt", k.add(var, k["eps"])))
    k.store(k.addptr(k["Mean"], row), mean)
    k.store(k.addptr(k["Rstd"], row), rstd)
    with k.for_(zero, k["N"], step) as (off, _, _r):
        cols = k.add(off, k.arange(block))
        m = k.cmp("lt", cols, k["N"])
        w = k.load(k.addptr(k["W"], cols), m)
        bb = k.load(k.addptr(k["B"], cols), m)
        x = k.cast(k.load(k.addptr(X, cols), m, k.const(0.0, dt)), "fp32")
        y = k.add(k.mul(k.mul(k.sub(x, mean), rstd), k.cast(w, "fp32")), k.cast(bb, "fp32"))
        k.store(k.addptr(Y, cols), k.cast(y, dt), m)
        k.yield_()
    k.ret()
    return k.fn()


def tile_2d(bm=32, bn=64, kind="sum", axis=1, dt="fp32"):
    """x[BM, BN] loaded with a row stride (x[:, None] * stride + y[None, :]); reduce along `axis`,
    store the result and also (x - reduced broadcast back) to Z."""
    k = K("tile_kernel", ("X", "Z", "R", "stride", "M", "N"), X=f"*{dt}", Z=f"*{dt}", R="*fp32" if kind not in ("argmax", "argmin") else "*i32",
          stride="i32", M="i32", N="i32")
    pid = k.pid()
    rm = k.add(k.mul(pid, k.const(bm, "i32")), k.arange(bm))
    rn = k.arange(bn)
    rm2 = k.expand(rm, 1)
    rn2 = k.expand(rn, 0)
    offs = k.add(k.mul(rm2, k["stride"]), rn2)
    mask = k.op("and", list(k._match(k.cmp("lt", rm2, k["M"]), k.cmp("lt", rn2, k["N"]))), T.block_type(T.int1, (bm, bn)))
    x = k.load(k.addptr(k["X"], offs), mask, k.const(0.0, dt))
    xf = k.cast(x, "fp32") if dt != "fp32" else x
    r = k.reduce(xf, axis, kind)
    if kind in ("argmax", "argmin"):
        rr = r
    else:
        rr = r
        back = k.expand(r, axis)
        z = k.sub(xf, back)
        k.store(k.addptr(k["Z"], offs), k.cast(z, dt) if dt != "fp32" else z, mask)
    if axis == 1:
        k.store(k.addptr(k["R"], rm), rr, k.cmp("lt", rm, k["M"]))
    else:
        k.store(k.addptr(k["R"], k.add(k.mul(pid, k.const(bn, "i32")), rn)), rr, k.cmp("lt", rn, k["N"]))
    k.ret()
    return k.fn()


def cumsum(block=1024, dt="fp32", reverse=False, kind="sum"):
    k = K("cumsum_kernel", ("X", "Y", "n"), X=f"*{dt}", Y=f"*{dt}", n="i32")
    offs = k.arange(block)
    m = k.cmp("lt", offs, k["n"])
    x = k.load(k.addptr(k["X"], offs), m, k.const(0 if dt.startswith("i") else 0.0, dt))
    y = k.scan(x, 0, kind, reverse)
    k.store(k.addptr(k["Y"], offs), y, m)
    k.ret()
    return k.fn()


def cumsum_2d(bm=16, bn=128, axis=1, dt="fp32"):
    k = K("cumsum2d_kernel", ("X", "Y"), X=f"*{dt}", Y=f"*{dt}")
    rm = k.expand(k.arange(bm), 1)
    rn = k.expand(k.arange(bn), 0)
    offs = k.add(k.mul(rm, k.const(bn, "i32")), rn)
    x = k.load(k.addptr(k["X"], offs))
    k.store(k.addptr(k["Y"], offs), k.scan(x, axis, "sum"))
    k.ret()
    return k.fn()


def atomics(block=256, kind="add", dt="fp32", use_old=True):
    """out[offs % 8] (op)= x[offs]; old values written to Old."""
    k = K("atomic_kernel", ("X", "Out", "Old", "n"), X=f"*{dt}", Out=f"*{dt}", Old=f"*{dt}", n="i32")
    offs = k.add(k.mul(k.pid(), k.const(block, "i32")), k.arange(block))
    m = k.cmp("lt", offs, k["n"])
    x = k.load(k.addptr(k["X"], offs), m)
    tgt = k.bin("rem", offs, k.const(8, "i32"))
    old = k.atomic(kind, k.addptr(k["Out"], tgt), x, m)
    if use_old:
        k.store(k.addptr(k["Old"], offs), old, m)
    k.ret()
    return k.fn()


def scalar_atomic(dt="fp32"):
    """sum of a block, then one atomic add per program (scalar pointer)."""
    k = K("sum_atomic", ("X", "Out"), X=f"*{dt}", Out=f"*{dt}", n="i32")
    offs = k.add(k.mul(k.pid(), k.const(512, "i32")), k.arange(512))
    m = k.cmp("lt", offs, k["n"])
    x = k.load(k.addptr(k["X"], offs), m, k.const(0.0, dt))
    s = k.reduce(x, 0, "sum")
    k.atomic("add", k["Out"], s)
    k.ret()
    return k.fn()


def counter_cas():
    """A ticket lock-ish use of atomic_cas on a scalar."""
    k = K("cas_kernel", ("L", "Out"), L="*i32", Out="*i32")
    old = k.cas(k["L"], k.const(0, "i32"), k.const(1, "i32"))
    k.store(k.addptr(k["Out"], k.pid()), old)
    k.ret()
    return k.fn()


def matmul(bm=64, bn=64, bk=32, dt="fp16", out="fp16"):
    """Triton tutorial 03 (without grouping): C = A @ B with a K loop; masks on M/N/K."""
    k = K("matmul_kernel", ("A", "B", "C", "M", "N", "K", "sam", "sbk", "scm"),
          A=f"*{dt}", B=f"*{dt}", C=f"*{out}", M="i32", N="i32", K="i32", sam="i32", sbk="i32", scm="i32")
    pid_m, pid_n = k.pid(0), k.pid(1)
    rm = k.add(k.mul(pid_m, k.const(bm, "i32")), k.arange(bm))
    rn = k.add(k.mul(pid_n, k.const(bn, "i32")), k.arange(bn))
    rk = k.arange(bk)
    a_ptrs = k.addptr(k["A"], k.add(k.mul(k.expand(rm, 1), k["sam"]), k.expand(rk, 0)))
    b_ptrs = k.addptr(k["B"], k.add(k.mul(k.expand(rk, 1), k["sbk"]), k.expand(rn, 0)))
    acc0 = k.const(0.0, "fp32", (bm, bn))
    zero, step = k.const(0, "i32"), k.const(bk, "i32")
    with k.for_(zero, k["K"], step, acc0, a_ptrs, b_ptrs) as (kk, (acc, ap, bp), res):
        rem = k.sub(k["K"], kk)
        a = k.load(ap, k.bcast(k.cmp("lt", k.expand(rk, 0), rem), (bm, bk)), k.const(0.0, dt))
        b = k.load(bp, k.bcast(k.cmp("lt", k.expand(rk, 1), rem), (bk, bn)), k.const(0.0, dt))
        acc2 = k.dot(a, b, acc)
        k.yield_(acc2, k.addptr(ap, k.const(bk, "i32")), k.addptr(bp, k.mul(step, k["sbk"])))
    c = res[0]
    if out != "fp32":
        c = k.cast(c, out)
    offs = k.add(k.mul(k.expand(rm, 1), k["scm"]), k.expand(rn, 0))
    mask = k.op("and", list(k._match(k.cmp("lt", k.expand(rm, 1), k["M"]), k.cmp("lt", k.expand(rn, 0), k["N"]))), T.block_type(T.int1, (bm, bn)))
    k.store(k.addptr(k["C"], offs), c, mask)
    k.ret()
    return k.fn()


def control_flow():
    """if with yields (scalar + block), while loop with a counter, early-exit style."""
    k = K("cf_kernel", ("X", "Y", "n"), X="*fp32", Y="*fp32", n="i32")
    offs = k.arange(128)
    x = k.load(k.addptr(k["X"], offs))
    c = k.cmp("gt", k["n"], k.const(4, "i32"))
    with k.if_(c, x.type, T.int32) as s:
        with s["then"]:
            k.yield_(k.mul(x, k.const(2.0, "fp32")), k.const(1, "i32"))
        with s["else"]:
            k.yield_(k.add(x, k.const(1.0, "fp32")), k.const(2, "i32"))
    y, tag = s["op"].results
    with k.while_(k.const(0, "i32"), y) as w:
        with w["in_before"] as (i, v):
            k.op("condition", [k.cmp("lt", i, k["n"]), i, v])
        with w["in_after"] as (i, v):
            k.yield_(k.add(i, k.const(1, "i32")), k.mul(v, k.const(0.5, "fp32")))
    cnt, yv = w["op"].results
    yv = k.add(yv, k.cast(k.add(cnt, tag), "fp32"))
    k.store(k.addptr(k["Y"], offs), yv)
    k.ret()
    return k.fn()
