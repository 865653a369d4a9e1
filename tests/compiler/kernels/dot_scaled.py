"""tl.dot_scaled kernels and a torch reference of the microscaled formats (e2m1 nibbles, fp8 bytes,
e8m0 scales), written from the OCP MX definitions."""
import compiler as triton
import compiler.language as tl


@triton.jit
def dot_scaled_kernel(A, A_scale, B, B_scale, Out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                      FMT_A: tl.constexpr, FMT_B: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr):
    KA: tl.constexpr = K // 2 if FMT_A == "e2m1" else K
    KB: tl.constexpr = K // 2 if FMT_B == "e2m1" else K
    a = tl.load(A + tl.arange(0, M)[:, None] * KA + tl.arange(0, KA)[None, :])
    b = tl.load(B + tl.arange(0, KB)[:, None] * N + tl.arange(0, N)[None, :])
    a_scale = None
    b_scale = None
    if SCALE_A:
        a_scale = tl.load(A_scale + tl.arange(0, M)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    if SCALE_B:
        b_scale = tl.load(B_scale + tl.arange(0, N)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    c = tl.dot_scaled(a, a_scale, FMT_A, b, b_scale, FMT_B)
    tl.store(Out + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], c)


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def decode(torch, x, fmt, k_last):
    """The values of operand bytes `x` in float64 (e2m1: two per byte along K, low nibble first)."""
    if fmt in ("bf16", "fp16"):
        return x.double()
    if fmt == "e4m3":
        return x.view(torch.float8_e4m3fn).double()
    if fmt == "e5m2":
        return x.view(torch.float8_e5m2).double()
    table = torch.tensor(E2M1, dtype=torch.float64, device=x.device)
    xi = x.long()
    lo, hi = xi & 0xF, xi >> 4
    val = lambda n: torch.where((n & 8) != 0, -1.0, 1.0).double() * table[n & 7]  # noqa: E731
    if k_last:
        return torch.stack([val(lo), val(hi)], dim=-1).reshape(x.shape[0], 2 * x.shape[1])
    return torch.stack([val(lo), val(hi)], dim=1).reshape(2 * x.shape[0], x.shape[1])


def scale_values(torch, s):
    """e8m0 → 2**(s - 127); 255 is NaN (as Triton's emulation: a zero exponent byte gives 0)."""
    v = torch.pow(2.0, s.double() - 127)
    v = torch.where(s == 0, torch.zeros_like(v), v)
    return torch.where(s == 255, torch.full_like(v, float("nan")), v)


def reference(torch, a, a_scale, fmt_a, b, b_scale, fmt_b):
    av = decode(torch, a, fmt_a, True)
    bv = decode(torch, b, fmt_b, False)
    if a_scale is not None:
        av = av * scale_values(torch, a_scale).repeat_interleave(32, dim=1)
    if b_scale is not None:
        bv = bv * scale_values(torch, b_scale).repeat_interleave(32, dim=1).T
    return av @ bv


def fp8_typed(torch, x, fmt):
    """fp8 operand bytes as the fp8 tensor they encode (Triton takes either for e4m3/e5m2)."""
    if fmt not in ("e4m3", "e5m2"):
        return x
    return x.view(torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2)


def run(torch, gen, device, M, N, K, fmt_a, fmt_b, scale_a, scale_b, nw=4, nan_scale=False, typed_fp8=False):
    def operand(rows, cols, fmt):
        if fmt in ("bf16", "fp16"):
            dt = torch.bfloat16 if fmt == "bf16" else torch.float16
            return torch.randn((rows, cols), generator=gen, dtype=torch.float32).to(dt).to(device)
        x = torch.randint(0, 256, (rows, cols), generator=gen, dtype=torch.int64).to(torch.uint8)
        if fmt in ("e4m3", "e5m2"):   # finite bytes only (the NaN/inf codes would poison every sum)
            f = x.view(torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2).float()
            x = torch.where(torch.isfinite(f), x, torch.zeros_like(x))
        return x.to(device)

    a = operand(M, K // 2 if fmt_a == "e2m1" else K, fmt_a)
    b = operand(K // 2 if fmt_b == "e2m1" else K, N, fmt_b)
    sa = torch.randint(110, 140, (M, K // 32), generator=gen, dtype=torch.int64).to(torch.uint8).to(device)
    sb = torch.randint(110, 140, (N, K // 32), generator=gen, dtype=torch.int64).to(torch.uint8).to(device)
    if nan_scale:
        sa[0, 0] = 255
    out = torch.full((M, N), float("nan"), dtype=torch.float32, device=device)
    ka, kb = (fp8_typed(torch, a, fmt_a), fp8_typed(torch, b, fmt_b)) if typed_fp8 else (a, b)
    dot_scaled_kernel[(1,)](ka, sa, kb, sb, out, M=M, N=N, K=K, FMT_A=fmt_a, FMT_B=fmt_b, SCALE_A=scale_a,
                            SCALE_B=scale_b, num_warps=nw)
    ref = reference(torch, a.cpu(), sa.cpu() if scale_a else None, fmt_a, b.cpu(), sb.cpu() if scale_b else None, fmt_b)
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().nan_to_num().max()),
                               equal_nan=True)
    if nan_scale:
        assert torch.isnan(out[0]).all() and not torch.isnan(out[1:]).any()
