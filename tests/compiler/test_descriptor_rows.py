"""desc.gather / desc.scatter (rows picked by a block of indices), the functional descriptor
interface and loop-carried descriptors: interpret mode against torch, their errors, the PTX they
compile to (assembled with ptxas), and the same kernels on the GPU."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.errors import CompilationError
from tests.compiler.kernels import descriptor_rows as K
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401


def _gather_ref(x, rows, col, width, pad):
    """x[rows[i], col:col + width], padded where a row or column is outside x."""
    out = torch.full((len(rows), width), pad, dtype=x.dtype)
    for i, r in enumerate(rows.tolist()):
        if 0 <= r < x.shape[0]:
            cols = range(col, min(col + width, x.shape[1]))
            out[i, :len(cols)] = x[r, col:col + len(cols)]
    return out


@pytest.mark.parametrize("dtype,C,padding", [(torch.float32, 16, "zero"), (torch.float32, 16, "nan"),
                                             (torch.float16, 32, "nan"), (torch.int8, 64, "zero")])
def test_gather_rows(interpret, gen, dtype, C, padding):
    M, N, R = 37, 50, 16
    x = rand(gen, (M, N), dtype, -100, 100)
    rows = torch.randint(-3, M + 3, (R,), generator=gen, dtype=torch.int32)  # some rows outside X
    col = 40  # the last columns run past N
    out = poisoned((R, C), dtype)
    K.gather_rows_kernel[(1,)](x, rows, out, M, N, col, PADDING=padding, R=R, C=C)
    ref = _gather_ref(x, rows, col, C, float("nan") if padding == "nan" else 0)
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype,C", [(torch.float32, 16), (torch.bfloat16, 32)])
def test_scatter_rows(interpret, gen, dtype, C):
    M, N, R = 40, 48, 8
    src = rand(gen, (R, C), dtype)
    rows = torch.randperm(M + 6, generator=gen)[:R].to(torch.int32) - 3  # distinct; some outside Y
    col = 40
    y = poisoned((M, N), dtype)
    K.scatter_rows_kernel[(1,)](src, rows, y, M, N, col, R=R, C=C)
    ref = poisoned((M, N), dtype)
    for i, r in enumerate(rows.tolist()):
        if 0 <= r < M:
            ref[r, col:] = src[i, :N - col]
    torch.testing.assert_close(y, ref, rtol=0, atol=0, equal_nan=True)


def test_gather_feeds_dot_in_loop(interpret, gen):
    BM, BN, BK, Kd = 16, 16, 16, 64
    a, b = rand(gen, (BM, Kd), torch.float16), rand(gen, (Kd, BN), torch.float16)
    out = poisoned((BM, BN), torch.float32)
    K.gather_dot_kernel[(1,)](a, b, out, K=Kd, BM=BM, BN=BN, BK=BK)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=1e-3, rtol=1e-3)


def test_functional_interface_and_loop_carried_descriptor(interpret, gen):
    M, N = 24, 160
    x = rand(gen, (M, N), torch.float32)
    y = poisoned((M, N), torch.float32)
    K.functional_copy_kernel[(3,)](x, y, M, N, BM=8, BN=32)
    assert torch.equal(y, x)


@triton.jit
def _gather_of(X, Rows, M, N, R: tl.constexpr, C: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    desc = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_ROWS, C])
    desc.gather(tl.load(Rows + tl.arange(0, R)), 0)


@pytest.mark.parametrize("R,C,rows,message", [
    (8, 16, 2, "descriptor's block must have 1 row"),
    (4, 16, 1, "must have at least 8 rows, but got 4"),
    (8, 4, 1, "must have at least 8 columns, but got 4"),
])
def test_gather_limits_are_tritons(interpret, R, C, rows, message):
    x = torch.zeros(64, 64)
    with pytest.raises(CompilationError, match=message):
        _gather_of[(1,)](x, torch.zeros(R, dtype=torch.int32), 64, 64, R=R, C=C, BLOCK_ROWS=rows)


@triton.jit
def _nan_padded_ints(X, N):
    tl.make_tensor_descriptor(X, shape=[N], strides=[1], block_shape=[16], padding_option="nan")


def test_nan_padding_needs_floats(interpret):
    with pytest.raises(CompilationError, match="Padding option `nan` is not supported for integer blocks"):
        _nan_padded_ints[(1,)](torch.zeros(16, dtype=torch.int32), 16)


@triton.jit
def _narrow_block(X):
    tl.make_tensor_descriptor(X, [128, 128], [128, 1], [1, 2]).load([0, 0])


def test_block_shape_error_is_tritons_and_keeps_its_cause(interpret):
    """Triton's message (its tests match it), the bare message as __cause__, and in interpret mode
    an InterpreterError as well (what Triton's interpreter raises)."""
    from compiler.runtime.errors import InterpreterError
    with pytest.raises(CompilationError) as e:
        _narrow_block[(1,)](torch.zeros(128, 128, dtype=torch.int32))
    message = "Descriptor block shape must have at least 16 bytes in the last dimension, but got 2 * 4 = 8 bytes"
    assert message in str(e.value.__cause__) and "_narrow_block" not in str(e.value.__cause__)
    assert isinstance(e.value, InterpreterError)
    with pytest.raises(CompilationError) as e:  # compiled for the GPU: a CompilationError only
        triton.compile(_narrow_block, signature={"X": "*i32"}, target="sm_90")
    assert message in str(e.value.__cause__) and not isinstance(e.value, InterpreterError)


# -- PTX and GPU --------------------------------------------------------------------------------

def _compile(kernel, signature, constexprs, **kw):
    return triton.compile(kernel, signature=signature, constexprs=constexprs, num_warps=4, target="sm_90", **kw)


def test_gather_scatter_ptx_assembles():
    from tests.compiler.test_ptx import ptxas_report
    for ck in (
        _compile(K.gather_rows_kernel, {"X": "*fp16", "Rows": "*i32", "Out": "*fp16", "M": "i32", "N": "i32", "col": "i32"},
                 {"PADDING": "nan", "R": 32, "C": 64}),
        _compile(K.scatter_rows_kernel, {"Src": "*fp32", "Rows": "*i32", "Y": "*fp32", "M": "i32", "N": "i32", "col": "i32"},
                 {"R": 16, "C": 32}),
        _compile(K.gather_dot_kernel, {"A": "*fp16", "B": "*fp16", "Out": "*fp32"}, {"K": 128, "BM": 64, "BN": 64, "BK": 32}),
        _compile(K.functional_copy_kernel, {"X": "*fp32", "Y": "*fp32", "M": "i32", "N": "i32"}, {"BM": 32, "BN": 64}),
    ):
        assert ptxas_report(ck.asm["ptx"])["spills"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_gather_scatter_gpu(gen, padding):
    M, N, R, C = 300, 200, 64, 64
    x = rand(gen, (M, N), torch.float16).cuda()
    rows = torch.randint(-5, M + 5, (R,), generator=gen, dtype=torch.int32)
    out = poisoned((R, C), torch.float16).cuda()
    K.gather_rows_kernel[(1,)](x, rows.cuda(), out, M, N, 160, PADDING=padding, R=R, C=C)
    ref = _gather_ref(x.cpu(), rows, 160, C, float("nan") if padding == "nan" else 0)
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0, equal_nan=True)
    src = rand(gen, (R, C), torch.float32).cuda()
    dst_rows = (torch.randperm(M + 10, generator=gen)[:R] - 5).to(torch.int32)
    y = poisoned((M, N), torch.float32).cuda()
    K.scatter_rows_kernel[(1,)](src, dst_rows.cuda(), y, M, N, 160, R=R, C=C)
    ref = poisoned((M, N), torch.float32)
    for i, r in enumerate(dst_rows.tolist()):
        if 0 <= r < M:
            ref[r, 160:] = src[i, :N - 160].cpu()
    torch.testing.assert_close(y.cpu(), ref, rtol=0, atol=0, equal_nan=True)


@pytest.mark.gpu
def test_gather_dot_and_functional_copy_gpu(gen):
    a, b = rand(gen, (64, 256), torch.float16).cuda(), rand(gen, (256, 64), torch.float16).cuda()
    out = poisoned((64, 64), torch.float32).cuda()
    K.gather_dot_kernel[(1,)](a, b, out, K=256, BM=64, BN=64, BK=32)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=2e-2, rtol=1e-2)
    x = rand(gen, (96, 320), torch.float32).cuda()
    y = poisoned((96, 320), torch.float32).cuda()
    K.functional_copy_kernel[(3,)](x, y, 96, 320, BM=32, BN=64)
    assert torch.equal(y, x)
