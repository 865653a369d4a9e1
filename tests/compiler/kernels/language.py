"""Small Triton-style kernels, one language feature (or a few) each. Used by test_language.py."""
import compiler as triton
import compiler.language as tl


# ---------------------------------------------------------------------------------------------
# @jit, constexpr, do_not_specialize, calls between @jit functions

@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit(do_not_specialize=["n", "alpha"])
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


@triton.jit
def _square(x):
    return x * x


@triton.jit
def _scaled_sum(x, y, SCALE: tl.constexpr):
    # calls another @jit function
    return _square(x) * SCALE + y


@triton.jit
def _minmax_pair(x, y):
    return tl.minimum(x, y), tl.maximum(x, y)


@triton.jit
def _clip_or_zero(x, lo):
    if lo > 0:
        return tl.maximum(x, lo)
    return x * 0


@triton.jit
def call_kernel(x_ptr, y_ptr, out_ptr, lo_ptr, hi_ptr, clip_ptr, n, lo, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, _scaled_sum(x, y, SCALE), mask=mask)
    a, b = _minmax_pair(x, y)
    tl.store(lo_ptr + offs, a, mask=mask)
    tl.store(hi_ptr + offs, b, mask=mask)
    tl.store(clip_ptr + offs, _clip_or_zero(x, lo), mask=mask)


# ---------------------------------------------------------------------------------------------
# elementwise operators, selected by a constexpr string

@triton.jit
def binary_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if OP == "add":
        z = x + y
    elif OP == "sub":
        z = x - y
    elif OP == "mul":
        z = x * y
    elif OP == "truediv":
        z = x / y
    elif OP == "floordiv":
        z = x // y
    elif OP == "mod":
        z = x % y
    elif OP == "and":
        z = x & y
    elif OP == "or":
        z = x | y
    elif OP == "xor":
        z = x ^ y
    elif OP == "shl":
        z = x << y
    elif OP == "shr":
        z = x >> y
    elif OP == "lt":
        z = x < y
    elif OP == "le":
        z = x <= y
    elif OP == "gt":
        z = x > y
    elif OP == "ge":
        z = x >= y
    elif OP == "eq":
        z = x == y
    elif OP == "ne":
        z = x != y
    elif OP == "maximum":
        z = tl.maximum(x, y)
    elif OP == "minimum":
        z = tl.minimum(x, y)
    elif OP == "fdiv":
        z = tl.fdiv(x, y)
    elif OP == "where":
        z = tl.where(x > y, x, y * 2)
    elif OP == "logical":
        z = ((x > 0) & (y > 0)) | ((x < 0) ^ (y < 0))
    else:
        tl.static_assert(False, "unknown OP")
    tl.store(out_ptr + offs, z, mask=mask)


@triton.jit
def unary_kernel(x_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "neg":
        z = -x
    elif OP == "invert":
        z = ~x
    elif OP == "abs":
        z = tl.abs(x)
    elif OP == "exp":
        z = tl.exp(x)
    elif OP == "exp2":
        z = tl.exp2(x)
    elif OP == "log":
        z = tl.log(x)
    elif OP == "log2":
        z = tl.log2(x)
    elif OP == "sqrt":
        z = tl.sqrt(x)
    elif OP == "rsqrt":
        z = tl.rsqrt(x)
    elif OP == "sigmoid":
        z = tl.sigmoid(x)
    elif OP == "sin":
        z = tl.sin(x)
    elif OP == "cos":
        z = tl.cos(x)
    elif OP == "floor":
        z = tl.floor(x)
    elif OP == "ceil":
        z = tl.ceil(x)
    elif OP == "erf":
        z = tl.erf(x)
    elif OP == "method_exp":
        z = x.exp()
    else:
        tl.static_assert(False, "unknown OP")
    tl.store(out_ptr + offs, z, mask=mask)


@triton.jit
def fma_clamp_kernel(x_ptr, y_ptr, z_ptr, fma_ptr, clamp_ptr, n, lo, hi, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    tl.store(fma_ptr + offs, tl.fma(x, y, z), mask=mask)
    tl.store(clamp_ptr + offs, tl.clamp(x, lo, hi), mask=mask)


# ---------------------------------------------------------------------------------------------
# type promotion, casts, implicit cast on store, ptr.dtype.element_ty

@triton.jit
def promote_kernel(x_ptr, y_ptr, out_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "add":
        z = x + y
    elif OP == "sub":
        z = x - y
    elif OP == "truediv":
        z = x / y
    elif OP == "pymul":
        z = x * 1.0009765625  # a Python float is weakly typed: fp16 * float stays fp16
    elif OP == "pyadd_int":
        z = x + 100  # int8 + Python int stays int8
    tl.store(out_ptr + offs, z)  # implicit cast to the pointee type


@triton.jit
def promote_dtype_kernel(x_ptr, y_ptr, out_ptr, EXPECT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    z = tl.load(x_ptr + offs) + tl.load(y_ptr + offs)
    tl.static_assert(z.dtype == EXPECT)
    tl.store(out_ptr + offs, z)


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cast_chain_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # fp32
    a = x.to(tl.float16).to(tl.float32)
    b = x.to(tl.bfloat16).to(tl.float32)
    c = x.to(tl.int32).to(tl.float32)
    d = x.to(tl.int8).to(tl.float32)
    e = x.to(tl.uint8).to(tl.float32)
    f = (x > 0).to(tl.float32)
    g = x.to(tl.float64).to(tl.float32)
    h = x.to(tl.int16).to(tl.int64).to(tl.float32)
    i = x.to(tl.int32).to(tl.uint32).to(tl.float32)
    j = x.to(tl.int1).to(tl.float32)
    k = x.to(tl.int32, bitcast=True).to(tl.float32)
    tl.store(out_ptr + 0 * BLOCK + offs, a)
    tl.store(out_ptr + 1 * BLOCK + offs, b)
    tl.store(out_ptr + 2 * BLOCK + offs, c)
    tl.store(out_ptr + 3 * BLOCK + offs, d)
    tl.store(out_ptr + 4 * BLOCK + offs, e)
    tl.store(out_ptr + 5 * BLOCK + offs, f)
    tl.store(out_ptr + 6 * BLOCK + offs, g)
    tl.store(out_ptr + 7 * BLOCK + offs, h)
    tl.store(out_ptr + 8 * BLOCK + offs, i)
    tl.store(out_ptr + 9 * BLOCK + offs, j)
    tl.store(out_ptr + 10 * BLOCK + offs, k)


# ---------------------------------------------------------------------------------------------
# index spaces, shapes

@triton.jit
def grid_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(axis=1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    idx = (z * ny + y) * nx + x
    p = out_ptr + idx * 6
    tl.store(p + 0, x)
    tl.store(p + 1, y)
    tl.store(p + 2, z)
    tl.store(p + 3, nx)
    tl.store(p + 4, ny)
    tl.store(p + 5, nz)


@triton.jit
def full_zeros_cdiv_kernel(out_ptr, n, BLOCK: tl.constexpr):
    z = tl.zeros((BLOCK,), dtype=tl.int32)
    f = tl.full([BLOCK], 7, tl.int32)
    c = tl.cdiv(n, 4) + z
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, z + f * 2 + c)
    tl.store(out_ptr + BLOCK + offs, tl.arange(0, BLOCK) * tl.cdiv(n, BLOCK))


@triton.jit
def outer_kernel(x_ptr, y_ptr, out_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    z = x[:, None] * y[None, :] + 1.0  # broadcasting of [BM, 1] and [1, BN] and a scalar
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * stride_m + rn[None, :], z, mask=mask)


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, USE_T: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    if USE_T:
        t = x.T
    else:
        t = tl.trans(x)
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], t)


@triton.jit
def reshape_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M * N)
    x = tl.load(x_ptr + offs)
    y = tl.reshape(x, (M, N))
    s = tl.sum(y, axis=1)  # row sums of the row-major reshape
    tl.store(out_ptr + tl.arange(0, M), s)
    back = tl.reshape(y * 2, [M * N])
    tl.store(out_ptr + M + offs, back)


# ---------------------------------------------------------------------------------------------
# reductions and scans

@triton.jit
def reduce_1d_kernel(x_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    row = tl.program_id(0)
    mask = offs < n
    if OP == "sum":
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=0)
        r = tl.sum(x, axis=0)
    elif OP == "max":
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=-float("inf"))
        r = tl.max(x, axis=0)
    elif OP == "min":
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=float("inf"))
        r = tl.min(x, axis=0)
    elif OP == "argmax":
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=-float("inf"))
        r = tl.argmax(x, axis=0)
    elif OP == "argmin":
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=float("inf"))
        r = tl.argmin(x, axis=0)
    tl.store(out_ptr + row, r)


@triton.jit
def reduce_2d_kernel(x_ptr, out_ptr, OP: tl.constexpr, AXIS: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    if OP == "sum":
        r = tl.sum(x, axis=AXIS)
    elif OP == "max":
        r = tl.max(x, axis=AXIS)
    elif OP == "min":
        r = tl.min(x, axis=AXIS)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS)
    elif OP == "argmin":
        r = tl.argmin(x, axis=AXIS)
    elif OP == "method_sum":
        r = x.sum(axis=AXIS)
    if AXIS == 0:
        tl.store(out_ptr + rn, r)
    else:
        tl.store(out_ptr + rm, r)


@triton.jit
def reduce_all_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + 0, tl.sum(x))
    tl.store(out_ptr + 1, tl.max(x))
    tl.store(out_ptr + 2, tl.min(x))
    tl.store(out_ptr + 3, tl.sum(tl.sum(x, axis=1), axis=0))


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, REVERSE: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    y = tl.cumsum(x, axis=AXIS, reverse=REVERSE)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y)


@triton.jit
def cumsum_1d_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), 0))


# ---------------------------------------------------------------------------------------------
# control flow

@triton.jit
def static_range_kernel(x_ptr, out_ptr, N_ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(N_ITERS):
        acc += tl.load(x_ptr + i * BLOCK + offs) * (i + 1)
    for i in tl.static_range(1, 4, 2):
        acc += i
    tl.store(out_ptr + offs, acc)


@triton.jit
def tl_range_kernel(x_ptr, out_ptr, n_blocks, start, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    cnt = 0
    for i in tl.range(start, n_blocks, num_stages=2):
        acc += tl.load(x_ptr + i * BLOCK + offs)
        cnt += 1
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + BLOCK, cnt.to(tl.float32))


@triton.jit
def py_range_kernel(x_ptr, out_ptr, n, step, BLOCK: tl.constexpr):
    """Runtime bounds and step; loop-carried block value and scalar; a loop counting down."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    m = -float("inf")
    for start in range(0, n, step):
        idx = start + offs
        x = tl.load(x_ptr + idx, mask=(idx < n) & (offs < step), other=0.0)
        acc = acc + x
        m = tl.maximum(m, tl.max(tl.where((idx < n) & (offs < step), x, -float("inf")), axis=0))
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + BLOCK, m)
    down = 0
    for i in range(n - 1, -1, -1):
        down = down * 2 + (i % 2)
    tl.store(out_ptr + BLOCK + 1, down.to(tl.float32))


@triton.jit
def if_else_kernel(x_ptr, out_ptr, flag, thresh, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    # if/else on a runtime scalar yielding a block value
    if flag > 0:
        y = x * 2.0
    else:
        y = x - 1.0
    # if without else that modifies a block
    if flag == 2:
        y = y + 100.0
    # nested if on a value computed in the kernel, with elif
    s = tl.sum(x, axis=0)
    if s > thresh:
        code = 1
    elif s < -thresh:
        code = -1
    else:
        code = 0
    tl.store(out_ptr + offs, y)
    tl.store(out_ptr + BLOCK, code.to(tl.float32))
    # conditional expression and boolean operators on scalars
    both = 1 if (flag > 0 and s > 0) or not (flag != 3) else 0
    tl.store(out_ptr + BLOCK + 1, both.to(tl.float32))


@triton.jit
def while_kernel(out_ptr, n):
    # Collatz steps of n, and a block value carried through the loop
    steps = 0
    v = n
    acc = tl.zeros([8], dtype=tl.int32)
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        steps += 1
        acc += tl.arange(0, 8)
    tl.store(out_ptr, steps)
    tl.store(out_ptr + 1 + tl.arange(0, 8), acc)


@triton.jit
def scalar_math_kernel(a_ptr, out_ptr, a, b):
    tl.store(out_ptr + 0, min(a, b))
    tl.store(out_ptr + 1, max(a, b))
    tl.store(out_ptr + 2, a // b)
    tl.store(out_ptr + 3, a % b)
    tl.store(out_ptr + 4, min(a, b, 3))
    tl.store(out_ptr + 5, -a // b)
    tl.store(out_ptr + 6, -a % b)
    c = tl.load(a_ptr)  # a scalar load
    c += a
    c *= 2
    tl.store(out_ptr + 7, c)
    tl.store(out_ptr + 8, (a << 2) | 1)


@triton.jit
def early_return_kernel(out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid * BLOCK >= n:
        return
    tl.store(out_ptr + offs, offs, mask=offs < n)


# ---------------------------------------------------------------------------------------------
# memory: masks, scalar pointers, atomics, hints, barrier

@triton.jit
def masked_other_kernel(x_ptr, out_ptr, n, other_val, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=other_val)
    tl.store(out_ptr + offs, x)
    # mask as a scalar-broadcast condition, and `other` as a block
    y = tl.load(x_ptr + offs, mask=(offs % 2 == 0) & (offs < n), other=offs.to(tl.float32) * -1.0)
    tl.store(out_ptr + BLOCK + offs, y, mask=offs >= 0)


@triton.jit
def scalar_ptr_kernel(x_ptr, out_ptr, n):
    # scalar pointer load/store: sum x[0..n) one element at a time
    total = tl.load(x_ptr)
    for i in range(1, n):
        total += tl.load(x_ptr + i)
    tl.store(out_ptr, total)
    tl.store(out_ptr + 1, tl.load(x_ptr + n - 1), mask=n > 0)
    tl.store(out_ptr + 2, 42, mask=n > 1000)  # masked off: not written


@triton.jit
def hints_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.debug_barrier()
    tl.store(out_ptr + offs, x + 1, mask=mask)


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + (x % NBINS), 1, mask=mask)


@triton.jit
def atomic_kernel(ptr, val_ptr, old_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(val_ptr + offs)
    if OP == "add":
        old = tl.atomic_add(ptr + offs, v, mask=mask)
    elif OP == "max":
        old = tl.atomic_max(ptr + offs, v, mask=mask)
    elif OP == "min":
        old = tl.atomic_min(ptr + offs, v, mask=mask)
    elif OP == "xchg":
        old = tl.atomic_xchg(ptr + offs, v, mask=mask)
    tl.store(old_ptr + offs, old, mask=mask)


@triton.jit
def atomic_scalar_kernel(counter_ptr, slots_ptr, total_ptr, x_ptr, BLOCK: tl.constexpr):
    # every program takes a ticket; writes its pid into slot[ticket]; adds its block sum to total
    pid = tl.program_id(0)
    ticket = tl.atomic_add(counter_ptr, 1)
    tl.store(slots_ptr + ticket, pid)
    x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    tl.atomic_max(total_ptr + 1, tl.max(x, axis=0))
    tl.atomic_min(total_ptr + 2, tl.min(x, axis=0))


@triton.jit
def spin_lock_kernel(lock_ptr, count_ptr, data_ptr):
    pid = tl.program_id(0)
    # a spin lock: cas 0 -> 1, critical section, release with xchg
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    c = tl.load(count_ptr)
    tl.store(data_ptr + c, pid)
    tl.store(count_ptr, c + 1)
    tl.debug_barrier()
    tl.atomic_xchg(lock_ptr, 0)


@triton.jit
def atomic_cas_kernel(cas_ptr, cas_old_ptr, flag_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    # block cas: only lanes whose value equals cmp are swapped
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(cas_ptr + offs, offs * 0 + pid, offs * 0 + pid + 1)
    tl.store(cas_old_ptr + pid * BLOCK + offs, old)
    # scalar cas: the first program to come sets the flag to its pid + 100
    tl.atomic_cas(flag_ptr, -1, pid + 100)


@triton.jit
def bool_kernel(m_ptr, x_ptr, out_ptr, flags_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = tl.load(m_ptr + offs)  # a block of tl.int1 loaded from a bool tensor
    x = tl.load(x_ptr + offs, mask=m, other=-1.0)
    tl.store(out_ptr + offs, x)
    both = m & (x > 0)
    tl.store(flags_ptr + offs, both | ~m)


@triton.jit
def oob_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # no mask: reads past the end when n < BLOCK
    tl.store(out_ptr + offs, x, mask=offs < n)


# ---------------------------------------------------------------------------------------------
# dot

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_rem = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_rem), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_rem) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def dot_simple_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                      PRECISION: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


# ---------------------------------------------------------------------------------------------
# device print / assert

@triton.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_print("x: ", x)


@triton.jit
def assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.device_assert(x >= 0, "x must be non-negative")


@triton.jit
def print_many_kernel(x_ptr, BLOCK: tl.constexpr):
    """2-D block, a scalar, two operands with hex: the GPU prints each element once."""
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, 4)[None, :]
    x = tl.load(x_ptr + rows * 4 + cols)
    tl.device_print("x", x)
    tl.device_print("pid", pid)
    tl.device_print("h", rows + cols, x.to(tl.float16), hex=True)
