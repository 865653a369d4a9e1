"""Kernels that draw random numbers (tl.randint/rand/randn/philox), for the interpret-mode, PTX
and GPU tests."""
import compiler as triton
import compiler.language as tl


@triton.jit
def philox_block_kernel(counter_ptr, key_ptr, out_ptr, BLOCK: tl.constexpr, WORD: tl.constexpr):
    """Raw Philox on BLOCK counters (4 words each, row-major) with one key (2 words)."""
    rows = tl.arange(0, BLOCK) * 4
    c0 = tl.load(counter_ptr + rows).to(WORD, bitcast=True)
    c1 = tl.load(counter_ptr + rows + 1).to(WORD, bitcast=True)
    c2 = tl.load(counter_ptr + rows + 2).to(WORD, bitcast=True)
    c3 = tl.load(counter_ptr + rows + 3).to(WORD, bitcast=True)
    k0 = tl.load(key_ptr).to(WORD, bitcast=True)
    k1 = tl.load(key_ptr + 1).to(WORD, bitcast=True)
    r0, r1, r2, r3 = tl.philox_impl(c0, c1, c2, c3, k0, k1)
    dt = out_ptr.dtype.element_ty
    tl.store(out_ptr + rows, r0.to(dt, bitcast=True))
    tl.store(out_ptr + rows + 1, r1.to(dt, bitcast=True))
    tl.store(out_ptr + rows + 2, r2.to(dt, bitcast=True))
    tl.store(out_ptr + rows + 3, r3.to(dt, bitcast=True))


@triton.jit
def randint_kernel(X, N, seed, BLOCK: tl.constexpr):
    """As Triton's test: offsets of X's integer type (Philox4x32 either way; an int64 offset gives
    its low and high words)."""
    pid = tl.program_id(0).to(X.dtype.element_ty)
    offset = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offset, tl.randint(seed, offset), mask=offset < N)


@triton.jit
def randint_const_seed_kernel(X, N, seed: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(X.dtype.element_ty)
    offset = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offset, tl.randint(seed, offset), mask=offset < N)


@triton.jit
def randint4x_kernel(X, N, seed_ptr, BLOCK: tl.constexpr):
    """The seed as a runtime scalar loaded from memory; the four streams side by side."""
    seed = tl.load(seed_ptr)
    offset = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r0, r1, r2, r3 = tl.randint4x(seed, offset)
    m = offset < N
    tl.store(X + offset, r0, mask=m)
    tl.store(X + N + offset, r1, mask=m)
    tl.store(X + 2 * N + offset, r2, mask=m)
    tl.store(X + 3 * N + offset, r3, mask=m)


@triton.jit
def rand_kernel(X, N, seed, OFFSET_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(OFFSET_DTYPE)
    offset = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offset, tl.rand(seed, offset), mask=offset < N)


@triton.jit
def randn_kernel(X, N, seed, OFFSET_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(OFFSET_DTYPE)
    offset = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offset, tl.randn(seed, offset), mask=offset < N)


@triton.jit
def rand4x_randn4x_kernel(U, Z, N, seed, BLOCK: tl.constexpr):
    offset = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offset < N
    u1, u2, u3, u4 = tl.rand4x(seed, offset)
    z1, z2, z3, z4 = tl.randn4x(seed, offset)
    tl.store(U + offset, u1, mask=m)
    tl.store(U + N + offset, u2, mask=m)
    tl.store(U + 2 * N + offset, u3, mask=m)
    tl.store(U + 3 * N + offset, u4, mask=m)
    tl.store(Z + offset, z1, mask=m)
    tl.store(Z + N + offset, z2, mask=m)
    tl.store(Z + 2 * N + offset, z3, mask=m)
    tl.store(Z + 3 * N + offset, z4, mask=m)


@triton.jit
def uniform_limits_kernel(input, output, n: tl.constexpr):
    idx = tl.arange(0, n)
    tl.store(output + idx, tl.random.uint_to_uniform_float(tl.load(input + idx)))


@triton.jit
def rand_any_seed_kernel(X, seed):
    offset = tl.arange(0, 2)
    tl.store(X + offset, tl.rand(seed, offset))


@triton.jit
def rand_block_seed_kernel(X, S, BLOCK: tl.constexpr):
    """A seed per element: a block of seeds keys each offset's Philox separately."""
    offset = tl.arange(0, BLOCK)
    tl.store(X + offset, tl.rand(tl.load(S + offset), offset))


@triton.jit
def randint_far_offsets_kernel(X, base, seed, BLOCK: tl.constexpr):
    """Offsets base + i with a 64-bit base (past 2**32: the high word is in the Philox counter)."""
    i = tl.arange(0, BLOCK)
    tl.store(X + i, tl.randint(seed, base + i.to(tl.int64)))
