"""Kernels over tl.math, tl.extra.cuda.libdevice (Triton's tutorial 07 among them) and
tl.inline_asm_elementwise, for the interpret-mode, PTX and GPU tests."""
import compiler as triton
import compiler.language as tl
from compiler.language.extra import libdevice


@triton.jit
def asin_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Tutorial 07's kernel: libdevice.asin through `triton.language.extra.libdevice`."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x = libdevice.asin(x)
    tl.store(y_ptr + offsets, x, mask=mask)


@triton.jit
def asin_cuda_path_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """The same through the full path `tl.extra.cuda.libdevice`."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.extra.cuda.libdevice.asin(tl.load(x_ptr + offsets, mask=mask)), mask=mask)


@triton.jit
def apply1_kernel(X, Y, N, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, FN(tl.load(X + offs, mask=m)), mask=m)


@triton.jit
def apply2_kernel(X, Z, Y, N, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, FN(tl.load(X + offs, mask=m), tl.load(Z + offs, mask=m)), mask=m)


@triton.jit
def apply3_kernel(X, Z, W, Y, N, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, FN(tl.load(X + offs, mask=m), tl.load(Z + offs, mask=m), tl.load(W + offs, mask=m)), mask=m)


@triton.jit
def extern_elementwise_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Triton's low-level form, with the symbol table written in the kernel."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    y = tl.extern_elementwise("", "", [x, 2.0], {(tl.float32, tl.float32): ("__nv_powf", tl.float32),
                                                 (tl.float64, tl.float64): ("__nv_pow", tl.float64)}, is_pure=True)
    tl.store(Y + offs, y, mask=m)


@triton.jit
def pow_scalar_exponents_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Python-number arguments pick the symbol as in Triton: 3 → __nv_powif, 0.5 → __nv_powf."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    tl.store(Y + offs, libdevice.pow(x, 3), mask=m)
    tl.store(Y + N + offs, libdevice.pow(x, 0.5), mask=m)


@triton.jit
def classify_kernel(X, Y, N, BLOCK: tl.constexpr):
    """isnan/isinf give booleans, signbit/finitef int32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    code = libdevice.isnan(x).to(tl.int32) + 2 * libdevice.isinf(x).to(tl.int32) \
        + 4 * (libdevice.signbit(x) != 0).to(tl.int32) + 8 * libdevice.finitef(x)
    tl.store(Y + offs, code, mask=m)


@triton.jit
def math_kernel(X, Z, Y, N, BLOCK: tl.constexpr):
    """The tl.math functions Triton has, side by side: 12 outputs of N each."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    z = tl.load(Z + offs, mask=m)
    outs = (tl.math.exp(x), tl.math.exp2(x), tl.math.log(z), tl.math.log2(z), tl.math.cos(x), tl.math.sin(x),
            tl.math.sqrt(z), tl.math.rsqrt(z), tl.math.abs(x), tl.math.fdiv(x, z), tl.math.div_rn(x, z),
            tl.math.erf(x), tl.math.floor(x * 4), tl.math.ceil(x * 4), tl.math.fma(x, z, x), tl.math.sqrt_rn(z))
    for i in tl.static_range(len(outs)):
        tl.store(Y + i * N + offs, outs[i], mask=m)


@triton.jit
def members_kernel(X, Y, N, BLOCK: tl.constexpr):
    """tl.math functions as tensor methods, as Triton has them."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    tl.store(Y + offs, x.cos() + x.sin() + x.erf() + x.floor() + x.ceil() + x.abs().sqrt_rn() + x.abs().rsqrt(), mask=m)


@triton.jit
def clamp_kernel(X, Lo, Hi, Y, N, PROPAGATE_NAN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    y = tl.clamp(x, tl.load(Lo + offs, mask=m), tl.load(Hi + offs, mask=m), propagate_nan=PROPAGATE_NAN)
    tl.store(Y + offs, y, mask=m)


@triton.jit
def umulhi_kernel(X, Z, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(Y + offs, tl.umulhi(tl.load(X + offs, mask=m), tl.load(Z + offs, mask=m)), mask=m)


@triton.jit
def asm_shift_packed_kernel(X, Y, BLOCK: tl.constexpr):
    """Four uint8 in one 32-bit register: masked so that no bit crosses into the next byte, then
    shifted left by 3 — x << 3 on each byte."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    y = tl.inline_asm_elementwise("and.b32 $0, $1, 0x1F1F1F1F;\n\tshl.b32 $0, $0, 3;", "=r,r", [x], dtype=tl.int8, is_pure=True, pack=4)
    tl.store(Y + offs, y)


@triton.jit
def asm_funnel_shift_kernel(X, Z, Y, N, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """Triton's unpacked example: shf.l.wrap.b32 (a funnel shift of z:x) on uint32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    z = tl.load(Z + offs, mask=m)
    s = tl.full([BLOCK], SHIFT, tl.int32)
    y = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r", [x, z, s], dtype=tl.uint32,
                                  is_pure=True, pack=1)
    tl.store(Y + offs, y, mask=m)


@triton.jit
def asm_two_outputs_kernel(X, Lo, Hi, N, BLOCK: tl.constexpr):
    """Two results from one asm: the low and high halves of x * x."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    lo, hi = tl.inline_asm_elementwise("mul.lo.u32 $0, $2, $2;\n\tmul.hi.u32 $1, $2, $2;", "=r,=r,r", [x],
                                       dtype=(tl.uint32, tl.uint32), is_pure=True, pack=1)
    tl.store(Lo + offs, lo, mask=m)
    tl.store(Hi + offs, hi, mask=m)


@triton.jit
def asm_float_kernel(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    y = tl.inline_asm_elementwise("fma.rn.f32 $0, $1, $1, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(Y + offs, y, mask=m)


@triton.jit
def asm_impure_store_kernel(X, Y, BLOCK: tl.constexpr):
    """An impure asm whose result nobody uses (it stores by itself): it must still run."""
    tl.inline_asm_elementwise("ld.global.b8 $0, [$1];\n\tshl.b32 $0, $0, 3;\n\tst.global.b8 [$2], $0;", "=r,l,l",
                              [X + tl.arange(0, BLOCK), Y + tl.arange(0, BLOCK)], dtype=tl.int8, is_pure=False, pack=1)


@triton.jit
def asm_packed_two_outputs_kernel(A, B, C, D, BLOCK: tl.constexpr):
    """pack=4 with Triton's registers: four uint8 share one input register, four float32 inputs and
    each of the eight outputs (4 int32, 4 float32) take one each: max(int(a), b) and int(a)."""
    a = tl.load(A + tl.arange(0, BLOCK))
    b = tl.load(B + tl.arange(0, BLOCK))
    c, d = tl.inline_asm_elementwise(
        """
        {
            .reg .b8 t<4>;
            mov.b32 {t0, t1, t2, t3}, $8;
            cvt.u32.u8 $0, t0;
            cvt.u32.u8 $1, t1;
            cvt.u32.u8 $2, t2;
            cvt.u32.u8 $3, t3;
        }
        cvt.rn.f32.s32 $4, $0;
        cvt.rn.f32.s32 $5, $1;
        cvt.rn.f32.s32 $6, $2;
        cvt.rn.f32.s32 $7, $3;
        max.f32 $4, $4, $9;
        max.f32 $5, $5, $10;
        max.f32 $6, $6, $11;
        max.f32 $7, $7, $12;
        """, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r", [a, b], dtype=(tl.int32, tl.float32), is_pure=True, pack=4)
    tl.store(C + tl.arange(0, BLOCK), c)
    tl.store(D + tl.arange(0, BLOCK), d)


@triton.jit
def special_registers_kernel(Sm, Times, Out, BLOCK: tl.constexpr):
    """tl.extra.cuda.smid() per program; globaltimer() before and after some work."""
    start = tl.extra.cuda.globaltimer()
    off = tl.arange(0, BLOCK)
    for i in range(100):
        tl.store(Out + off, tl.load(Out + off) + 1)
    end = tl.extra.cuda.globaltimer()
    tl.store(Sm + tl.program_id(0), tl.extra.cuda.smid())
    tl.store(Times + 2 * tl.program_id(0), start)
    tl.store(Times + 2 * tl.program_id(0) + 1, end)
