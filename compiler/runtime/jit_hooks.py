"""Triton's JIT cache surface on a JITFunction: `device_caches` (per device, the kernels compiled
for it, which `.clear()` forgets so the next launch or warmup compiles again), the
`knobs.runtime.jit_cache_hook` / `jit_post_compile_hook` called around each compile with the
specialization's serialized form, and `preload(specialization_data)`, which compiles from that
form (in another process too: a serving system warms its kernels from a list of them)."""
from __future__ import annotations

import json
from typing import Any

from .. import knobs
from ..language import dtypes as T
from ..language.core import constexpr


class DeviceCaches(dict):
    """device → (kernel_cache, kernel_key_cache, target, backend, binder), as Triton's tuple; the
    kernel cache maps a specialization key to its CompiledKernel. Clearing a device's cache (or all
    of them) also drops the JITFunction's launchers for it."""

    def __init__(self, jf):
        super().__init__()
        self._jf = jf

    def __missing__(self, device):
        entry = self[device] = (_KernelCache(self._jf, device), {}, None, None, None)
        return entry

    def clear(self) -> None:
        for kernels, *_ in self.values():
            kernels.clear()
        super().clear()
        self._jf._launchers.clear()


class _KernelCache(dict):
    def __init__(self, jf, device):
        super().__init__()
        self._jf, self._device = jf, device

    def clear(self) -> None:
        super().clear()
        for key, entry in list(self._jf._launchers.items()):
            if _device_of(key) == self._device:
                del self._jf._launchers[key]


def _device_of(key) -> Any:
    # runner keys end with the device; Python-path keys carry it before the options
    if isinstance(key, tuple) and key and key[0] == "in python":
        return key[7]
    return key[-1] if isinstance(key, tuple) and key else None


# ---- the serialized specialization ---------------------------------------------------------------

def _encode(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, constexpr):
        return {"constexpr": _encode(v.value)}
    if isinstance(v, T.dtype):
        return {"dtype": T.to_signature(v)}
    if type(v).__name__ == "Leaf":
        return {"leaf": v.name}
    if type(v) is tuple:
        return {"tuple": [_encode(x) for x in v]}
    raise TypeError(f"a {type(v).__name__} compile-time value cannot be serialized for preload ({v!r})")


def _decode(v):
    if not isinstance(v, dict):
        return v
    if "constexpr" in v:
        return constexpr(_decode(v["constexpr"]))
    if "dtype" in v:
        return T.from_signature(v["dtype"])
    if "leaf" in v:
        from ..frontend.tuple_args import Leaf  # noqa: PLC0415 - the front end loads on first compile
        return Leaf(v["leaf"])
    if "tuple" in v:
        return tuple(_decode(x) for x in v["tuple"])
    raise ValueError(f"unknown value {v!r} in specialization data")


def serialize(jf, sig, constexprs, div16, eq1, num_warps, num_stages, target, options, key) -> str:
    return json.dumps({
        "name": f"{jf.fn.__module__}.{jf.fn.__qualname__}" if jf.fn is not None else jf.__name__,
        "signature": dict(sig), "constexprs": [[k, _encode(v)] for k, v in constexprs.items()],
        "divisible_by_16": list(div16), "equal_to_1": list(eq1),
        "options": {"num_warps": num_warps, "num_stages": num_stages, "target": target, **dict(options)},
        "key": repr(key),
    })


def deserialize(jf, data: str) -> dict:
    obj = json.loads(data)
    name = f"{jf.fn.__module__}.{jf.fn.__qualname__}" if jf.fn is not None else jf.__name__
    if obj.get("name") != name:
        raise RuntimeError(f"Specialization data is for {obj.get('name')} but trying to preload for {name}")
    opts = dict(obj["options"])
    return {"signature": obj["signature"], "constexprs": {k: _decode(v) for k, v in obj["constexprs"]},
            "divisible_by_16": tuple(obj["divisible_by_16"]), "equal_to_1": tuple(obj["equal_to_1"]),
            "num_warps": opts.pop("num_warps"), "num_stages": opts.pop("num_stages"), "target": opts.pop("target"),
            "options": tuple(sorted(opts.items())), "key": obj["key"]}


def call_hook(hook, jf, key, sig, device, constexprs, data: str, num_warps, num_stages, options, is_warmup,
              already_compiled=False):
    """Triton's hook call: True from jit_cache_hook means "do not compile"."""
    if hook is None:
        return None
    opts = dict(options)
    args = ", ".join(f"{n}: {t}" for n, t in sig.items())
    name = jf.fn.__qualname__ if jf.fn is not None else jf.__name__
    num_ctas = opts.get("num_ctas") or 1
    repr_ = (f"{name}[num_warps={num_warps}, num_ctas={num_ctas}, num_stages={num_stages}, "
             f"enable_fp_fusion={opts.get('enable_fp_fusion', knobs.codegen.fp_fusion)}, launch_cooperative_grid=False]({args})")
    compile_ = {"key": key, "signature": dict(sig), "device": device, "constants": dict(constexprs),
                "num_warps": num_warps, "num_ctas": num_ctas, "num_stages": num_stages,
                "enable_fp_fusion": opts.get("enable_fp_fusion", knobs.codegen.fp_fusion), "launch_cooperative_grid": False,
                "extern_libs": None, "configs": None, "specialization_data": data, "is_warmup": is_warmup}
    return hook(key=key, repr=repr_, fn=JitFunctionInfo(jf.fn.__module__ if jf.fn is not None else "", name, jf),
                compile=compile_, is_manual_warmup=is_warmup, already_compiled=already_compiled)


class JitFunctionInfo:
    """What a hook learns of the function (Triton's JitFunctionInfo)."""

    def __init__(self, module: str, name: str, jit_function):
        self.module, self.name, self.jit_function = module, name, jit_function


def hooks():
    return knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook
