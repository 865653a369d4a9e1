"""The tuning service at the compiler's autotuning events (compiler.knobs.autotuning).

  before_tuning   with BLOCKTUNE_SERVICE_URL set: the service's best config for this kernel, key
                  and GPU model (client.lookup.get_best_config; per kernel and key, a miss too, is
                  asked once), which the kernel then runs without tuning;
  launch_missed   with BLOCKTUNE_SUBMIT_ON_MISS=1 (and BLOCKTUNE_TOKEN): the launch as a tuning job
                  (miss_job.py), submitted in a background thread once per key and process; a
                  launch that cannot be described costs one warning per kernel, pointing at it;
  config_chosen   with BLOCKTUNE_PUBLISH=1: a config the kernel tuned itself, sent to the service.

Nothing here raises into a launch, and a launch never waits for the service beyond its lookup
timeout. client.lookup (httpx) is imported only once a service URL is set.
"""
from __future__ import annotations

import atexit
import json
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable

from client.settings import settings
from compiler import Config, knobs
from compiler.runtime import driver
from jobspec.device import INTERPRETER_MODEL

_COMPILER_PACKAGES = ("compiler", "client")


class _KernelState:
    """What the plug-in remembers about one kernel (an Autotuner, or a @jit(autotune_key) kernel)."""

    def __init__(self):
        self.lookups: dict = {}         # canonical key → (kwargs, num_warps, num_stages) | None
        self.submitted: set = set()     # tuning keys already described to the service
        self.warned = False             # the "not submitting" warning was given


_states: "weakref.WeakKeyDictionary[Any, _KernelState]" = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()


def state_of(kernel) -> _KernelState:
    with _states_lock:
        st = _states.get(kernel)
        if st is None:
            st = _states[kernel] = _KernelState()
        return st


def forget(kernel) -> None:
    """Drop what the plug-in remembers about `kernel` (as a new process would start)."""
    with _states_lock:
        _states.pop(kernel, None)


def _service_url() -> str | None:
    return settings.service_url


def _lookup():
    from client import lookup  # noqa: PLC0415 - httpx and pydantic load only once a service URL is set
    return lookup


def _tuned_for() -> str | None:
    """The GPU model whose configs this process runs: the current device's, or in interpret mode
    the interpreter's (jobspec.device); None on a machine without a GPU that does not interpret."""
    return _gpu_model()[0] or (INTERPRETER_MODEL if knobs.runtime.interpret else None)


def _gpu_model() -> tuple[str | None, str | None]:
    """(GPU model name, compute capability "9.0") of the current device, or (None, None)."""
    if not driver.has_gpu():
        return None, None
    try:
        p = driver.device_properties(driver.current_device())
        return p["name"], f"{p['capability'][0]}.{p['capability'][1]}"
    except Exception:
        return None, None


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel, called from the caller of this function, that names the first
    frame outside the compiler and this plug-in: the user's launch."""
    f, level = sys._getframe(2), 2
    while f is not None:
        mod = f.f_globals.get("__name__") or ""
        internal = mod.split(".")[0] in _COMPILER_PACKAGES or f.f_code.co_filename.startswith("<blocktune")
        if not internal:
            return level
        f, level = f.f_back, level + 1
    return 2


# ---- the lookup ---------------------------------------------------------------------------------

_lookup_warned = False


def service_lookup(jit_fn, key: dict, cache: dict):
    """(kwargs, num_warps, num_stages) from the service for this kernel/key/GPU, or None.
    Cached per key in `cache` (also negative answers); never raises."""
    global _lookup_warned
    if not _service_url():
        return None
    try:
        ck = json.dumps(key, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None
    if ck in cache:
        return cache[ck]
    result = None
    try:
        ans = _lookup().get_best_config(jit_fn.fingerprint, jit_fn.__name__, key, _tuned_for(),
                                        compute_capability=_gpu_model()[1])
        if ans:
            cfg = ans.get("config", ans) if isinstance(ans, dict) else None
            if isinstance(cfg, dict):
                c = Config.from_dict(cfg)
                result = (c.kwargs, c.num_warps, c.num_stages)
    except Exception as e:  # noqa: BLE001 - the service must never break a launch
        if not _lookup_warned:
            warnings.warn(f"blocktune service lookup failed ({e}); tuning locally", RuntimeWarning, stacklevel=3)
            _lookup_warned = True
    cache[ck] = result
    return result


def before_tuning(*, fn, key, key_args, configs, autotuner, **_) -> Config | None:
    if not _service_url():
        return None
    got = service_lookup(fn, key_args, state_of(autotuner or fn).lookups)
    if got is None:
        return None
    kw, nw, ns = got
    return Config(kw, num_warps=nw or 4, num_stages=ns or 3)


# ---- submissions after a miss run in the background: a launch never waits for the answer -------

_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()
_drain_registered = False


def _submit_timeout() -> float:
    return settings.submit_timeout_s


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


def _warn_submit(st: _KernelState, name: str, why: str) -> None:
    if not st.warned:
        st.warned = True
        warnings.warn(f"blocktune: not submitting a tuning job for {name} ({why}); tuning locally",
                      RuntimeWarning, stacklevel=_user_stacklevel())


def launch_missed(*, key, autotuner, args, kwargs, **_) -> None:
    """With BLOCKTUNE_SUBMIT_ON_MISS=1, after a lookup miss: submit this launch as a tuning job (in
    the background, once per key and process). Never raises; warns once per kernel."""
    if autotuner is None or not _service_url():
        return
    lookup = _lookup()
    if not lookup.submit_on_miss_enabled():
        return
    st = state_of(autotuner)
    if key in st.submitted:
        return
    st.submitted.add(key)
    model = _tuned_for()
    if model is None:
        return
    if not lookup.has_token():
        _warn_submit(st, autotuner.__name__, "BLOCKTUNE_SUBMIT_ON_MISS=1 needs BLOCKTUNE_TOKEN (an API token) to "
                                             "submit jobs")
        return
    # miss_job checks the spec with jobspec's pydantic model: loaded only when a launch is described
    from .miss_job import CannotDescribe, job_spec  # noqa: PLC0415

    try:
        spec = job_spec(autotuner, args, kwargs)
    except CannotDescribe as exc:
        _warn_submit(st, autotuner.__name__, str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - describing a launch must never break it
        _warn_submit(st, autotuner.__name__, f"{type(exc).__name__}: {exc}")
        return
    _submit_in_background(lookup.submit_on_miss, spec, model)


# ---- publishing ---------------------------------------------------------------------------------

def config_chosen(*, fn, key_args, configs, best_config, configs_timings, cache_hit, **_) -> None:
    """With BLOCKTUNE_PUBLISH=1, send a config the kernel tuned itself (not one from its disk
    cache) back to the service."""
    if cache_hit or not _service_url():
        return
    lookup = _lookup()
    if not lookup.publish_enabled():
        return
    model, cc = _gpu_model()
    if model is None:
        return

    def ms(c):
        t = configs_timings.get(c)
        return t[0] if isinstance(t, list) else t
    default = ms(configs[0]) if configs[0] in configs_timings else None
    best = best_config
    flat = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}  # the service's form
    lookup.publish(fn.fingerprint, fn.__name__, key_args, model, cc, flat, ms(best),
                   default if default not in (None, float("inf")) else None)
