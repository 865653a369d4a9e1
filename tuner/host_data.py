"""Kernel inputs generated with numpy, and output comparison on the host (the GPU child's
torch-free data plane, tuner/device_plane.py).

The same initializers and seeds as tuner/data.py's torch version, from numpy's generator: the
values differ from torch's, so a job keeps the plane it started with (the reference outputs are
stored per plane, see tuner/child.py). bfloat16, which numpy lacks, is kept as its 16-bit
patterns (uint16) and widened to float32 for comparisons.
"""
from __future__ import annotations

import concurrent.futures

import numpy as np

from jobspec.model import TensorSpec

NUMPY = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8,
         "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "bool": np.bool_,
         "bfloat16": np.uint16}
BLOCK = 1 << 20                 # elements of a random input made from one generator (one thread's task)
INPUTS_VERSION = 2              # the values host_arguments makes (stored references are per version)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns, rounding to nearest even (NaN stays NaN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def _block_generator(seed: int, block: int) -> np.random.Generator:
    """The generator of one block of a tensor's values: the seed's own for block 0 (a tensor of at
    most BLOCK elements has the values of `default_rng(seed)`), a child seed for the others."""
    return np.random.default_rng(seed if block == 0 else (seed, block))


def _random_block(ts: TensorSpec, g: np.random.Generator, n: int) -> np.ndarray:
    """`n` values of a random initializer (float32 for randn/rand, int64 for randint), scaled and
    shifted in place: the same float32 operations as `x * std + mean`, without fresh temporaries."""
    if ts.init == "randn":
        v = g.standard_normal(n, dtype=np.float32)
        v *= ts.std
        v += ts.mean
        return v
    if ts.init == "rand":
        lo = 0.0 if ts.low is None else ts.low
        hi = 1.0 if ts.high is None else ts.high
        v = g.random(n, dtype=np.float32)
        v *= hi - lo
        v += lo
        return v
    return g.integers(int(ts.low or 0), int(ts.high), size=n, dtype=np.int64)


def _store(out: np.ndarray, v: np.ndarray, dtype: str) -> None:
    """Write values into `out` (a slice of the tensor) in the tensor's own type."""
    if dtype == "bfloat16":
        out[...] = to_bf16_bits(np.asarray(v, dtype=np.float32))
    elif dtype == "bool":
        out[...] = np.asarray(v) != 0
    else:
        out[...] = v          # numpy's cast, as astype: float32 → float16 rounds to nearest even


def _fill_block(ts: TensorSpec, flat: np.ndarray, seed: int, block: int) -> None:
    lo = block * BLOCK
    n = min(BLOCK, flat.size - lo)
    _store(flat[lo:lo + n], _random_block(ts, _block_generator(seed, block), n), ts.dtype)


def _blocks(shape: tuple[int, ...]) -> int:
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return max(1, -(-n // BLOCK))


def make_array(ts: TensorSpec, shape: tuple[int, ...], seed: int, pool: concurrent.futures.Executor | None = None,
               ) -> np.ndarray:
    """Host values for one tensor argument (C-contiguous, the device layout). Random initializers
    fill blocks of BLOCK elements, each from its own generator (`_block_generator`): the values
    depend only on the seed, and the blocks can be made on `pool`'s threads side by side (numpy's
    generators and casts release the GIL), straight into the tensor's type — a 4096² fp16 input
    never exists as a float32 array, whose page faults were most of a job's start."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if ts.init in ("randn", "rand", "randint"):
        out = np.empty(shape, dtype=NUMPY[ts.dtype])
        flat = out.reshape(-1)
        blocks = range(_blocks(shape))
        if pool is None or len(blocks) == 1:
            for b in blocks:
                _fill_block(ts, flat, seed, b)
        else:
            for f in [pool.submit(_fill_block, ts, flat, seed, b) for b in blocks]:
                f.result()
        return out
    if ts.init in ("zeros", "empty"):      # 'empty' is zero-filled too: runs must be reproducible
        # zeros of the tensor's own type (bfloat16's bit pattern of +0.0 is 0): no float64 to convert
        return np.zeros(shape, dtype=NUMPY[ts.dtype])
    if ts.init == "ones":
        v = np.ones(shape, dtype=np.float64)
    elif ts.init == "full":
        v = np.full(shape, ts.value, dtype=np.float64)
    elif ts.init == "arange":
        v = np.arange(n, dtype=np.float64).reshape(shape)
    else:  # pragma: no cover - the spec refuses others
        raise ValueError(ts.init)
    out = np.empty(shape, dtype=NUMPY[ts.dtype])
    _store(out, v, ts.dtype)
    return out


def as_numbers(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values to compare: float64 for floating types, int64 for the others."""
    if dtype == "bfloat16":
        return from_bf16_bits(a).astype(np.float64)
    if dtype in ("float16", "float32", "float64"):
        return a.astype(np.float64)
    return a.astype(np.int64)


def _close_where_bits_differ(out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float) -> bool:
    """Whether every element passes, looking at values only where the bit patterns differ: an
    element equal bit for bit to the reference always passes (0 <= atol + rtol*|ref|, NaN == NaN,
    inf == inf), and a correct config's output mostly is — its accumulation order moves only the
    few elements near a rounding boundary of the output type. Widening a 4096² output to float64
    and comparing all of it took a quarter of a second per trial, on the GPU child's critical path."""
    if out.dtype != ref.dtype or out.dtype.itemsize not in (1, 2, 4, 8):
        return False
    bits = np.dtype(f"u{out.dtype.itemsize}")
    differ = np.flatnonzero(out.view(bits) != ref.view(bits))
    if differ.size == 0:
        return True
    a = as_numbers(out.reshape(-1)[differ], dtype)
    b = as_numbers(ref.reshape(-1)[differ], dtype)
    if a.dtype == np.float64:
        return bool(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
    return bool((a == b).all())


def compare(out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float) -> str | None:
    """None when `out` matches `ref` within |out-ref| <= atol + rtol*|ref| (NaN == NaN), else why not
    (the wording of tuner/data.py's compare)."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if _close_where_bits_differ(out, ref, dtype, atol, rtol):
        return None
    # a mismatch (rare, cheap to explain slowly): counted and described over the whole output
    a, b = as_numbers(out, dtype), as_numbers(ref, dtype)
    if a.dtype == np.float64:
        ok = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = a == b
    if bool(ok.all()):
        return None
    bad = np.argwhere(~ok)
    first = tuple(int(i) for i in bad[0])
    with np.errstate(invalid="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    return (f"{len(bad)} of {ok.size} elements differ (max |diff| {float(diff.max()):.4g}, "
            f"first at {first}: {float(a[first]):.6g} vs reference {float(b[first]):.6g}; "
            f"atol={atol:g}, rtol={rtol:g})")


def input_threads() -> int:
    """Threads that make a job's inputs: the CPUs this process may run on (at most 16)."""
    from tuner.settings import usable_cpus

    return max(1, min(16, usable_cpus()))


def host_arguments(spec) -> tuple[list, dict[str, np.ndarray], dict]:
    """(positional kernel args in spec order, the tensors' host arrays by name, the expression
    environment): each tensor from its own seed, so every plane gets the same values. The blocks
    of every random tensor are made side by side on one pool of threads (a 4096³ matmul's two
    fp16 inputs are 32 blocks)."""
    env = spec.scalar_env()
    shapes = spec.shapes()
    jobs = {a.name: (a.tensor, tuple(shapes[a.name]), spec.seed * 1000 + i)
            for i, a in enumerate(spec.args) if a.is_tensor}
    blocks = sum(_blocks(shape) for ts, shape, _ in jobs.values() if ts.init in ("randn", "rand", "randint"))
    threads = min(input_threads(), blocks)
    if threads > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="inputs") as pool:
            made = {name: make_array(*job, pool=pool) for name, job in jobs.items()}
    else:
        made = {name: make_array(*job) for name, job in jobs.items()}
    tensors: dict[str, np.ndarray] = {a.name: made[a.name] for a in spec.args if a.is_tensor}
    args = [tensors[a.name] if a.is_tensor else env[a.name] for a in spec.args]
    return args, tensors, env


class HostPlane:
    """Interpret mode's data plane: the kernel's arguments are numpy arrays in the child's memory,
    which the CPU interpreter reads and writes directly. No torch: interpret mode runs where only
    numpy is installed. (numpy has no bfloat16: a spec with bfloat16 tensors takes torch's CPU
    tensors instead, see tuner/child.py.)"""

    launch_kw: dict = {}

    @staticmethod
    def make_args(spec) -> tuple[list, dict[str, np.ndarray], dict]:
        return host_arguments(spec)

    @staticmethod
    def clone(t: np.ndarray) -> np.ndarray:
        return t.copy()

    @staticmethod
    def copy(dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    @staticmethod
    def host(t: np.ndarray) -> np.ndarray:
        return t.copy()

    @staticmethod
    def compare(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> str | None:
        return compare(out, ref, out.dtype.name, atol, rtol)

    def sync(self) -> None:
        """The interpreter is synchronous."""

    def context_ok(self) -> bool:
        return True
