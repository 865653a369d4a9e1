"""Kernels for tl.map_elementwise: a scalar @jit function with per-element branches mapped over
blocks (with broadcasting, several results, and `pack` elements per call)."""
import compiler as triton
import compiler.language as tl


@triton.jit
def sign_of_difference(x, y):
    if x < y:
        return -1
    elif x == y:
        return 0
    else:
        return 1


@triton.jit
def compare_kernel(X, Y, Z, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    z = tl.map_elementwise(sign_of_difference, tl.load(X + offs), tl.load(Y + offs))
    tl.store(Z + offs, z)


@triton.jit
def selu_scalar(x, alpha):
    # the exp only runs where x <= 0: the reason to map a scalar function instead of tl.where
    if x > 0:
        return x
    else:
        return alpha * (tl.exp(x) - 1)


@triton.jit
def selu_2d_kernel(X, B, Out, alpha, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)[:, None]
    cols = tl.arange(0, N)[None, :]
    x = tl.load(X + rows * N + cols)
    bias = tl.load(B + cols)            # [1, N], broadcast against x
    y = tl.map_elementwise(selu_scalar, x + bias, alpha)
    tl.store(Out + rows * N + cols, y)


@triton.jit
def divmod_scalar(a, b):
    return a // b, a % b


@triton.jit
def divmod_packed(a0, a1, b0, b1):
    return a0 // b0, a1 // b1, a0 % b0, a1 % b1


@triton.jit
def divmod_packed4(a0, a1, a2, a3, b0, b1, b2, b3):
    return a0 // b0, a1 // b1, a2 // b2, a3 // b3, a0 % b0, a1 % b1, a2 % b2, a3 % b3


@triton.jit
def divmod_kernel(A, B, Q, R, BLOCK: tl.constexpr, PACK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(A + offs)
    b = tl.load(B + offs)
    if PACK == 1:
        q, r = tl.map_elementwise(divmod_scalar, a, b)
    elif PACK == 2:
        q, r = tl.map_elementwise(divmod_packed, a, b, pack=PACK)
    else:
        q, r = tl.map_elementwise(divmod_packed4, a, b, pack=PACK)
    tl.store(Q + offs, q)
    tl.store(R + offs, r)


# ---- runs against torch (the CPU tests in interpret mode and the gpu tests share them) -----------

def run_compare(torch, rand, poisoned, gen, device, BLOCK, nw=4):
    x = rand(gen, (BLOCK,), torch.int32, -3, 3).to(device)
    y = rand(gen, (BLOCK,), torch.int32, -3, 3).to(device)
    z = poisoned((BLOCK,), torch.int32).to(device)
    compare_kernel[(1,)](x, y, z, BLOCK=BLOCK, num_warps=nw)
    assert torch.equal(z.cpu(), (x > y).int().cpu() - (x < y).int().cpu())


def run_selu_2d(torch, rand, poisoned, gen, device, M, N, dtype, nw=4):
    x = rand(gen, (M, N), dtype, -4, 4).to(device)
    bias = rand(gen, (N,), dtype, -1, 1).to(device)
    out = poisoned((M, N), dtype).to(device)
    alpha = 1.6732632423543772
    selu_2d_kernel[(1,)](x, bias, out, alpha, M=M, N=N, num_warps=nw)
    v = (x + bias[None, :]).double()   # the sum in the block's type, as the kernel computes it
    ref = torch.where(v > 0, v, alpha * torch.expm1(v))
    rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (4e-3, 4e-3)
    torch.testing.assert_close(out.double(), ref, rtol=rtol, atol=atol)


def run_divmod(torch, rand, poisoned, gen, device, BLOCK, pack, nw=4):
    a = rand(gen, (BLOCK,), torch.int32, -2**31, 2**31 - 1).to(device)
    b = rand(gen, (BLOCK,), torch.int32, 1, 1000).to(device)
    b[::3] *= -1
    q, r = poisoned((BLOCK,), torch.int32).to(device), poisoned((BLOCK,), torch.int32).to(device)
    divmod_kernel[(1,)](a, b, q, r, BLOCK=BLOCK, PACK=pack, num_warps=nw)
    # Triton's // and % on integers truncate towards zero (C semantics)
    a64, b64 = a.cpu().long(), b.cpu().long()
    ref_q = torch.div(a64, b64, rounding_mode="trunc")
    assert torch.equal(q.cpu().long(), ref_q)
    assert torch.equal(r.cpu().long(), a64 - ref_q * b64)

