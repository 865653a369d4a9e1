"""`@autotune`, `@heuristics` and `Config`, with Triton's semantics.

    @compiler.autotune(configs=[compiler.Config({"BLOCK": 128}, num_warps=4), ...], key=["n"])
    @compiler.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr): ...

Per key (the values of the `key` arguments, plus the dtypes of tensor arguments, as Triton does)
the first launch picks a config and later launches reuse it (one config: no key, no tuning;
configs pruned to one by `prune_configs_by`: that one, untimed):

  1. a listener of `knobs.autotuning.before_tuning` may answer with a config (the tuning service's
     plug-in in client/ does, when BLOCKTUNE_SERVICE_URL is set); when none does, the
     `launch_missed` listeners hear of it (the plug-in may submit a tuning job);
  2. else a result stored on disk by an earlier process (same kernel fingerprint, key, configs,
     GPU, compiler version);
  3. else benchmark every (pruned) config with `do_bench` and keep the fastest, as Triton does:
     in the configs' order, Triton's do_bench protocol (compiler/runtime/timing.py), ranked by
     [median, 20th, 80th percentile]. One deliberate addition with the default benchmarker: the
     few configs within 25% of the best are timed once more, in reverse order, and each keeps its
     better pass (knobs.autotuning.confirm, BLOCKTUNE_AUTOTUNE_CONFIRM=0 turns it off), so that
     drift during the first pass does not decide between near-equal tiles. A user's do_bench is
     called exactly as Triton calls it, once per config.
The `config_chosen` listeners hear of the choice in 2. and 3. (`cache_hit` says which), and so does
Triton's single `knobs.autotuning.listener` when one is set.

`kernel.best_config` is the config of the last launch; `kernel.cache` maps key → config;
`kernel.configs_timings` the timings of the last tuning (the better pass of a config timed twice),
`kernel.confirm_timings` the second pass's. In interpret mode a listener's config or
the first (pruned) config runs, untimed, unless the user gave `do_bench`: then the configs are
benchmarked with it as on the GPU (as Triton's interpreter does); pruning, the hooks and the per-key
cache work as on the GPU, the disk cache and the `config_chosen` listeners are left out (interpreter
timings say nothing about a GPU).
"""
from __future__ import annotations

import builtins
import functools
import hashlib
import json
import os
import time
from typing import Callable

from .. import knobs, plugins
from ..errors import AutotunerError, CompilationError, OutOfResources
from ..version import __version__
from . import cache, driver, timing
from .jit import JITFunction, interpret_mode, key_value


class Config:
    """One point of the search space: meta-parameters + num_warps / num_stages."""

    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook: Callable | None = None, ir_override: str | None = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        # Triton's hand-written stage for this config (a .llir/.ptx/.cubin file replaces that stage
        # of the compiled kernel; Triton's .ttir/.ttgir do not apply): a compile option (ir_override.py)
        self.ir_override = ir_override

    def all_kwargs(self) -> dict:
        out = dict(self.kwargs)
        out["num_warps"] = self.num_warps
        out["num_stages"] = self.num_stages
        if self.num_ctas not in (None, 1):
            out["num_ctas"] = self.num_ctas
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        if self.ir_override is not None:
            out["ir_override"] = self.ir_override
        return out

    def to_dict(self) -> dict:
        return {"kwargs": dict(self.kwargs), "num_warps": self.num_warps, "num_stages": self.num_stages,
                "num_ctas": self.num_ctas, "maxnreg": self.maxnreg, "ir_override": self.ir_override}

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        """From `to_dict()` output, or a flat {"BLOCK": 128, "num_warps": 4, "num_stages": 3}."""
        d = dict(d)
        if "kwargs" in d and isinstance(d["kwargs"], dict):
            kw = d["kwargs"]
        else:
            kw = {k: v for k, v in d.items() if k not in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")}
        return cls(kw, num_warps=int(d.get("num_warps") or 4), num_stages=int(d.get("num_stages") or 3),
                   num_ctas=int(d.get("num_ctas") or 1), maxnreg=d.get("maxnreg"), ir_override=d.get("ir_override"))

    def _ident(self):
        return (tuple(sorted(self.kwargs.items(), key=lambda kv: kv[0])), self.num_warps, self.num_stages,
                self.num_ctas, self.maxnreg, self.ir_override)

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
                f"maxnreg: {self.maxnreg}", f"ir_override: {self.ir_override}"]
        return ", ".join(res)

    __repr__ = __str__


def _jit_of(fn):
    obj = fn
    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _interpret() -> bool:
    return interpret_mode()


def _gpu_model() -> str | None:
    """The current device's name (part of the disk cache's key), or None without a GPU."""
    if not driver.has_gpu():
        return None
    try:
        return driver.device_properties(driver.current_device())["name"]
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------

def _key_part(v):
    return key_value(v)


class Autotuner:
    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by: dict | None = None, warmup=None, rep=None,
                 use_cuda_graph=False, do_bench=None, cache_results=True):
        self.fn = fn
        self.base_fn = _jit_of(fn)
        self.arg_names = list(arg_names)
        self.configs = list(configs) if configs else [Config({})]
        # A key that names no parameter is left out of the key, as Triton does (tutorial 08 keys its
        # TMA kernel on a misspelled 'gropup_c_ptrs' and runs)
        self.keys = list(key)
        self.cache: dict = {}
        self.best_config: Config | None = None
        self.configs_timings: dict | None = None
        # the second timings of the contenders of the last tuning (see _confirm_close_calls)
        self.confirm_timings: dict = {}
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

    @property
    def user_pre_hook(self) -> Callable | None:
        """The `pre_hook` given to @autotune (None: the default, reset_to_zero / restore_value)."""
        return self._user_pre_hook

    @property
    def user_post_hook(self) -> Callable | None:
        return self._user_post_hook

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is an autotuned @jit kernel: launch it with {self.__name__}[grid](...)")

    # -- hooks -------------------------------------------------------------------------------------
    def pre_hook(self, kwargs: dict, reset_only: bool = False):
        if self._user_pre_hook is not None:
            return self._user_pre_hook(kwargs, reset_only)
        # an optional buffer passed as None (the kernel then does not write it) is left alone
        for name in self.reset_to_zero:
            if kwargs[name] is not None:
                kwargs[name].zero_()
        if not reset_only:
            self._restore_copies = {name: kwargs[name].clone() for name in self.restore_value
                                    if kwargs[name] is not None}

    def post_hook(self, kwargs: dict, exception):
        if self._user_post_hook is not None:
            return self._user_post_hook(kwargs, exception=exception)    # Triton passes it by name
        for name, saved in self._restore_copies.items():
            kwargs[name].copy_(saved)
        self._restore_copies = {}

    # -- benchmarking ----------------------------------------------------------------------------
    def do_bench(self, fn, quantiles):
        if self._do_bench is not None:
            return self._do_bench(fn, quantiles=quantiles)
        if self.use_cuda_graph:
            return timing.do_bench_cudagraph(fn, rep=self.num_reps, quantiles=quantiles)
        return timing.do_bench(fn, warmup=self.num_warmups, rep=self.num_reps, quantiles=quantiles)

    def _bench(self, *args, config: Config, **meta):
        conflicts = set(meta) & set(config.kwargs)
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
                             "re-define auto-tuned symbols.")
        if knobs.autotuning.print:
            print(f"Autotuning kernel {self.__name__} with config {config}")
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
            if isinstance(e, driver.CudaError) and e.name in ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "CUDA_ERROR_INVALID_VALUE"):
                self._last_errors[str(config)] = str(e)
                return [float("inf")] * 3
            raise

    def _early_pruned(self, kwargs: dict, nargs: dict | None) -> list:
        """The configs `early_config_prune` keeps for these arguments (all without one)."""
        if not self.early_config_prune:
            return self.configs
        pruned = self.early_config_prune(self.configs, nargs if nargs is not None else kwargs, **kwargs)
        if not pruned:
            raise AutotunerError("No valid autotuner configs after pruning. `early_config_prune` should "
                                 "return at least one config.")
        return pruned

    def prune_configs(self, kwargs: dict, nargs: dict | None = None) -> list:
        pruned = self._early_pruned(kwargs, nargs)
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(pruned) * top_k))   # a small fraction of few configs still keeps one
            elif not isinstance(top_k, int):
                raise TypeError("top_k must be an int or a float <= 1.0")
            if len(pruned) > top_k:
                est = {c: self.perf_model(**(nargs or {}), **kwargs, **c.all_kwargs()) for c in pruned}
                pruned = sorted(est, key=lambda c: est[c])[:top_k]
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
        if not self.cache_results or not cache.disk_enabled() or self.base_fn is None:
            return None
        h = hashlib.sha256()
        # knobs.codegen.key(): a switch that changes the code (BLOCKTUNE_POINTER_TMA=0, BLOCKTUNE_WGMMA=sync,
        # ...) changes which config is fastest; a pick timed under other switches is not reused
        h.update("\x00".join(["autotune", __version__, cache.compiler_source_hash(), self.base_fn.fingerprint, repr(key),
                              gpu or "", knobs.codegen.key(),
                              repr([str(c) for c in self.configs]), repr(self.keys)]).encode())
        return os.path.join(cache.cache_dir(), "autotune", h.hexdigest() + ".json")

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
        try:
            data = {"key": [str(k) for k in key], "best": cfg.to_dict(),
                    "timings": [{"config": c.to_dict(), "ms": t} for c, t in timings.items()]}
            cache.atomic_write(path, json.dumps(data, default=str).encode())
        except (OSError, TypeError, ValueError):
            pass

    # -- launching ---------------------------------------------------------------------------------
    def run(self, *args, **kwargs):
        nargs = dict(zip(self.arg_names, args))
        all_args = {**nargs, **kwargs}
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
        cfg = self._from_listeners(all_args)
        if cfg is not None:
            return cfg
        self._launch_missed(all_args, args, kwargs)
        interpret = _interpret()
        path = None if interpret else self._disk_path(key, _gpu_model())
        cfg = self._load_disk(path)
        if cfg is not None:
            self._chosen(all_args, cfg, {}, 0.0, cache_hit=True)
            self._tell_listener(key, cfg, None, None, cache_hit=True)
            return cfg
        pruned = self.prune_configs(kwargs, nargs)
        if len(pruned) == 1 or (interpret and self._do_bench is None):
            return pruned[0]     # nothing to compare (or no meaningful clock): untimed
        self._last_errors = {}
        t0 = time.perf_counter()
        timings = {c: self._bench(*args, config=c, **kwargs) for c in pruned}
        self.confirm_timings = {}
        if self._do_bench is None:
            self.confirm_timings = _confirm_close_calls(timings, lambda c: self._bench(*args, config=c, **kwargs),
                                                        knobs.autotuning.confirm)
            for c, again in self.confirm_timings.items():
                timings[c] = builtins.min(timings[c], again, key=_rank)
        self.bench_time = time.perf_counter() - t0
        self.configs_timings = timings
        if knobs.autotuning.print:
            for c, t in timings.items():
                print(f"  {c}: {t} ms" + (" (timed twice)" if c in self.confirm_timings else ""))
        best = builtins.min(timings, key=lambda c: _rank(timings[c]))
        first = _rank(timings[best])[0]
        if first == float("inf"):
            errs = "; ".join(f"[{c}] {e}" for c, e in list(self._last_errors.items())[:3])
            raise OutOfResources(0, 0, f"every config of {self.__name__} failed to compile or launch ({errs})")
        self._store_disk(path, key, best, {c: _rank(t)[0] for c, t in timings.items()})
        if knobs.autotuning.print:
            print(f"Autotuning kernel {self.__name__} with config {best} finished after {self.bench_time:.2f}s; "
                  f"best config selected: {best};")
        if not interpret:
            self._chosen(all_args, best, timings, self.bench_time, cache_hit=False)
        self._tell_listener(key, best, timings, self.bench_time, cache_hit=False)
        # like Triton: leave reset_to_zero buffers zeroed for the real launch
        full = {**nargs, **kwargs, **best.all_kwargs()}
        self.pre_hook(full, reset_only=True)
        return best

    # -- the autotuning listeners (knobs.autotuning; plug-ins load at the first event) ----------
    def _event(self, all_args: dict) -> dict:
        return {"fn": self.base_fn, "key": self._key(all_args), "configs": self.configs, "autotuner": self,
                "key_args": {k: _key_part(all_args[k]) for k in self.keys if k in all_args}}

    def _from_listeners(self, all_args: dict) -> Config | None:
        """A `before_tuning` listener's config for this key (the user's own object when it is one
        of the configs, with its pre_hook), or None."""
        hooks = plugins.autotuning()
        if self.base_fn is None or not hooks.before_tuning:
            return None
        cfg = hooks.before_tuning.first(**self._event(all_args))
        if cfg is None:
            return None
        return next((c for c in self.configs if c == cfg), cfg)

    def _launch_missed(self, all_args: dict, args: tuple, kwargs: dict) -> None:
        hooks = plugins.autotuning()
        if self.base_fn is not None and hooks.launch_missed:
            hooks.launch_missed(**self._event(all_args), args=args, kwargs=kwargs)

    def _chosen(self, all_args: dict, best: Config, timings: dict, duration: float, cache_hit: bool) -> None:
        hooks = plugins.autotuning()
        if self.base_fn is not None and hooks.config_chosen:
            hooks.config_chosen(**self._event(all_args), best_config=best, configs_timings=timings,
                                duration=duration, cache_hit=cache_hit)

    def _tell_listener(self, key, best: Config, timings, duration, cache_hit: bool) -> None:
        """Triton's `knobs.autotuning.listener(fn, key, best_config, configs_timings, duration,
        cache_hit)`, after a tuning or a disk-cache hit."""
        listener = knobs.autotuning.listener
        if listener is not None:
            listener(fn=self.base_fn, key=key, best_config=best, configs_timings=timings, duration=duration,
                     cache_hit=cache_hit)

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


def _rank(timing) -> tuple:
    """How configs compare, as Triton's `min(timings, key=timings.get)` does: do_bench's
    [median, 20th, 80th percentile] in that order (a tie on the median goes to the lower 20th
    percentile), or a single number from a user's do_bench."""
    return tuple(timing) if isinstance(timing, (list, tuple)) else (timing,)


# A config whose first median is within this fraction of the best is a contender worth a second
# look: with Triton's protocol, bench/matmul.py saw the autotuner keep a tile ~10% slower than
# another it had timed (fp16 4096x4096x512, a ~40 us GEMM, tuned right after a heavy GEMM load):
# drift between configs (clocks, a busy host) can exceed the gap between the best tiles.
_CONFIRM_WITHIN = 0.25


def _confirm_close_calls(timings: dict, bench: Callable, top: int) -> dict:
    """Deliberately beyond Triton (which times each config once): the `top` fastest configs whose
    median came within _CONFIRM_WITHIN of the best are timed again, in the reverse of their first
    order, so that a config that drift penalised in the first pass is compared once more under
    other conditions. Returns config -> the second timings (empty when fewer than two contend)."""
    if top < 2:
        return {}
    ranked = sorted((c for c in timings if _rank(timings[c])[0] != float("inf")), key=lambda c: _rank(timings[c]))
    if len(ranked) < 2:
        return {}
    best = _rank(timings[ranked[0]])[0]
    close = [c for c in ranked[:top] if _rank(timings[c])[0] <= best * (1 + _CONFIRM_WITHIN)]
    if len(close) < 2:
        return {}
    order = [c for c in timings if c in close]
    return {c: bench(c) for c in reversed(order)}


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


__all__ = ["Config", "Autotuner", "autotune", "Heuristics", "heuristics"]
