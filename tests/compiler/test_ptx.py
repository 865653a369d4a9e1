"""NVPTX backend: compile Triton-style kernels for sm_90 and assemble the PTX with ptxas (no GPU).

Checks the code shape that performance depends on: 16-byte global accesses where the axis info
allows them, no local memory (spills) in simple kernels, fast-math instructions in softmax, and
that every kernel assembles. The kernels here are reused by test_gpu_codegen.py (GPU runs).
"""
from __future__ import annotations

import os
import re
import time

import pytest

import ir_builders as B
from compiler import ptxas
from compiler.backend import nvptx
from compiler.backend.layouts import blocked, default_layout, dot_operand, dot_acc_layout
from compiler.ptxas import require as find_ptxas

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels import bench_kernels

HAVE_FRONTEND = True
find_ptxas()  # CI installs ptxas (the nvidia-cuda-nvcc wheel): without it these tests must fail, not skip


def ptxas_report(ptx: str) -> dict:
    rep = ptxas.report(ptx)
    regs = int(re.search(r"Used (\d+) registers", rep).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", rep).group(1))
    stack = int(re.search(r"(\d+) bytes stack frame", rep).group(1))
    return {"regs": regs, "spills": spills, "stack": stack, "text": rep}


def ptx_loops(ptx: str) -> list[str]:
    """The text of each loop of the PTX: from its label to the branch back to it."""
    lines = ptx.splitlines()
    at, loops = {}, []
    for i, line in enumerate(lines):
        m = re.match(r"^(\$L__\w+):", line)
        if m:
            at[m.group(1)] = i
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)
        if m and m.group(1) in at:
            loops.append("\n".join(lines[at[m.group(1)]:i + 1]))
    return loops


# =============================================================================================
# Triton-style kernels (front end → backend)

if HAVE_FRONTEND:
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        y = num / den
        tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    layer_norm_fwd = bench_kernels("tutorial_kernels.py")._layer_norm_fwd_fused  # tutorial 05, the text the benchmark runs

    @triton.jit
    def reduce2d_kernel(X, Rows, Cols, Centered, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
        """Row sums (axis 1), column maxima (axis 0) and x - row_mean[:, None] of one [BM, BN] tile."""
        pid = tl.program_id(0)
        rm = pid * BM + tl.arange(0, BM)
        rn = tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(X + rm[:, None] * stride_m + rn[None, :], mask=mask, other=0.0)
        rs = tl.sum(x, axis=1)
        tl.store(Rows + rm, rs, mask=rm < M)
        cm = tl.max(tl.where(mask, x, -float("inf")), axis=0)
        tl.store(Cols + pid * BN + rn, cm, mask=rn < N)
        c = x - (rs / N)[:, None]
        tl.store(Centered + rm[:, None] * stride_m + rn[None, :], c, mask=mask)

    @triton.jit
    def argmax_kernel(X, Out, N, stride, BN: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BN)
        x = tl.load(X + row * stride + cols, mask=cols < N, other=-float("inf"))
        tl.store(Out + row, tl.argmax(x, axis=0))

    @triton.jit
    def cumsum_kernel(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < N, other=0)
        tl.store(Y + offs, tl.cumsum(x, axis=0), mask=offs < N)

    @triton.jit
    def cumsum2d_kernel(X, Y, BM: tl.constexpr, BN: tl.constexpr, AXIS: tl.constexpr):
        offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        x = tl.load(X + offs)
        tl.store(Y + offs, tl.cumsum(x, axis=AXIS))

    @triton.jit
    def atomic_add_kernel(X, Out, Old, N, BINS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(X + offs, mask=mask)
        old = tl.atomic_add(Out + offs % BINS, x, mask=mask)
        tl.store(Old + offs, old, mask=mask)

    @triton.jit
    def atomic_minmax_kernel(X, Mx, Mn, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(X + offs, mask=mask)
        tl.atomic_max(Mx + offs % 4, x, mask=mask)
        tl.atomic_min(Mn + offs % 4, x, mask=mask)

    @triton.jit
    def sum_atomic_kernel(X, Out, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < N, other=0.0)
        tl.atomic_add(Out, tl.sum(x, axis=0))

    @triton.jit
    def cas_kernel(Lock, Out):
        old = tl.atomic_cas(Lock, 0, 1)
        tl.store(Out + tl.program_id(0), old)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c = accumulator.to(c_ptr.dtype.element_ty)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    @triton.jit
    def control_flow_kernel(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        if n > 4:
            y = x * 2.0
            tag = 1
        else:
            y = x + 1.0
            tag = 2
        i = 0
        while i < n:
            y = y * 0.5
            i += 1
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for j in range(0, n):
            acc += tl.where(offs % 2 == j % 2, y, 0.0)
        tl.store(Y + offs, acc + (i + tag).to(tl.float32))

    @triton.jit
    def math_kernel(X, Y, N, OP: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(X + offs, mask=mask, other=1.0).to(tl.float32)
        if OP == "exp":
            y = tl.exp(x)
        elif OP == "log":
            y = tl.log(x)
        elif OP == "sqrt":
            y = tl.sqrt(x)
        elif OP == "rsqrt":
            y = tl.rsqrt(x)
        elif OP == "sin":
            y = tl.sin(x)
        elif OP == "cos":
            y = tl.cos(x)
        elif OP == "erf":
            y = tl.erf(x)
        elif OP == "sigmoid":
            y = tl.sigmoid(x)
        elif OP == "exp2":
            y = tl.exp2(x)
        elif OP == "floor":
            y = tl.floor(x)
        else:
            y = x / (x + 3.0)
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def transpose_kernel(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        x = tl.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
        tl.store(Y + rn[:, None] * M + rm[None, :], tl.trans(x), mask=(rn[:, None] < N) & (rm[None, :] < M))

    @triton.jit
    def cast_kernel(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        tl.store(Y + offs, tl.load(X + offs, mask=mask).to(Y.dtype.element_ty), mask=mask)


    @triton.jit
    def scan_variants_kernel(X, Ysum, Yprod, N, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < N
        x = tl.load(X + offs, mask=m, other=0.0)
        tl.store(Ysum + offs, tl.cumsum(x, axis=0, reverse=True), mask=m)
        tl.store(Yprod + offs, tl.cumprod(1.0 + x * 0.01, axis=0), mask=m)

    @triton.jit
    def minmax_index_kernel(X, Vmin, Imin, Vmax, Imax, Xor, M, N, BM: tl.constexpr, BN: tl.constexpr):
        """Column argmin/min (axis 0) of fp16 data, row max with indices (axis 1), xor_sum of ints."""
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=float("inf"))
        vmin, imin = tl.min(x, axis=0, return_indices=True)
        tl.store(Vmin + rn, vmin, mask=rn < N)
        tl.store(Imin + rn, imin, mask=rn < N)
        xm = tl.where(mask, x, -float("inf"))
        vmax, imax = tl.max(xm, axis=1, return_indices=True)
        tl.store(Vmax + rm, vmax, mask=rm < M)
        tl.store(Imax + rm, imax, mask=rm < M)
        bits = tl.where(mask, (x * 8.0).to(tl.int32), 0)
        tl.store(Xor, tl.xor_sum(tl.xor_sum(bits, axis=1), axis=0))

    @triton.jit
    def total_sum_kernel(X, Out, BM: tl.constexpr, BN: tl.constexpr):
        x = tl.load(X + tl.program_id(0) * BM * BN + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :])
        tl.store(Out + tl.program_id(0), tl.sum(x))

    @triton.jit
    def loops_kernel(X, Y, n, flag, scale, BLOCK: tl.constexpr):
        """Nested loops, an if inside a loop, a while over block values, scalar fp16/i1 arguments."""
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs).to(tl.float32)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(0, n):
            for j in range(0, 2):
                if (i + j) % 2 == 0:
                    acc += x
                else:
                    acc -= 0.5 * x
        v = x
        k = 0
        while tl.max(tl.abs(v), axis=0) > 1.0:
            v = v * 0.5
            k += 1
        if flag:
            acc = acc + v
        tl.store(Y + offs, (acc * scale.to(tl.float32) + k).to(Y.dtype.element_ty))

    @triton.jit
    def atomic_bits_kernel(X, Xchg, And, Or, Xor, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        x = tl.load(X + offs, mask=m)
        tl.atomic_xchg(Xchg + offs, x, mask=m)
        tl.atomic_and(And + offs % 8, x, mask=m)
        tl.atomic_or(Or + offs % 8, x, mask=m)
        tl.atomic_xor(Xor + offs % 8, x, mask=m)

    @triton.jit
    def gather_i64_kernel(X, Idx, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        idx = tl.load(Idx + offs, mask=m, other=0)  # int64 indices
        tl.store(Y + offs, tl.load(X + idx, mask=m), mask=m)


def _sig(**kw):
    return kw


P32 = "*fp32"
# name → (kernel, signature, constexprs, num_warps, divisible_by_16)
CASES = {}
if HAVE_FRONTEND:
    CASES = {
        "add_fp32": (add_kernel, _sig(x_ptr=P32, y_ptr=P32, out_ptr=P32, n="i32"), {"BLOCK": 1024}, 4, ("x_ptr", "y_ptr", "out_ptr", "n")),
        "add_fp16": (add_kernel, _sig(x_ptr="*fp16", y_ptr="*fp16", out_ptr="*fp16", n="i32"), {"BLOCK": 2048}, 4, ("x_ptr", "y_ptr", "out_ptr", "n")),
        "add_unaligned": (add_kernel, _sig(x_ptr=P32, y_ptr=P32, out_ptr=P32, n="i32"), {"BLOCK": 1024}, 4, ("x_ptr", "y_ptr", "out_ptr")),
        "softmax_fp32": (softmax_kernel, _sig(out_ptr=P32, in_ptr=P32, in_stride="i32", out_stride="i32", n_cols="i32"), {"BLOCK": 1024}, 4,
                         ("out_ptr", "in_ptr", "in_stride", "out_stride", "n_cols")),
        "softmax_fp16_8w": (softmax_kernel, _sig(out_ptr="*fp16", in_ptr="*fp16", in_stride="i32", out_stride="i32", n_cols="i32"), {"BLOCK": 4096}, 8,
                            ("out_ptr", "in_ptr", "in_stride", "out_stride", "n_cols")),
        "layer_norm_fp16": (layer_norm_fwd, _sig(X="*fp16", Y="*fp16", W="*fp16", B="*fp16", Mean=P32, Rstd=P32, stride="i32", N="i32", eps="fp32"),
                            {"BLOCK_SIZE": 1024}, 8, ("X", "Y", "W", "B", "Mean", "Rstd", "stride", "N")),
        "reduce2d": (reduce2d_kernel, _sig(X=P32, Rows=P32, Cols=P32, Centered=P32, M="i32", N="i32", stride_m="i32"), {"BM": 32, "BN": 64}, 4,
                     ("X", "Rows", "Cols", "Centered", "M", "N", "stride_m")),
        "argmax": (argmax_kernel, _sig(X=P32, Out="*i32", N="i32", stride="i32"), {"BN": 512}, 4, ("X", "Out", "stride")),
        "cumsum": (cumsum_kernel, _sig(X=P32, Y=P32, N="i32"), {"BLOCK": 1024}, 4, ("X", "Y")),
        "cumsum_i32": (cumsum_kernel, _sig(X="*i32", Y="*i32", N="i32"), {"BLOCK": 256}, 2, ("X", "Y")),
        "cumsum2d_ax0": (cumsum2d_kernel, _sig(X=P32, Y=P32), {"BM": 64, "BN": 32, "AXIS": 0}, 4, ("X", "Y")),
        "cumsum2d_ax1": (cumsum2d_kernel, _sig(X=P32, Y=P32), {"BM": 16, "BN": 128, "AXIS": 1}, 4, ("X", "Y")),
        "atomic_add": (atomic_add_kernel, _sig(X=P32, Out=P32, Old=P32, N="i32"), {"BINS": 16, "BLOCK": 256}, 4, ("X", "Out", "Old")),
        "atomic_add_replicated": (atomic_add_kernel, _sig(X=P32, Out=P32, Old=P32, N="i32"), {"BINS": 16, "BLOCK": 32}, 4, ("X", "Out", "Old")),
        "atomic_minmax_f32": (atomic_minmax_kernel, _sig(X=P32, Mx=P32, Mn=P32, N="i32"), {"BLOCK": 128}, 4, ("X", "Mx", "Mn")),
        "atomic_minmax_i32": (atomic_minmax_kernel, _sig(X="*i32", Mx="*i32", Mn="*i32", N="i32"), {"BLOCK": 128}, 4, ("X", "Mx", "Mn")),
        "sum_atomic": (sum_atomic_kernel, _sig(X=P32, Out=P32, N="i32"), {"BLOCK": 1024}, 4, ("X", "Out")),
        "cas": (cas_kernel, _sig(Lock="*i32", Out="*i32"), {}, 1, ("Lock", "Out")),
        "matmul_fp16": (matmul_kernel, _sig(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
                                            stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32"),
                        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4, ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
        "matmul_bf16": (matmul_kernel, _sig(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*fp32", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
                                            stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32"),
                        {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}, 4, ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
        "matmul_fp32": (matmul_kernel, _sig(a_ptr=P32, b_ptr=P32, c_ptr=P32, M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
                                            stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32"),
                        {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, 4, ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")),
        "control_flow": (control_flow_kernel, _sig(X=P32, Y=P32, n="i32"), {"BLOCK": 128}, 4, ("X", "Y")),
        "transpose": (transpose_kernel, _sig(X=P32, Y=P32, M="i32", N="i32"), {"BM": 64, "BN": 64}, 4, ("X", "Y", "M", "N")),
        "cast_fp32_bf16": (cast_kernel, _sig(X=P32, Y="*bf16", N="i32"), {"BLOCK": 1024}, 4, ("X", "Y")),
        "cast_fp16_i32": (cast_kernel, _sig(X="*fp16", Y="*i32", N="i32"), {"BLOCK": 1024}, 4, ("X", "Y")),
        "cast_bool": (cast_kernel, _sig(X="*i1", Y=P32, N="i32"), {"BLOCK": 1024}, 4, ("X", "Y")),
    }
    CASES.update({
        "scan_variants": (scan_variants_kernel, _sig(X=P32, Ysum=P32, Yprod=P32, N="i32"), {"BLOCK": 1024}, 4, ("X", "Ysum", "Yprod")),
        "minmax_index": (minmax_index_kernel, _sig(X="*fp16", Vmin="*fp16", Imin="*i32", Vmax="*fp16", Imax="*i32", Xor="*i32", M="i32", N="i32"),
                         {"BM": 64, "BN": 32}, 4, ("X", "Vmin", "Imin", "Vmax", "Imax", "Xor")),
        "total_sum": (total_sum_kernel, _sig(X=P32, Out=P32), {"BM": 32, "BN": 64}, 4, ("X", "Out")),
        "loops": (loops_kernel, _sig(X="*fp16", Y="*fp16", n="i32", flag="i1", scale="fp16"), {"BLOCK": 256}, 4, ("X", "Y")),
        "atomic_bits": (atomic_bits_kernel, _sig(X="*i32", Xchg="*i32", And="*i32", Or="*i32", Xor="*i32", N="i32"), {"BLOCK": 128}, 4,
                        ("X", "Xchg", "And", "Or", "Xor")),
        "gather_i64": (gather_i64_kernel, _sig(X=P32, Idx="*i64", Y=P32, N="i32"), {"BLOCK": 512}, 4, ("X", "Idx", "Y")),
    })
    for _op in ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "erf", "sigmoid", "exp2", "floor", "div"):
        CASES[f"math_{_op}"] = (math_kernel, _sig(X=P32, Y=P32, N="i32"), {"OP": _op, "BLOCK": 1024}, 4, ("X", "Y"))
    CASES["math_exp_bf16"] = (math_kernel, _sig(X="*bf16", Y="*bf16", N="i32"), {"OP": "exp", "BLOCK": 1024}, 4, ("X", "Y"))


# unit strides are specialized to 1 at launch (Triton's equal_to_1)
EQUAL_TO_1 = {"matmul_fp16": ("stride_ak", "stride_bn", "stride_cn"), "matmul_bf16": ("stride_ak", "stride_bn", "stride_cn"),
              "matmul_fp32": ("stride_ak", "stride_bn", "stride_cn")}
_compiled = {}


def compile_case(name):
    if name not in _compiled:
        kern, sig, cx, nw, div = CASES[name]
        _compiled[name] = triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, target="sm_90", divisible_by_16=div,
                                         equal_to_1=EQUAL_TO_1.get(name, ()))
    return _compiled[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_and_assembles(name):
    ck = compile_case(name)
    ptx = ck.asm["ptx"]
    rep = ptxas_report(ptx)
    assert rep["spills"] == 0, rep["text"]
    if name not in ("math_sin", "math_cos"):  # libdevice's slow-path argument reduction uses a local array
        assert ".local" not in ptx, "local memory in generated PTX"
    assert ck.metadata["shared"] < 64 * 1024


def test_vector_add_is_16_byte_vectorized():
    ptx = compile_case("add_fp32").asm["ptx"]
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert ".local" not in ptx
    # fp16: 8 halves per 16-byte access
    ptx16 = compile_case("add_fp16").asm["ptx"]
    assert "ld.global.v4.b32" in ptx16 and "st.global.v4.b32" in ptx16
    rep = ptxas_report(ptx)
    assert rep["regs"] <= 40, rep["text"]


def test_unaligned_bound_limits_vector_width():
    """n not divisible by 16: the mask is not constant over 4 elements → scalar accesses."""
    ptx = compile_case("add_unaligned").asm["ptx"]
    assert "ld.global.v4" not in ptx
    assert "ld.global.b32" in ptx


def test_softmax_shape():
    ptx = compile_case("softmax_fp32").asm["ptx"]
    assert "ex2.approx" in ptx
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "shfl.sync.bfly" in ptx
    assert "div.full.f32" in ptx or "div.rn.f32" in ptx
    assert ".local" not in ptx



if HAVE_FRONTEND:
    @triton.jit
    def exp_and_exp2_kernel(x_ptr, e_ptr, e2_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(e_ptr + offs, tl.exp(x))
        tl.store(e2_ptr + offs, tl.math.exp2(x))


def test_exp2_flushes_denormals_as_triton_does():
    """Triton's fp32 exp2 is libdevice's exp2f under ftz (ex2.approx.ftz.f32, one MUFU.EX2); its exp
    keeps denormals (ex2.approx.f32). Attention's softmax runs 64+ exp2 per thread per key block:
    the denormal-keeping form costs a compare and two multiplies more each."""
    ck = triton.compile(exp_and_exp2_kernel, signature={"x_ptr": "*fp32", "e_ptr": "*fp32", "e2_ptr": "*fp32"},
                        constexprs={"BLOCK": 128}, num_warps=4, target="sm_90")
    ptx = ck.asm["ptx"]
    assert len(re.findall(r"ex2\.approx\.ftz\.f32", ptx)) == 1, ptx
    assert len(re.findall(r"ex2\.approx\.f32", ptx)) == 1, ptx
    ptxas.assemble(ptx, "sm_90")

def test_layer_norm_loads_vectorized_in_loops():
    ptx = compile_case("layer_norm_fp16").asm["ptx"]
    # 1024 fp16 over 256 threads: 4 per thread → 8-byte accesses (Triton caps the vector at
    # numel / threads too), through loop-carried index arithmetic
    assert "ld.global.v2.b32" in ptx or "ld.global.v4.b32" in ptx
    assert "sqrt.approx.f32" in ptx or "sqrt.rn.f32" in ptx


def test_matmul_inner_loop_vectorized():
    ptx = compile_case("matmul_fp16").asm["ptx"]
    assert "ld.global.v4.b32" in ptx or "cp.async.bulk.tensor" in ptx \
        or re.search(r"cp\.async\.c[ag]\.shared\.global(\.\w+)* \[[^]]+\], \[[^]]+\], 16", ptx)
    assert "fma.rn.f32" in ptx or "mma.sync" in ptx or "wgmma" in ptx


def test_atomics_shape():
    ptx = compile_case("atomic_add").asm["ptx"]
    assert "atom.global.gpu.acq_rel.add.f32" in ptx
    ptx = compile_case("atomic_minmax_f32").asm["ptx"]
    assert "atom.global.gpu.acq_rel.max.s32" in ptx and "atom.global.gpu.acq_rel.min.u32" in ptx
    ptx = compile_case("cas").asm["ptx"]
    assert "atom.global.acq_rel.gpu.cas.b32" in ptx


def test_first_compile_time_vector_add():
    """Front end + backend of a fresh vector-add specialization in a warm process."""
    compile_case("add_fp32")  # warm: target machine, pass builder

    @triton.jit
    def fresh_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
    best = 1e9
    for block in (128, 256, 512, 2048, 4096, 8192, 16384):  # best of several (CI machines are noisy)
        t = time.perf_counter()
        from compiler.runtime.compile import _backend_compile, build_ir
        sig = {"x_ptr": P32, "y_ptr": P32, "out_ptr": P32, "n": "i32"}
        ir_fn = build_ir(fresh_add, sig, {"BLOCK": block}, tuple(sig))
        _backend_compile(ir_fn, 4, 3, "sm_90")
        best = min(best, time.perf_counter() - t)
    assert best < 0.030, f"{best * 1e3:.1f} ms"


# =============================================================================================
# Hand-built IR (independent of the front end)

IR_CASES = {
    "vector_add": lambda: B.vector_add(),
    "softmax": lambda: B.softmax(),
    "softmax_bf16": lambda: B.softmax(dt="bf16"),
    "layer_norm": lambda: B.layer_norm_fwd(),
    "tile_sum_ax1": lambda: B.tile_2d(),
    "tile_max_ax0": lambda: B.tile_2d(kind="max", axis=0),
    "tile_argmax": lambda: B.tile_2d(kind="argmax", axis=1),
    "tile_argmin_fp16": lambda: B.tile_2d(kind="argmin", axis=0, dt="fp16"),
    "cumsum": lambda: B.cumsum(),
    "cumsum_rev": lambda: B.cumsum(reverse=True),
    "cummax": lambda: B.cumsum(kind="max"),
    "cumsum2d_0": lambda: B.cumsum_2d(axis=0),
    "cumsum2d_1": lambda: B.cumsum_2d(axis=1),
    "atomic_add": lambda: B.atomics(),
    "atomic_max_f32": lambda: B.atomics(kind="max"),
    "atomic_min_i32": lambda: B.atomics(kind="min", dt="i32"),
    "atomic_xchg": lambda: B.atomics(kind="xchg", dt="i32"),
    "atomic_replicated": lambda: B.atomics(block=32),
    "scalar_atomic": lambda: B.scalar_atomic(),
    "cas": lambda: B.counter_cas(),
    "matmul_fp16": lambda: B.matmul(),
    "matmul_bf16": lambda: B.matmul(dt="bf16", out="bf16"),
    "matmul_fp32": lambda: B.matmul(dt="fp32", out="fp32", bm=32, bn=32, bk=16),
    "control_flow": lambda: B.control_flow(),
}


@pytest.mark.parametrize("name", sorted(IR_CASES))
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_hand_built_ir(name, num_warps):
    fn = IR_CASES[name]()
    out = nvptx.compile_ir(fn, num_warps=num_warps)
    assert set(out) >= {"name", "llir", "ptx", "shared", "num_warps"}
    assert out["name"] == fn.name and out["num_warps"] == num_warps
    rep = ptxas_report(out["ptx"])
    if not (name.startswith("matmul") and num_warps == 1):  # a 64×64 FMA tile on one warp: 128 accumulators per thread
        assert rep["spills"] == 0, rep["text"]
    assert ".maxntid" in out["ptx"] and str(32 * num_warps) in out["ptx"].split(".maxntid")[1].split("\n")[0]


def test_ir_vector_add_vectorized():
    out = nvptx.compile_ir(B.vector_add(), num_warps=4)
    assert out["ptx"].count("ld.global.v4.b32") == 4 and out["ptx"].count("st.global.v4.b32") == 2
    assert out["shared"] == 0


def test_params_abi():
    k = B.K("abi", x="*fp16", h="fp16", b="i1", f="fp32", i="i64")
    k.ret()
    out = nvptx.compile_ir(k.fn(), num_warps=1)
    assert [p["abi"] for p in out["params"]] == ["ptr", "b16", "i32", "f32", "i64"]
    assert ".param .b16" in out["ptx"] or ".param .u16" in out["ptx"]


# ---- layouts ----------------------------------------------------------------------------------

def _all_coords(lay):
    seen = {}
    for w in range(lay.num_warps):
        for lane in range(32):
            for r in range(lay.n_regs):
                seen.setdefault(lay.coord(r, lane, w), 0)
                seen[lay.coord(r, lane, w)] += 1
    return seen


@pytest.mark.parametrize("shape,order,vec,nw", [((1024,), (0,), 4, 4), ((64,), (0,), 4, 4), ((32, 64), (1, 0), 4, 4),
                                                ((16, 16), (0, 1), 2, 8), ((4, 8, 16), (2, 1, 0), 4, 2)])
def test_blocked_layout_covers_shape(shape, order, vec, nw):
    lay = blocked(shape, order, vec, nw)
    seen = _all_coords(lay)
    import itertools
    assert set(seen) == set(itertools.product(*[range(s) for s in shape]))
    # reg bits never replicate; first `vec` registers are contiguous along order[0]
    assert all(any(b) for b in lay.reg)
    for i in range(min(len(lay.reg), vec.bit_length() - 1)):
        assert lay.reg[i][order[0]] == 1 << i


def test_slice_expand_broadcast_trans():
    lay = blocked((32, 64), (1, 0), 4, 4)
    s1 = lay.slice(1)
    assert s1.shape == (32,)
    assert set(_all_coords(s1)) == {(i,) for i in range(32)}
    e = s1.expand(1)
    assert e.shape == (32, 1) and e == lay.project((32, 1))
    t = lay.trans((1, 0))
    assert t.shape == (64, 32) and t.trans((1, 0)) == lay
    r = lay.reshape((2048,))
    assert set(_all_coords(r)) == {(i,) for i in range(2048)}


def test_dot_operand_layouts():
    c = dot_acc_layout(64, 64, 4)
    a, b = dot_operand(c, 0, 32), dot_operand(c, 1, 32)
    assert a.shape == (64, 32) and b.shape == (32, 64)
    am, bm = a.reg_index_map(), b.reg_index_map()
    for r in range(c.n_regs):
        m, n = c.reg_coord(r)
        for k in range(32):
            assert (m, k) in am and (k, n) in bm
    assert default_layout((8,), 4).thread_replicated()


# the specializations test_gpu_codegen.py launches (beyond CASES): they must all compile and assemble
GPU_CONFIGS = [
    ("add_fp32", {"BLOCK": 4096}, 8), ("add_fp32", {"BLOCK": 128}, 1), ("add_fp32", {"BLOCK": 64}, 4),
    ("softmax_fp32", {"BLOCK": 4096}, 8), ("softmax_fp32", {"BLOCK": 128}, 1), ("softmax_fp32", {"BLOCK": 64}, 4),
    ("layer_norm_fp16", {"BLOCK_SIZE": 512}, 8), ("reduce2d", {"BM": 32, "BN": 64}, 8), ("reduce2d", {"BM": 32, "BN": 64}, 1),
    ("argmax", {"BN": 64}, 1), ("argmax", {"BN": 4096}, 8), ("cumsum", {"BLOCK": 4096}, 8), ("cumsum", {"BLOCK": 32}, 4),
    ("cumsum2d_ax0", {"BM": 32, "BN": 32, "AXIS": 0}, 8), ("cumsum2d_ax1", {"BM": 8, "BN": 256, "AXIS": 1}, 2),
    ("atomic_add", {"BINS": 16, "BLOCK": 1024}, 8), ("matmul_fp16", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, 8),
]


@pytest.mark.parametrize("name,cx,nw", GPU_CONFIGS, ids=[f"{n}-{'-'.join(map(str, c.values()))}-w{w}" for n, c, w in GPU_CONFIGS])
def test_gpu_configs_compile(name, cx, nw):
    kern, sig, _cx, _nw, div = CASES[name]
    ck = triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, target="sm_90", divisible_by_16=div,
                        equal_to_1=EQUAL_TO_1.get(name, ()))
    rep = ptxas_report(ck.asm["ptx"])
    assert rep["spills"] == 0, rep["text"]


# ---- layout algebra, exhaustively on small shapes -----------------------------------------------

def _owners(lay):
    """coordinate → set of (reg, lane, warp) holding it."""
    out = {}
    for w in range(lay.num_warps):
        for lane in range(32):
            for r in range(lay.n_regs):
                out.setdefault(lay.coord(r, lane, w), set()).add((r, lane, w))
    return out


@pytest.mark.parametrize("shape", [(8,), (64,), (512,), (4, 8), (16, 64), (64, 16), (2, 4, 32), (1, 128)])
@pytest.mark.parametrize("nw", [1, 4])
def test_layout_transformations_are_consistent(shape, nw):
    import itertools
    rank = len(shape)
    all_coords = set(itertools.product(*[range(s) for s in shape]))
    for order in itertools.permutations(range(rank)):
        for vec in (1, 2, 4):
            lay = blocked(shape, order, vec, nw)
            own = _owners(lay)
            assert set(own) == all_coords
            # every thread's registers hold distinct coordinates
            for w in range(nw):
                for lane in range(32):
                    cs = [lay.coord(r, lane, w) for r in range(lay.n_regs)]
                    assert len(set(cs)) == len(cs)
            # slice: the reduced layout's coordinate is the source coordinate without the axis
            for ax in range(rank):
                sl = lay.slice(ax)
                if not sl.shape:
                    continue
                for w in range(nw):
                    for lane in range(32):
                        have = {tuple(c[:ax] + c[ax + 1:]) for c in (lay.coord(r, lane, w) for r in range(lay.n_regs))}
                        got = {sl.coord(r, lane, w) for r in range(sl.n_regs)}
                        assert have == got
                # expand of the slice = projection of the source onto a size-1 axis
                assert sl.expand(ax) == lay.project(shape[:ax] + (1,) + shape[ax + 1:])
            # reshape to 1-D and back is the identity; flat offsets are preserved
            flat = lay.reshape((lay.numel(),))
            assert flat.reshape(shape) == lay
            for w in range(nw):
                for lane in range(0, 32, 7):
                    for r in range(lay.n_regs):
                        assert flat.coord(r, lane, w)[0] == lay.flat(lay.coord(r, lane, w))
            if rank == 2:
                t = lay.trans((1, 0))
                for r in range(lay.n_regs):
                    c = lay.coord(r, 5, nw - 1)
                    assert t.coord(r, 5, nw - 1) == (c[1], c[0])


def test_broadcast_layout_extends_source():
    from compiler.backend.assign_layouts import broadcast_layout
    src = blocked((32, 64), (1, 0), 4, 4).project((32, 1))
    lay = broadcast_layout(src, (32, 64))
    import itertools
    assert set(_owners(lay)) == set(itertools.product(range(32), range(64)))
    assert lay.project((32, 1)) == src


# ---- every element type through every op (LLVM selection failures kill the process: subprocess) --

def _type_sweep(dt):
    from compiler.language import dtypes as T
    d = T.from_signature(dt)
    k = B.K("sweep", ("X", "Y", "Z"), X=f"*{dt}", Y=f"*{dt}", Z=f"*{dt}", s=dt)
    offs = k.arange(256)
    x = k.load(k.addptr(k["X"], offs))
    y = k.load(k.addptr(k["Y"], offs))
    ops = ["add", "sub", "mul", "maximum", "minimum"]
    if d.is_floating():
        ops += ["fdiv", "rem", "maximum_nan", "minimum_nan"]
    else:
        ops += ["div", "rem", "and", "or", "xor"] + (["shl", "shr"] if not d.is_bool() else [])
    acc = x
    for o in ops:
        r = k.bin(o, acc, y)
        acc = k.select(k.cmp("lt", r, x), r, y) if True else r
    for pred in ("eq", "ne", "le", "ge", "gt"):
        acc = k.select(k.cmp(pred, acc, k["s"]), acc, x)
    if d.is_floating():
        for u in ("neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "erf", "tanh"):
            acc = k.unary(u, acc)
        acc = k.op("fma", [acc, x, y], acc.type)
    else:
        acc = k.unary("not", acc)
        if not d.is_bool():
            acc = k.unary("abs", acc) if d.is_int_signed() else acc
            acc = k.op("umulhi", [acc, y], acc.type) if d.primitive_bitwidth in (32, 64) else acc
    for tgt in ("fp16", "bf16", "fp32", "fp64", "i8", "i32", "i64", "u32", "i1"):
        c = k.cast(acc, tgt)
        acc = k.cast(c, dt)
    for kind in ("sum", "max", "min", "argmax", "argmin") + (("xor_sum",) if d.is_int() else ()):
        r = k.reduce(acc, 0, kind)
        acc = k.select(k.cmp("gt", acc, k.cast(r, dt) if r.dtype != d else r), acc, x)
    for kind in ("sum", "max", "min", "prod"):
        acc = k.scan(acc, 0, kind, reverse=kind == "max")
    k.store(k.addptr(k["Z"], offs), acc)
    k.ret()
    fn = k.fn()
    out = nvptx.compile_ir(fn, num_warps=4)
    ptxas.report(out["ptx"])
    return out


@pytest.mark.parametrize("dt", ["fp16", "bf16", "fp32", "fp64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i1"])
def test_every_type_through_every_op(dt):
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_ptx as T; T.ptxas_report(T._type_sweep({dt!r})['ptx'])"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.parametrize("cache", ["", ".cg", ".ca", ".cs"])
@pytest.mark.parametrize("ev", ["", "evict_first", "evict_last"])
@pytest.mark.parametrize("masked", [False, True])
def test_cache_and_eviction_qualifiers(cache, ev, masked):
    k = B.K("ev", ("X", "Y", "n"), X="*fp32", Y="*fp32", n="i32")
    offs = k.arange(512)
    m = k.cmp("lt", offs, k["n"]) if masked else None
    x = k.op("load", [k.addptr(k["X"], offs), m, None], B.bt(B.T.float32, (512,)), cache=cache, eviction=ev, volatile=False)
    k.op("store", [k.addptr(k["Y"], offs), x, m], None, cache=".cs" if cache == ".cs" else "", eviction=ev)
    k.ret()
    ptx = nvptx.compile_ir(k.fn(), num_warps=4)["ptx"]
    ptxas_report(ptx)
    want = cache or {"evict_first": ".L1::evict_first", "evict_last": ".L1::evict_last"}.get(ev, "")
    if ev:  # Triton's L2 eviction hint: a createpolicy register on the access
        want += ".L2::cache_hint"
        assert f"createpolicy.fractional.L2::{ev}.b64" in ptx
        assert re.search(r"st\.global[.\w:]*\.L2::cache_hint\.v4\.b32 \[[^]]+\], \{[^}]+\}, %rd\d+;", ptx)
    assert f"ld.global{want}.v4.b32" in ptx


def test_chunked_conversion_plan_is_exact():
    """The chunked shared-memory conversion (big tiles): every element a thread reads in chunk c
    was written in chunk c at the same local offset (checked over all threads)."""
    from compiler.backend.lowering import _register_only_bit
    have = blocked((256, 128), (1, 0), 4, 4)
    want = blocked((256, 128), (1, 0), 1, 4)
    total = 15
    k = 0
    while k < 3 and _register_only_bit(have, want, total - 1 - k):
        k += 1
    assert k == 3
    shift = total - k
    for c in range(1 << k):
        mem = {}
        for w in range(4):
            for lane in range(32):
                for r in range(have.n_regs):
                    f = have.flat(have.coord(r, lane, w))
                    if f >> shift == c:
                        mem.setdefault(f & ((1 << shift) - 1), set()).add(have.coord(r, lane, w))
        for w in range(4):
            for lane in range(32):
                for r in range(want.n_regs):
                    co = want.coord(r, lane, w)
                    f = want.flat(co)
                    # the thread part never touches chunk bits, so the register alone decides the chunk
                    assert (f >> shift) == (want.flat(want.reg_coord(r)) >> shift)
                    if f >> shift == c:
                        assert mem[f & ((1 << shift) - 1)] == {co}


def test_big_conversion_is_chunked():
    from compiler.backend.lowering import CONVERT_CHUNK_BYTES, Lowering
    from compiler.backend.options import LoweringOptions
    from llvmlite import ir as ll
    k = B.K("big", ("X",), X="*fp32")
    k.ret()
    lw = Lowering(k.fn(), LoweringOptions(num_warps=4, target="sm_90"), nvptx.RULES)
    have = blocked((256, 128), (1, 0), 4, 4)
    want = blocked((256, 128), (1, 0), 1, 4)
    regs = [ll.Constant(ll.FloatType(), float(i)) for i in range(have.n_regs)]
    out = lw.convert(regs, have, want, B.T.float32)
    assert len(out) == want.n_regs
    assert lw.smem_bytes <= CONVERT_CHUNK_BYTES
    lw.b.store(out[0], lw.func.args[0])
    lw.b.ret_void()
    from compiler.backend.nvptx import module_text
    from compiler.backend.llvm_target import llir_to_ptx
    ptxas_report(llir_to_ptx(module_text(lw))[1])


def test_print_without_values_has_no_index():
    """Triton's format for a print of text alone: every thread prints `pid (x, y, z) text`."""
    @triton.jit
    def says_hello():
        print("no arg")

    ptx = triton.compile(says_hello, {}, {}, num_warps=4, target="sm_90").asm["ptx"]
    formats = bytes(int(c) for blob in re.findall(r"printf_fmt_\d+\[\d+\] = \{([^}]*)\}", ptx)
                    for c in blob.split(",")).decode(errors="replace")
    assert "pid (%d, %d, %d) no arg\n" in formats
    ptxas_report(ptx)


def test_device_print_and_assert_lowering(monkeypatch):
    """device_print becomes one vprintf per owned element (format strings with pid and idx; a scalar is
    printed by every thread, as Triton does);
    device_assert becomes __assertfail only in debug mode (Triton's rule); both assemble."""
    from tests.compiler.kernels import language as L
    ck = triton.compile(L.print_many_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 8}, num_warps=4, target="sm_90",
                        divisible_by_16=("x_ptr",))
    ptx = ck.asm["ptx"]
    assert ptx.count("call.uni") >= 3 and ".extern .func  (.param .b32 func_retval0) vprintf" in ptx   # a site per print at least (LLVM may duplicate one)
    formats = bytes(int(c) for blob in re.findall(r"printf_fmt_\d+\[\d+\] = \{([^}]*)\}", ptx)
                    for c in blob.split(",")).decode(errors="replace")
    assert "pid (%d, %d, %d) idx (%1d, %1d) x: %f" in formats      # indices padded to their dims' width
    assert "pid (%d, %d, %d) idx () pid: %d" in formats
    assert "idx (%1d, %1d) h: (operand 1) 0x%04x" in formats and "(operand 0) 0x%08x" in formats
    ptxas_report(ptx)
    for debug, calls in (("0", 0), ("1", 1)):
        monkeypatch.setenv("BLOCKTUNE_DEBUG", debug)
        ck = triton.compile(L.assert_kernel, {"x_ptr": "*i32", "n": "i32"}, {"BLOCK": 128}, num_warps=4,
                            target="sm_90")
        assert ("call.uni __assertfail" in ck.asm["ptx"]) == bool(calls)
        ptxas_report(ck.asm["ptx"])
