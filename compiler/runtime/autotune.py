"""`@autotune`, `@heuristics` and `Config`, with Triton's semantics.

    @compiler.autotune(configs=[compiler.Config({"BLOCK": 128}, num_warps=4), ...], key=["n"])
    @compiler.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr): ...

Per key (the values of the `key` arguments, plus the dtypes of tensor arguments, as Triton does)
the first launch picks a config and later launches reuse it:

  1. when `BLOCKTUNE_SERVICE_URL` is set, ask the tuning service
     (`client.lookup.get_best_config(fingerprint, name, key_dict, gpu_model)`, imported lazily);
  2. else a result stored on disk by an earlier process (same kernel fingerprint, key, configs,
     GPU, compiler version);
  3. else benchmark every (pruned) config with `do_bench` and keep the fastest.

`kernel.best_config` is the config of the last launch; `kernel.cache` maps key → config;
`kernel.configs_timings` the timings of the last tuning. In interpret mode the first config runs,
with no timing.

When the service has no config for the key and `BLOCKTUNE_SUBMIT_ON_MISS=1` (with
`BLOCKTUNE_TOKEN`), the launch is also described as a tuning job (`runtime.miss_job`: kernel
source, argument shapes and dtypes, scalars, grid expressions, the configs' space) and submitted in
a background thread, once per key and process; this launch still goes on as in 2./3. A launch that
cannot be described (a grid lambda that is not simple arithmetic, outputs that cannot be told...)
is not submitted, with one warning per kernel.
"""
from __future__ import annotations

import atexit
import builtins
import functools
import hashlib
import json
import os
import threading
import time
import warnings
from typing import Callable

from .. import knobs
from ..errors import CompilationError, OutOfResources


class Config:
    """One point of the search space: meta-parameters + num_warps / num_stages."""

    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook: Callable | None = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self) -> dict:
        out = dict(self.kwargs)
        out["num_warps"] = self.num_warps
        out["num_stages"] = self.num_stages
        if self.num_ctas not in (None, 1):
            out["num_ctas"] = self.num_ctas
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        return out

    def to_dict(self) -> dict:
        return {"kwargs": dict(self.kwargs), "num_warps": self.num_warps, "num_stages": self.num_stages,
                "num_ctas": self.num_ctas, "maxnreg": self.maxnreg}

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        """From `to_dict()` output, or a flat {"BLOCK": 128, "num_warps": 4, "num_stages": 3}."""
        d = dict(d)
        if "kwargs" in d and isinstance(d["kwargs"], dict):
            kw = d["kwargs"]
        else:
            kw = {k: v for k, v in d.items() if k not in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
        return cls(kw, num_warps=int(d.get("num_warps") or 4), num_stages=int(d.get("num_stages") or 3),
                   num_ctas=int(d.get("num_ctas") or 1), maxnreg=d.get("maxnreg"))

    def _ident(self):
        return (tuple(sorted(self.kwargs.items(), key=lambda kv: kv[0])), self.num_warps, self.num_stages,
                self.num_ctas, self.maxnreg)

    def __eq__(self, other):
        return isinstance(other, Config) and self._ident() == other._ident()

    def __hash__(self):
        try:
            return hash(self._ident())
        except TypeError:
            return hash(repr(self._ident()))

    def __str__(self) -> str:
        res = [f"{k}: {v}" for k, v in self.kwargs.items()]
        res += [f"num_warps: {self.num_warps}", f"num_ctas: {self.num_ctas}", f"num_stages: {self.num_stages}",
                f"maxnreg: {self.maxnreg}"]
        return ", ".join(res)

    __repr__ = __str__


def _jit_of(fn):
    from .jit import JITFunction  # noqa: PLC0415
    obj = fn
    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _interpret() -> bool:
    from .jit import interpret_mode  # noqa: PLC0415
    return interpret_mode()


# ---------------------------------------------------------------------------------------------
# The tuning service (client imported lazily; absent client → local tuning)

_service_warned = False


def _gpu_model() -> tuple[str | None, str | None]:
    """(GPU model name, compute capability "9.0") of the current device, or (None, None)."""
    from . import driver  # noqa: PLC0415
    if not driver.has_gpu():
        return None, None
    try:
        p = driver.device_properties(driver.current_device())
        return p["name"], f"{p['capability'][0]}.{p['capability'][1]}"
    except Exception:
        return None, None


def service_lookup(jit_fn, key: dict, cache: dict):
    """(kwargs, num_warps, num_stages) from the service for this kernel/key/GPU, or None.
    Cached per key in `cache` (also negative answers); never raises."""
    global _service_warned
    if not os.environ.get("BLOCKTUNE_SERVICE_URL"):
        return None
    try:
        ck = json.dumps(key, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None
    if ck in cache:
        return cache[ck]
    result = None
    try:
        from client.lookup import get_best_config  # noqa: PLC0415
        model, cc = _gpu_model()
        try:
            ans = get_best_config(jit_fn.fingerprint, jit_fn.__name__, key, model, compute_capability=cc)
        except TypeError:   # an older client without compute_capability
            ans = get_best_config(jit_fn.fingerprint, jit_fn.__name__, key, model)
        if ans:
            cfg = ans.get("config", ans) if isinstance(ans, dict) else None
            if isinstance(cfg, dict):
                c = Config.from_dict(cfg)
                result = (c.kwargs, c.num_warps, c.num_stages)
    except ImportError:
        if not _service_warned:
            warnings.warn("BLOCKTUNE_SERVICE_URL is set but the blocktune client is not installed; tuning locally",
                          RuntimeWarning, stacklevel=3)
            _service_warned = True
    except Exception as e:  # noqa: BLE001 - the service must never break a launch
        if not _service_warned:
            warnings.warn(f"blocktune service lookup failed ({e}); tuning locally", RuntimeWarning, stacklevel=3)
            _service_warned = True
    cache[ck] = result
    return result


# ---------------------------------------------------------------------------------------------
# Submissions after a miss run in the background: a launch never waits for the service's answer.

_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()
_drain_registered = False


def _submit_timeout() -> float:
    try:
        return float(os.environ.get("BLOCKTUNE_SUBMIT_TIMEOUT", 10.0))
    except ValueError:
        return 10.0


def _submit_in_background(submit: Callable, spec: dict, gpu_model: str) -> None:
    global _drain_registered
    t = threading.Thread(target=submit, args=(spec, gpu_model), name="blocktune-submit", daemon=True)
    with _pending_lock:
        _pending[:] = [x for x in _pending if x.is_alive()]
        _pending.append(t)
        if not _drain_registered:
            # a short script may end right after its first launch: give its submissions their
            # request timeout to finish instead of killing them with the interpreter
            atexit.register(wait_for_submissions, _submit_timeout())
            _drain_registered = True
    t.start()


def wait_for_submissions(timeout: float | None = None) -> bool:
    """Wait for the background job submissions started so far; True when none is left running."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _pending_lock:
        threads = list(_pending)
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


# ---------------------------------------------------------------------------------------------

def _key_part(v):
    from .jit import key_value  # noqa: PLC0415
    return key_value(v)


class Autotuner:
    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by: dict | None = None, warmup=None, rep=None,
                 use_cuda_graph=False, do_bench=None, cache_results=True):
        self.fn = fn
        self.base_fn = _jit_of(fn)
        self.arg_names = list(arg_names)
        self.configs = list(configs) if configs else [Config({})]
        self.keys = list(key)
        for k in self.keys:
            if k not in self.arg_names:
                raise ValueError(f"autotune key {k!r} is not a parameter of {getattr(fn, '__name__', fn)}")
        self.cache: dict = {}
        self.best_config: Config | None = None
        self.configs_timings: dict | None = None
        self.bench_time: float | None = None
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self._user_pre_hook = pre_hook
        self._user_post_hook = post_hook
        self._restore_copies: dict = {}
        prune = prune_configs_by or {}
        self.perf_model = prune.get("perf_model")
        self.configs_top_k = prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        self.num_warmups = 25 if warmup is None else warmup
        self.num_reps = 100 if rep is None else rep
        self.use_cuda_graph = use_cuda_graph
        self._do_bench = do_bench
        self.cache_results = cache_results
        self._service_cache: dict = {}
        self._submitted: set = set()      # keys described to the service (BLOCKTUNE_SUBMIT_ON_MISS)
        self._submit_warned = False
        self._last_errors: dict = {}
        self.__name__ = getattr(fn, "__name__", "kernel")
        functools.update_wrapper(self, fn, assigned=("__doc__", "__module__"), updated=())

    # Triton-compatible attributes reached through the wrapper
    @property
    def fingerprint(self) -> str:
        return self.base_fn.fingerprint

    @property
    def src(self) -> str:
        return self.base_fn.src

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is an autotuned @jit kernel: launch it with {self.__name__}[grid](...)")

    # -- hooks -------------------------------------------------------------------------------------
    def pre_hook(self, kwargs: dict, reset_only: bool = False):
        if self._user_pre_hook is not None:
            return self._user_pre_hook(kwargs, reset_only)
        for name in self.reset_to_zero:
            kwargs[name].zero_()
        if not reset_only:
            self._restore_copies = {name: kwargs[name].clone() for name in self.restore_value}

    def post_hook(self, kwargs: dict, exception):
        if self._user_post_hook is not None:
            return self._user_post_hook(kwargs, exception)
        for name, saved in self._restore_copies.items():
            kwargs[name].copy_(saved)
        self._restore_copies = {}

    # -- benchmarking ----------------------------------------------------------------------------
    def do_bench(self, fn, quantiles):
        if self._do_bench is not None:
            return self._do_bench(fn, quantiles=quantiles)
        from .. import testing  # noqa: PLC0415
        if self.use_cuda_graph:
            return testing.do_bench_cudagraph(fn, rep=self.num_reps, quantiles=quantiles)
        return testing.do_bench(fn, warmup=self.num_warmups, rep=self.num_reps, quantiles=quantiles)

    def _bench(self, *args, config: Config, **meta):
        conflicts = set(meta) & set(config.kwargs)
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
                             "re-define auto-tuned symbols.")
        current = dict(meta, **config.all_kwargs())
        full_nargs = {**dict(zip(self.arg_names, args)), **current}

        def kernel_call():
            if config.pre_hook:
                config.pre_hook(full_nargs)
            self.pre_hook(full_nargs)
            try:
                self.fn.run(*args, **current)
            except Exception as e:
                try:
                    self.post_hook(full_nargs, exception=e)
                finally:
                    raise
            self.post_hook(full_nargs, exception=None)

        try:
            return self.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        except (OutOfResources, CompilationError) as e:
            self._last_errors[str(config)] = str(e)
            return [float("inf")] * 3
        except Exception as e:  # noqa: BLE001
            from .driver import CudaError  # noqa: PLC0415
            if isinstance(e, CudaError) and e.name in ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "CUDA_ERROR_INVALID_VALUE"):
                self._last_errors[str(config)] = str(e)
                return [float("inf")] * 3
            raise

    def prune_configs(self, kwargs: dict, nargs: dict | None = None) -> list:
        pruned = self.configs
        if self.early_config_prune:
            pruned = self.early_config_prune(self.configs, nargs if nargs is not None else kwargs, **kwargs)
            if not pruned:
                raise ValueError("early_config_prune left no config")
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(pruned) * top_k)
            elif not isinstance(top_k, int):
                raise TypeError("top_k must be an int or a float <= 1.0")
            if len(pruned) > top_k:
                est = {c: self.perf_model(**(nargs or {}), **kwargs, **c.all_kwargs()) for c in pruned}
                pruned = sorted(est, key=lambda c: est[c])[:max(1, top_k)]
        return pruned

    # -- keys and caches ---------------------------------------------------------------------------
    def _key(self, all_args: dict):
        key = [_key_part(all_args[k]) for k in self.keys if k in all_args]
        for name in self.arg_names:
            v = all_args.get(name)
            dt = getattr(v, "dtype", None)
            if dt is not None and hasattr(v, "data_ptr"):
                key.append(str(dt))
        return tuple(key)

    def _disk_path(self, key: tuple, gpu: str | None) -> str | None:
        from .compile import _disk_enabled, cache_dir, compiler_source_hash  # noqa: PLC0415
        if not self.cache_results or not _disk_enabled() or self.base_fn is None:
            return None
        from .. import __version__  # noqa: PLC0415
        h = hashlib.sha256()
        h.update("\x00".join(["autotune", __version__, compiler_source_hash(), self.base_fn.fingerprint, repr(key),
                              gpu or "",
                              repr([str(c) for c in self.configs]), repr(self.keys)]).encode())
        return os.path.join(cache_dir(), "autotune", h.hexdigest() + ".json")

    def _load_disk(self, path: str | None) -> Config | None:
        if path is None:
            return None
        try:
            with open(path) as f:
                data = json.load(f)
            cfg = Config.from_dict(data["best"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        for c in self.configs:  # keep the user's object (and its pre_hook) when it is one of ours
            if c == cfg:
                return c
        return cfg

    def _store_disk(self, path: str | None, key, cfg: Config, timings: dict):
        if path is None:
            return
        from .compile import atomic_write  # noqa: PLC0415
        try:
            data = {"key": [str(k) for k in key], "best": cfg.to_dict(),
                    "timings": [{"config": c.to_dict(), "ms": t} for c, t in timings.items()]}
            atomic_write(path, json.dumps(data, default=str).encode())
        except (OSError, TypeError, ValueError):
            pass

    # -- launching ---------------------------------------------------------------------------------
    def run(self, *args, **kwargs):
        nargs = dict(zip(self.arg_names, args))
        all_args = {**nargs, **kwargs}
        if _interpret():
            # no timing on the CPU: the service's answer when there is one, else the first config
            config = self._from_service(all_args)
            if config is None:
                self._submit_on_miss(all_args, args, kwargs, stacklevel=4)
                config = self.configs[0]
            self.best_config = config
            return self._launch(config, args, kwargs, nargs)
        key = self._key(all_args)
        config = self.cache.get(key)
        if config is None:
            config = self._choose(key, args, kwargs, nargs, all_args)
            self.cache[key] = config
        self.best_config = config
        return self._launch(config, args, kwargs, nargs)

    def _choose(self, key, args, kwargs, nargs, all_args) -> Config:
        if len(self.configs) == 1 and not self.early_config_prune:
            return self.configs[0]
        cfg = self._from_service(all_args)
        if cfg is not None:
            return cfg
        self._submit_on_miss(all_args, args, kwargs, stacklevel=5)
        gpu = _gpu_model()[0]
        path = self._disk_path(key, gpu)
        cfg = self._load_disk(path)
        if cfg is not None:
            return cfg
        pruned = self.prune_configs(kwargs, nargs)
        self._last_errors = {}
        t0 = time.perf_counter()
        timings = {c: self._bench(*args, config=c, **kwargs) for c in pruned}
        self.bench_time = time.perf_counter() - t0
        self.configs_timings = timings
        best = builtins.min(timings, key=lambda c: timings[c][0] if isinstance(timings[c], list) else timings[c])
        first = timings[best][0] if isinstance(timings[best], list) else timings[best]
        if first == float("inf"):
            errs = "; ".join(f"[{c}] {e}" for c, e in list(self._last_errors.items())[:3])
            raise OutOfResources(0, 0, f"every config of {self.__name__} failed to compile or launch ({errs})")
        self._store_disk(path, key, best, {c: (t[0] if isinstance(t, list) else t) for c, t in timings.items()})
        if knobs.autotuning.print:
            print(f"Autotuning kernel {self.__name__} with config {best} finished after {self.bench_time:.2f}s; "
                  f"best config selected: {best};")
        self._publish(all_args, best, timings)
        # like Triton: leave reset_to_zero buffers zeroed for the real launch
        full = {**nargs, **kwargs, **best.all_kwargs()}
        self.pre_hook(full, reset_only=True)
        return best

    def _from_service(self, all_args: dict) -> Config | None:
        """The service's best config for this key on this GPU (BLOCKTUNE_SERVICE_URL), or None."""
        if self.base_fn is None or not os.environ.get("BLOCKTUNE_SERVICE_URL"):
            return None
        kd = {k: _key_part(all_args[k]) for k in self.keys if k in all_args}
        got = service_lookup(self.base_fn, kd, self._service_cache)
        if got is None:
            return None
        kw, nw, ns = got
        cfg = Config(kw, num_warps=nw or 4, num_stages=ns or 3)
        return next((c for c in self.configs if c == cfg), cfg)  # keep the user's object (pre_hook)

    def _submit_on_miss(self, all_args: dict, args: tuple, kwargs: dict, stacklevel: int) -> None:
        """With BLOCKTUNE_SUBMIT_ON_MISS=1, after a lookup miss: submit this launch as a tuning job
        (in the background, once per key and process). Never raises; warns once per kernel.
        `stacklevel`: this method's frame up to the user's launch (warnings point there)."""
        if self.base_fn is None or not os.environ.get("BLOCKTUNE_SERVICE_URL"):
            return
        try:
            from client import lookup  # noqa: PLC0415
        except ImportError:
            return
        if not lookup.submit_on_miss_enabled():
            return
        key = self._key(all_args)
        if key in self._submitted:
            return
        self._submitted.add(key)
        model = _gpu_model()[0] or (lookup.INTERPRETER_MODEL if _interpret() else None)
        if model is None:
            return
        if not lookup.has_token():
            self._warn_submit("BLOCKTUNE_SUBMIT_ON_MISS=1 needs BLOCKTUNE_TOKEN (an API token) to submit jobs",
                              stacklevel + 1)
            return
        from .miss_job import CannotDescribe, job_spec  # noqa: PLC0415
        try:
            spec = job_spec(self, args, kwargs)
        except CannotDescribe as exc:
            self._warn_submit(str(exc), stacklevel + 1)
            return
        except Exception as exc:  # noqa: BLE001 - describing a launch must never break it
            self._warn_submit(f"{type(exc).__name__}: {exc}", stacklevel + 1)
            return
        _submit_in_background(lookup.submit_on_miss, spec, model)

    def _warn_submit(self, why: str, stacklevel: int) -> None:
        if not self._submit_warned:
            self._submit_warned = True
            warnings.warn(f"blocktune: not submitting a tuning job for {self.__name__} ({why}); tuning locally",
                          RuntimeWarning, stacklevel=stacklevel)

    def _publish(self, all_args: dict, best: Config, timings: dict):
        """With BLOCKTUNE_PUBLISH=1, send a locally tuned winner back to the service."""
        if self.base_fn is None or not os.environ.get("BLOCKTUNE_SERVICE_URL"):
            return
        try:
            from client import lookup  # noqa: PLC0415
        except ImportError:
            return
        if not lookup.publish_enabled():
            return
        model, cc = _gpu_model()
        if model is None:
            return

        def ms(c):
            t = timings.get(c)
            return t[0] if isinstance(t, list) else t
        kd = {k: _key_part(all_args[k]) for k in self.keys if k in all_args}
        default = ms(self.configs[0]) if self.configs[0] in timings else None
        flat = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}  # the service's form
        lookup.publish(self.base_fn.fingerprint, self.base_fn.__name__, kd, model, cc, flat, ms(best),
                       default if default not in (None, float("inf")) else None)

    def _launch(self, config: Config, args, kwargs, nargs):
        conflicts = set(kwargs) & set(config.kwargs)
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
                             "re-define auto-tuned symbols.")
        if config.pre_hook:
            config.pre_hook({**nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    def __getitem__(self, grid):
        return functools.partial(_run_with_grid, self, grid)

    def warmup(self, *args, **kwargs):
        """Compile every (pruned) config without launching."""
        out = []
        for config in self.prune_configs(kwargs, dict(zip(self.arg_names, args))):
            out.append(self.fn.warmup(*args, **kwargs, **config.all_kwargs()))
        return out


def _run_with_grid(tuner, grid, *args, **kwargs):
    return tuner.run(*args, grid=grid, **kwargs)


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=True):
    """Decorator for auto-tuning a @jit function (Triton's semantics; see the module doc)."""
    def decorator(fn):
        base = _jit_of(fn)
        if base is None:
            raise TypeError("@autotune must decorate a @jit function (put @autotune above @jit)")
        return Autotuner(fn, base.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)
    return decorator


class Heuristics:
    """Meta-parameters computed from the other arguments: `values[name](meta_dict) -> value`."""

    def __init__(self, fn, arg_names, values: dict):
        self.fn = fn
        self.base_fn = _jit_of(fn)
        self.arg_names = list(arg_names)
        self.values = dict(values)
        self.__name__ = getattr(fn, "__name__", "kernel")

    @property
    def fingerprint(self) -> str:
        return self.base_fn.fingerprint

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a @jit kernel: launch it with {self.__name__}[grid](...)")

    def _fill(self, args, kwargs):
        for v, heur in self.values.items():
            kwargs[v] = heur({**dict(zip(self.arg_names, args)), **kwargs})
        return kwargs

    def run(self, *args, **kwargs):
        return self.fn.run(*args, **self._fill(args, kwargs))

    def warmup(self, *args, **kwargs):
        return self.fn.warmup(*args, **self._fill(args, kwargs))

    def __getitem__(self, grid):
        return functools.partial(_run_with_grid, self, grid)


def heuristics(values: dict):
    """Decorator: `@heuristics({"BLOCK": lambda args: next_power_of_2(args["n"])})` above @jit."""
    def decorator(fn):
        base = _jit_of(fn)
        if base is None:
            raise TypeError("@heuristics must decorate a @jit function")
        return Heuristics(fn, base.arg_names, values)
    return decorator


__all__ = ["Config", "Autotuner", "autotune", "Heuristics", "heuristics", "service_lookup", "wait_for_submissions"]
