"""A tuning job spec (jobspec.JobSpec, as JSON) describing one launch of an @autotune kernel
(what BLOCKTUNE_SUBMIT_ON_MISS=1 sends after a lookup miss).

    spec = job_spec(autotuner, args, kwargs)     # raises CannotDescribe(reason)

What goes in it, and nothing else (no Python crosses over except the kernel's source text, which
the service only parses and compiles):

  kernel    the kernel's source as a strict module of its own (compiler.runtime.kernel_module), whose
            fingerprint equals the kernel's: the service's results are then found by its lookups;
  args      in the kernel's order, tensors by shape, dtype and initializer (floats randn, integers
            and bools zeros — zeros are always valid indices —, outputs zeros), scalars by value;
            never the tensors' contents;
  constants the constexpr parameters that the configs do not set (passed at the launch or defaults);
  space     per config parameter, the values the configs give it (num_warps, num_stages included);
  configs   the autotune config list (tried first); default_config its first config;
  key       the autotune key; grid: the launch grid as safe expressions (grid_exprs.py);
  check     outputs: the tensors named in restore_value / reset_to_zero, else every pointer
            argument the kernel stores to (compiler.pointer_effects on the launch's IR); tensors
            both read and written are marked in place (reset before every run).

Anything that cannot be said this way raises CannotDescribe: the caller then skips the submission;
the spec is checked with the service's own model (jobspec.JobSpec) before it is sent.
"""
from __future__ import annotations

import math
import sys
from typing import Any

from compiler import CompilationError
from compiler.language import constexpr
from compiler.pointer_effects import Undetermined, pointer_effects
from compiler.runtime.compile import build_ir, canon
from compiler.runtime.jit import JITFunction
from compiler.runtime.kernel_module import NotSelfContained, kernel_module_source

from jobspec.config import CONFIG_BUILTINS
from jobspec.model import DTYPES, JobSpec

from .grid_exprs import GridNotExpressible, grid_expressions

LAUNCH_OPTIONS = ("grid", "num_warps", "num_stages", "num_ctas", "maxnreg", "stream", "warmup", "enable_fp_fusion",
                  "waves_per_eu", "matrix_instr_nonkdim", "kpack", "launch_cooperative_grid", "debug")
_SCALARS = (bool, int, float, str)


class CannotDescribe(Exception):
    """This launch cannot be written as a job spec (the message says why)."""


def _plain(v: Any) -> Any:
    """A Python bool/int/float/str for a scalar (numpy scalars, constexpr), or the value itself."""
    if isinstance(v, constexpr):
        v = v.value
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.generic) and not isinstance(v, np.ndarray):
        v = v.item()
    return v


def _is_tensor(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, _SCALARS)


def _tensor_dtype(t: Any) -> str:
    dt = t.dtype
    name = getattr(dt, "name", None) if not str(dt).startswith("torch.") else str(dt)[len("torch."):]
    name = {"bool_": "bool"}.get(name or "", name)
    if name not in DTYPES:
        raise CannotDescribe(f"tensors of dtype {dt} cannot be described")
    return name


def _element_strides(t: Any) -> tuple[int, ...]:
    stride = getattr(t, "stride", None)
    if callable(stride):                   # torch: in elements
        return tuple(int(s) for s in stride())
    return tuple(int(s) // int(t.itemsize) for s in t.strides)   # numpy: in bytes


def _tensor_arg(name: str, t: Any, *, output: bool, inplace: bool, zeroed: bool) -> dict:
    shape = [int(d) for d in tuple(t.shape)] or [1]
    dtype = _tensor_dtype(t)
    numel = math.prod(shape)
    if numel and len(tuple(t.shape)):
        span = 1 + sum((d - 1) * abs(s) for d, s in zip(shape, _element_strides(t)))
        if span != numel:
            # a view into a larger buffer: a fresh tensor of this shape would be too small for the
            # strides the kernel is passed
            raise CannotDescribe(f"tensor argument '{name}' is a view that does not cover its memory densely")
    if zeroed or (output and not inplace):
        init = "zeros"
    else:
        init = "randn" if dtype.startswith(("float", "bfloat")) else "zeros"
    spec: dict[str, Any] = {"shape": shape, "dtype": dtype, "init": init}
    if inplace:
        spec["inplace"] = True
    return {"name": name, "tensor": spec}


def _scalar_arg(name: str, v: Any) -> dict:
    v = _plain(v)
    if v is None:
        raise CannotDescribe(f"argument '{name}' is None")
    if isinstance(v, bool):
        return {"name": name, "value": v, "dtype": "bool"}
    if isinstance(v, int):
        if not -2**63 <= v < 2**63:
            raise CannotDescribe(f"argument '{name}' = {v} does not fit in int64")
        return {"name": name, "value": v}
    if isinstance(v, float):
        if not math.isfinite(v):
            raise CannotDescribe(f"argument '{name}' = {v} is not a finite number")
        return {"name": name, "value": v}
    raise CannotDescribe(f"argument '{name}' is a {type(v).__name__}, not a tensor or a number")


def _space(configs) -> dict[str, list]:
    space: dict[str, list] = {}
    for c in configs:
        for k, v in {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}.items():
            v = _plain(v)
            if not isinstance(v, _SCALARS):
                raise CannotDescribe(f"config value {k}={v!r} is not a number, a bool or a string")
            values = space.setdefault(k, [])
            if not any(type(x) is type(v) and x == v for x in values):
                values.append(v)
    for k, values in space.items():
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values):
            values.sort()
    return space


def _outputs(jf, named: dict, configs) -> tuple[set[str], set[str]]:
    """(pointer args stored to, pointer args loaded from), over the IR of every distinct config."""
    stored: set[str] = set()
    loaded: set[str] = set()
    seen = set()
    compiled = 0
    for c in configs:
        values = {**named, **c.kwargs}
        try:
            sig, cx, div16, eq1, _ = jf.specialize(tuple(values.get(p) for p in jf.arg_names), interpret=True)
        except (TypeError, ValueError, OverflowError, KeyError) as exc:
            raise CannotDescribe(f"the arguments cannot be specialized: {exc!r}") from None
        ident = (tuple(sig.items()), tuple((k, canon(v)) for k, v in cx.items()), div16, eq1)
        if ident in seen:
            continue
        seen.add(ident)
        try:
            effects = pointer_effects(build_ir(jf, sig, cx, div16, eq1))
        except Undetermined as exc:
            raise CannotDescribe(f"which tensors the kernel writes cannot be determined: {exc}") from None
        except CompilationError:
            continue   # a config that does not compile: its trials will say so
        compiled += 1
        stored |= effects.stored
        loaded |= effects.loaded
    if not compiled:
        raise CannotDescribe("no config of the kernel compiles for these arguments")
    if not stored:
        raise CannotDescribe("the kernel writes no pointer argument (nothing to check)")
    return stored, loaded


def job_spec(tuner, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The job spec for this launch of `tuner` (a compiler Autotuner); see the module doc."""
    jf = tuner.base_fn
    if not isinstance(tuner.fn, JITFunction) or jf is not tuner.fn:
        raise CannotDescribe("a decorator (e.g. @heuristics) sits between @autotune and @jit")
    if tuner.user_pre_hook is not None or tuner.user_post_hook is not None:
        raise CannotDescribe("@autotune has a pre_hook/post_hook (Python cannot be sent to the service)")
    configs = list(tuner.configs)
    if any(c.pre_hook is not None for c in configs):
        raise CannotDescribe("a Config has a pre_hook (Python cannot be sent to the service)")
    if any(c.num_ctas not in (None, 1) or c.maxnreg is not None for c in configs):
        raise CannotDescribe("a Config sets num_ctas or maxnreg, which the tuner does not search")
    config_names = set().union(*(c.kwargs for c in configs))
    if any(set(c.kwargs) != config_names for c in configs):
        raise CannotDescribe("the configs do not all set the same parameters")

    named: dict[str, Any] = dict(zip(jf.arg_names, args))
    named.update({k: v for k, v in kwargs.items() if k in jf.arg_names})
    for p in jf.arg_names:
        if p not in named and p not in config_names and p in jf.defaults:
            named[p] = jf.defaults[p]
    missing = [p for p in jf.arg_names if p not in named and p not in config_names]
    if missing:
        raise CannotDescribe(f"no value for parameter(s) {', '.join(missing)}")
    runtime = [p for p in jf.arg_names if p not in jf.constexpr_names]
    tuned_runtime = config_names & set(runtime)
    if tuned_runtime:
        raise CannotDescribe(f"the configs set non-constexpr parameter(s) {', '.join(sorted(tuned_runtime))}")

    constants: dict[str, Any] = {}
    for p in jf.constexpr_names:
        if p in config_names:
            continue
        v = _plain(named[p])
        if not isinstance(v, _SCALARS):
            raise CannotDescribe(f"constexpr '{p}' = {v!r} is not a number, a bool or a string")
        constants[p] = v

    tensors = {p: named[p] for p in runtime
               if _is_tensor(named[p]) and not isinstance(_plain(named[p]), _SCALARS)}  # numpy scalars: numbers
    scalar_args = {p: _scalar_arg(p, named[p]) for p in runtime if p not in tensors}
    scalars = {p: a["value"] for p, a in scalar_args.items()}
    for t in tensors.values():
        _tensor_dtype(t)     # refuse unsupported dtypes before compiling anything

    stored, loaded = _outputs(jf, named, configs)
    given = [n for n in (*tuner.restore_value, *tuner.reset_to_zero) if n in runtime]
    outputs = (set(given) if given else stored) & set(tensors)
    if not outputs:
        raise CannotDescribe("none of the kernel's outputs is a tensor argument")
    inplace = set(tuner.restore_value) | set(tuner.reset_to_zero) | (stored & loaded)
    spec_args = [scalar_args[p] if p in scalar_args else
                 _tensor_arg(p, tensors[p], output=p in outputs, inplace=p in inplace,
                             zeroed=p in tuner.reset_to_zero)
                 for p in runtime]

    names = set(scalars) | config_names | set(constants) | set(CONFIG_BUILTINS)
    metas = [{**named, **c.all_kwargs()} for c in configs]
    try:
        grid = grid_expressions(kwargs.get("grid"), args=named, names=names, metas=metas)
    except GridNotExpressible as exc:
        raise CannotDescribe(f"the grid cannot be sent: {exc}") from None
    try:
        source = kernel_module_source(jf)
    except NotSelfContained as exc:
        raise CannotDescribe(f"the kernel's source cannot be sent: {exc}") from None

    flat = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in configs]
    spec = {
        "kernel": {"name": jf.__name__, "source": source},
        "args": spec_args,
        "key": list(tuner.keys),
        "grid": grid,
        "space": _space(configs),
        "constants": constants,
        "configs": flat,
        "default_config": flat[0],
        "check": {"outputs": [p for p in runtime if p in outputs]},
    }
    try:
        JobSpec.model_validate(spec)
    except ValueError as exc:     # pydantic's ValidationError: what the service would answer with a 422
        raise CannotDescribe(f"the job spec is not valid: {exc}") from None
    return spec


__all__ = ["job_spec", "CannotDescribe"]
