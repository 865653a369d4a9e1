"""More Triton-style kernels: less common builtins and patterns real kernels use."""
import compiler as triton
import compiler.language as tl


@triton.jit
def scalar_accumulate_kernel(x_ptr, out_ptr, n_rows, N: tl.constexpr):
    # loop-carried values that start as Python floats and become runtime fp32 scalars
    total = 0.0
    best = 0.0
    for r in range(n_rows):
        row = tl.load(x_ptr + r * N + tl.arange(0, N))
        total += tl.sum(row, axis=0)
        best = tl.maximum(best, tl.max(row, axis=0))
    tl.store(out_ptr, total)
    tl.store(out_ptr + 1, best)


@triton.jit
def max_with_indices_kernel(x_ptr, vals_ptr, idx_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(vals_ptr + rm, v)
    tl.store(idx_ptr + rm, i)


@triton.jit
def keep_dims_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    s = tl.sum(x, axis=1, keep_dims=True)  # [M, 1]
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], x - s)


@triton.jit
def shapes_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M * N)
    x = tl.load(x_ptr + offs)
    y = tl.reshape(x, (2, M // 2, N))        # 3-D
    s = tl.sum(y, axis=1)                    # [2, N]
    b = tl.broadcast_to(tl.expand_dims(tl.arange(0, N), 0), (2, N))
    z = s + b
    tl.store(out_ptr + tl.arange(0, 2)[:, None] * N + tl.arange(0, N)[None, :], z)
    p = tl.permute(tl.reshape(x, (M, N)), (1, 0))
    tl.store(out_ptr + 2 * N + tl.arange(0, M * N), tl.ravel(p))


@triton.jit
def like_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    z = tl.zeros_like(x) + tl.full_like(x, 2.5)
    tl.store(out_ptr + offs, z * x)


@triton.jit
def misc_math_kernel(x_ptr, i_ptr, out_ptr, iout_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    i = tl.load(i_ptr + offs)
    tl.store(out_ptr + offs, tl.softmax(x))
    tl.store(out_ptr + BLOCK + offs, tl.cumprod(x, 0))
    tl.store(out_ptr + 2 * BLOCK + offs, tl.math.exp(x) + tl.math.log(tl.abs(x) + 1))
    tl.store(iout_ptr + offs, tl.umulhi(i, i))
    tl.store(iout_ptr + BLOCK, tl.xor_sum(i, axis=0))
    tl.store(iout_ptr + BLOCK + 1, tl.argmax(i, axis=0))


@triton.jit
def _helper_kw(x, SCALE: tl.constexpr, offset=1.0):
    return x * SCALE + offset


@triton.jit
def kwargs_call_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, cache_modifier=".cg", eviction_policy="evict_last")
    a, b = x, x * 2
    a, b = b, a  # swap through a tuple
    y = _helper_kw(a, SCALE=3) + _helper_kw(b, 2, offset=0.5)
    tl.store(out_ptr + offs, y, cache_modifier=".cs")


@triton.jit
def bitcast_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # fp16
    bits = x.to(tl.int16, bitcast=True)
    tl.store(out_ptr + offs, bits)


@triton.jit
def dot_variants_kernel(a_ptr, b_ptr, c_ptr, i8a_ptr, i8b_ptr, ci_ptr, M: tl.constexpr, N: tl.constexpr,
                        K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b, allow_tf32=False)  # ieee fp32
    c = tl.dot(a.to(tl.float16), b.to(tl.float16), c)  # accumulate an fp16 product into it
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)
    ia = tl.load(i8a_ptr + rm[:, None] * K + rk[None, :])
    ib = tl.load(i8b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(ci_ptr + rm[:, None] * N + rn[None, :], tl.dot(ia, ib))


@triton.jit
def nested_loops_kernel(out_ptr, n, m, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(n):
        for j in range(i, m):
            if (i + j) % 3 == 0:
                acc += 1
            else:
                acc += tl.arange(0, BLOCK)
        for k in tl.static_range(2):
            acc -= k
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def where_scalar_kernel(x_ptr, out_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.where(flag > 0, x, -x))  # scalar condition
    tl.store(out_ptr + BLOCK + offs, tl.where(x > 0, 1.0, 0.0))  # python scalars as branches


@triton.jit
def constexpr_in_loop_kernel(x_ptr, out_ptr, n, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(n):
        x = tl.load(x_ptr + i * BLOCK + offs)
        if MODE == 0:
            acc += x
        else:
            acc = tl.maximum(acc, x)
    tl.store(out_ptr + offs, acc)


@triton.jit
def int_types_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)  # uint8
    b = tl.load(b_ptr + offs)  # int16
    tl.store(out_ptr + offs, a + b)  # uint8 + int16 -> int16
    tl.store(out_ptr + BLOCK + offs, (a + a).to(tl.int16))  # uint8 + uint8 wraps at 8 bits
    tl.store(out_ptr + 4 * BLOCK + offs, (a * 2).to(tl.int16))  # a Python int takes the block's type: uint8 * 2 wraps
    tl.store(out_ptr + 2 * BLOCK + offs, (a.to(tl.int8) >> 1).to(tl.int16))  # arithmetic shift of int8
    tl.store(out_ptr + 3 * BLOCK + offs, (a >> 1).to(tl.int16))  # logical shift of uint8


@triton.jit
def chain_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    # every operation rounds to the element type (fp16 / bf16): a chain must match torch op by op
    r = ((x * y) + z) - x
    r = tl.maximum(r, z) * 3.0 - y
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def scalar_wrap_kernel(out_ptr, a, n):
    # scalar int32 arithmetic wraps like the GPU's
    v = a
    for i in range(n):
        v = v * 3 + 1
    tl.store(out_ptr, v)
    w = a.to(tl.int64)
    for i in range(n):
        w = w * 3 + 1
    tl.store(out_ptr + 1, w)
