"""Kernel arguments from a spec (torch tensors, deterministic) and output comparison."""
from __future__ import annotations

from typing import Any

from jobspec.model import JobSpec, TensorSpec

# dtype name → (atol, rtol) for comparing a config's outputs with the reference
TOLERANCES = {
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float32": (1e-4, 1e-4),
    "float64": (1e-7, 1e-7),
}

SIGNATURE_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8",
                   "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1"}


def torch_dtype(name: str):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
            "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}[name]


def make_tensor(ts: TensorSpec, shape: tuple[int, ...], seed: int, device="cpu"):
    """Values are generated on the CPU from a seeded generator, so every run (and every device)
    gets the same inputs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = torch_dtype(ts.dtype)
    if ts.init == "randn":
        t = torch.randn(shape, generator=g, dtype=torch.float32) * ts.std + ts.mean
    elif ts.init == "rand":
        lo = 0.0 if ts.low is None else ts.low
        hi = 1.0 if ts.high is None else ts.high
        t = torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo
    elif ts.init in ("zeros", "empty"):   # 'empty' is zero-filled too: runs must be reproducible
        t = torch.zeros(shape, dtype=dt)
    elif ts.init == "ones":
        t = torch.ones(shape, dtype=dt)
    elif ts.init == "full":
        t = torch.full(shape, ts.value, dtype=dt)
    elif ts.init == "arange":
        n = 1
        for d in shape:
            n *= d
        t = torch.arange(n, dtype=torch.float64 if dt.is_floating_point else torch.int64).reshape(shape)
    elif ts.init == "randint":
        t = torch.randint(int(ts.low or 0), int(ts.high), shape, generator=g, dtype=torch.int64)
    else:  # pragma: no cover - the spec refuses others
        raise ValueError(ts.init)
    return t.to(dt).to(device)


def build_args(spec: JobSpec, device="cpu") -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(positional kernel args in spec order, tensors by name, the expression environment)."""
    env = spec.scalar_env()
    shapes = spec.shapes()
    tensors: dict[str, Any] = {}
    args: list[Any] = []
    for i, a in enumerate(spec.args):
        if a.is_tensor:
            t = make_tensor(a.tensor, shapes[a.name], spec.seed * 1000 + i, device)
            tensors[a.name] = t
            args.append(t)
        else:
            args.append(env[a.name])
    return args, tensors, env


def signature(spec: JobSpec, env: dict[str, Any]) -> dict[str, str]:
    """The compiler's signature of the runtime (non-constexpr) arguments."""
    sig = {}
    for a in spec.args:
        if a.is_tensor:
            sig[a.name] = "*" + SIGNATURE_TYPES[a.tensor.dtype]
        else:
            v = env[a.name]
            if a.dtype:
                sig[a.name] = SIGNATURE_TYPES[a.dtype]
            elif isinstance(v, bool):
                sig[a.name] = "i1"
            elif isinstance(v, int):
                sig[a.name] = "i32" if -2**31 <= v < 2**31 else "i64"
            else:
                sig[a.name] = "fp32"
    return sig


def specialization(spec: JobSpec, env: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(divisible_by_16, equal_to_1) as Triton specializes: pointers from torch's allocator are
    256-byte aligned; integers by value."""
    div16, one = [], []
    for a in spec.args:
        if a.is_tensor:
            div16.append(a.name)
        else:
            v = env[a.name]
            if isinstance(v, int) and not isinstance(v, bool):
                if v == 1:
                    one.append(a.name)
                elif v % 16 == 0:
                    div16.append(a.name)
    return tuple(div16), tuple(one)


def tolerances(spec: JobSpec, name: str) -> tuple[float, float]:
    dtype = next(a.tensor.dtype for a in spec.args if a.name == name)
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    if spec.check.atol is not None:
        atol = spec.check.atol
    if spec.check.rtol is not None:
        rtol = spec.check.rtol
    return atol, rtol


def compare(out, ref, atol: float, rtol: float) -> str | None:
    """None when `out` matches `ref` within |out-ref| <= atol + rtol*|ref| (NaN == NaN), else why not."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if ref.device != out.device:
        ref = ref.to(out.device)
    if out.dtype.is_floating_point or ref.dtype.is_floating_point:
        a, b = out.double(), ref.double()
        ok = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        a, b = out.long(), ref.long()
        ok = a == b
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    n_bad = bad.shape[0]
    first = tuple(int(i) for i in bad[0])
    diff = (a - b).abs().double()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    return (f"{n_bad} of {ok.numel()} elements differ (max |diff| {float(diff.max()):.4g}, "
            f"first at {first}: {float(a[first]):.6g} vs reference {float(b[first]):.6g}; "
            f"atol={atol:g}, rtol={rtol:g})")
