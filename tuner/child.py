"""The child process that owns the CUDA context (or, in interpret mode, the CPU interpreter).

It builds the kernel's arguments once per job, then, per request, runs a config once to check its outputs
against the reference and measures it. The parent (tuner.engine) kills it on a hang and restarts it
after a fault; a fault that poisons the CUDA context makes the child answer and exit by itself.

Requests (dicts over the pipe; None = exit):
    {"op": "run", "config": {...}, "compiled": CompiledKernel | None, "measure": True,
     "share_reference": True}   (False: a reference made from this run is kept here, not saved for others)
        -> {"status": ok|compile-error|runtime-error|wrong-result|invalid, "samples_ms": [...],
            "method": ..., "error": str | None, "reference": bool}
    {"op": "remeasure", "items": [{"config":…, "compiled":…}, …], "rounds": R, "rep_scale": s, "part": p}
        -> {"samples_ms": [[...], …], "errors": [str | None, …]}   (each measurement `rep_ms` × s long;
           s defaults to 2 / R: one round of a re-measurement in rounds passes the whole one's; a part
           p < 1 of a round also takes p of the warm-up and of the minimum and maximum repeats)
    {"op": "release"}   (the job is over: free its inputs, reference and loaded modules)
        -> {"released": bool, "rss": bytes, "device_free": bytes, "device_held": bytes (GPU)}; not released: the child exits (not fit for another job)
    {"op": "init", "init": {...}}   (a warm child, idle since start-up or a release: a new job)
        -> the ready message, as a child started with the job's init sends it first
"""
from __future__ import annotations

import gc
import math
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from jobspec.config import config_key, split_config
from jobspec.device import interpreter_properties
from jobspec.model import JobSpec
from tuner.isolation import EXITING, IDLE


def classify(exc: BaseException) -> str:
    import compiler

    if isinstance(exc, compiler.OutOfResources):
        return "invalid"
    if isinstance(exc, compiler.CompilationError):
        return "compile-error"
    return "runtime-error"


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 4000 else text[:4000] + " …"


def early_context(index: int) -> tuple[threading.Thread, dict[str, Any]] | None:
    """Create the device's primary CUDA context in a thread while the main thread imports torch
    (seconds): plain ctypes calls into libcuda, which release the GIL. torch (the runtime API) and
    the compiler's driver module then find the primary context active. The retain is kept for the
    process's life, like torch's. Any failure here is ignored (torch creates the context as before)."""
    info: dict[str, Any] = {}

    def work() -> None:
        t = time.perf_counter()
        try:
            import ctypes

            lib = ctypes.CDLL("libcuda.so.1")
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            if lib.cuInit(0) == 0 and lib.cuDeviceGet(ctypes.byref(dev), index) == 0:
                if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0:
                    info["context"] = ctx.value
        except Exception as exc:  # noqa: BLE001 - torch will create it
            info["error"] = repr(exc)
        finally:
            info["seconds"] = time.perf_counter() - t

    thread = threading.Thread(target=work, name="blocktune-cuda-context", daemon=True)
    thread.start()
    return thread, info


def _laps(into: dict[str, float]):
    """`lap(name)`: the seconds since the previous lap (or since now), stored in `into` under `name`."""
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        into[name] = round(now - t, 3)
        t = now

    return lap


class Runtime:
    """What a child keeps from one job to the next: the imports (the compiler; torch when asked for),
    the device's CUDA context and data plane, or the interpreter. A warm child (a service worker's,
    tuner/standby.py) builds it before any job is known; a job's Bench then builds only its inputs
    and reference on top."""

    def __init__(self, init: dict[str, Any]):
        self.startup: dict[str, float] = {}
        lap = _laps(self.startup)
        self.interpret = bool(init.get("interpret"))
        self.index = index = int(init.get("device", 0))
        # no torch unless asked for: the GPU runs on the driver API and numpy (tuner/device_plane.py),
        # interpret mode on numpy arrays in this process (tuner/host_data.py), except for bfloat16
        # tensors, which numpy lacks: those take torch's CPU tensors (imported with such a job)
        self.use_torch = False if self.interpret else bool(init.get("torch"))
        self.torch = None
        self.plane = None        # tuner.device_plane.DriverPlane (GPU without torch); per job: HostPlane
        self.device = None       # torch's device (GPU with torch)
        context = early_context(index) if self.use_torch else None
        if self.interpret:
            os.environ["BLOCKTUNE_INTERPRET"] = "1"
        if self.use_torch:
            import torch

            self.torch = torch
            lap("import_torch")
        if context is not None:
            thread, info = context
            thread.join(60)
            if "seconds" in info:
                self.startup["context_thread"] = round(info["seconds"], 3)
        import compiler

        self.compiler = compiler
        if self.interpret:
            import compiler.interpreter  # noqa: F401 - what every interpreted launch runs on
        lap("import_compiler")
        if self.interpret:
            self.props = interpreter_properties()
        else:
            from compiler.runtime import driver

            if self.use_torch:
                if not self.torch.cuda.is_available():
                    raise RuntimeError("no CUDA GPU visible to torch")
                self.torch.cuda.set_device(index)
                self.device = self.torch.device("cuda", index)
            else:
                from tuner.device_plane import DriverPlane

                self.plane = DriverPlane(index)
            self.props = dict(driver.device_properties(index))
            self.props["target"] = driver.target_for_device(index)
        lap("device")          # CUDA context, device properties

    def torch_for_cpu_tensors(self):
        """torch, imported now if no job needed it yet (interpret mode's bfloat16 tensors)."""
        if self.torch is None:
            try:
                import torch
            except ImportError as exc:
                raise RuntimeError("bfloat16 tensors in interpret mode need torch (numpy has no bfloat16): "
                                   "install torch, or tune this spec on a GPU") from exc
            self.torch = torch
        return self.torch


class Bench:
    """One job in the child: its spec, inputs and reference outputs, on a `Runtime`."""

    def __init__(self, init: dict[str, Any], runtime: Runtime):
        self.startup: dict[str, float] = {}     # where the start-up went (the tuner's timeline shows it)
        lap = _laps(self.startup)
        self.runtime = runtime
        self.interpret = runtime.interpret
        self.index = runtime.index
        self.compiler = runtime.compiler
        self.props = runtime.props
        self.spec = spec = JobSpec.model_validate(init["spec"])
        use_torch = runtime.use_torch or (
            self.interpret and any(a.is_tensor and a.tensor.dtype == "bfloat16" for a in spec.args))
        self.torch = runtime.torch_for_cpu_tensors() if use_torch and self.interpret else runtime.torch
        if self.interpret and use_torch:
            lap("import_torch")
        self.workdir = Path(init["workdir"])
        # inputs differ between the two data planes (numpy's generator vs torch's): each keeps its own,
        # and numpy's per version of the values it makes (a resumed job's older reference is unfit)
        if use_torch:
            self.reference_path = self.workdir / "reference.pt"
        else:
            from tuner.host_data import INPUTS_VERSION

            self.reference_path = self.workdir / f"reference-v{INPUTS_VERSION}.npz"
        self.plane = runtime.plane
        self.device = runtime.device
        self.timer = None
        if self.interpret:
            if use_torch:
                self.device = self.torch.device("cpu")
            else:
                from tuner.host_data import HostPlane

                self.plane = HostPlane()
        elif use_torch:
            from tuner.measure import CudaTimer

            self.timer = CudaTimer(self.device, flush_l2=spec.measure.flush_l2)
        else:
            from tuner.device_plane import DriverTimer

            self.timer = DriverTimer(self.plane, flush_l2=spec.measure.flush_l2)
        lap("device")          # the L2-flush buffer
        self.fn = self.compiler.jit_from_source(spec.kernel.source, spec.kernel.name)
        self._check_arguments()
        lap("kernel")          # the kernel's source parsed (the inputs follow)
        if self.plane is not None:
            self.args, self.tensors, self.env = self.plane.make_args(spec)
        else:
            from tuner.data import build_args

            self.args, self.tensors, self.env = build_args(spec, self.device)
        to_reset = set(spec.check.outputs) | {a.name for a in spec.args if a.is_tensor and a.tensor.inplace}
        self.initial = {n: self._clone(self.tensors[n]) for n in to_reset}
        self.inplace = [a.name for a in spec.args if a.is_tensor and a.tensor.inplace]
        self.launchers: dict[str, Any] = {}
        self.loaded: list[Any] = []             # the compiled kernels this job loaded (unloaded on release)
        self.cubin_error: str | None = None     # a cubin the driver refused: PTX from then on
        self.timing: dict[str, float] = {}
        lap("inputs")
        self.reference = self._load_reference()
        self.reference_provisional = False      # made here from a config not to be shared (_check)
        lap("reference")

    def release(self) -> None:
        """Free what this job holds on the device (its buffers, the L2-flush buffer, the modules it
        loaded), so that a warm child's next job starts from the bare runtime."""
        self.sync()
        if self.plane is not None and hasattr(self.plane, "free"):
            buffers = [*self.tensors.values(), *self.initial.values()]
            if self.timer is not None and getattr(self.timer, "flush_buf", None) is not None:
                buffers.append(self.timer.flush_buf)
            self.plane.free(buffers)
        if not self.interpret:
            from tuner.device_plane import unload_modules

            unload_modules(self.loaded, self.index)
        self.args = self.tensors = self.initial = self.reference = None
        self.launchers.clear()
        self.loaded.clear()
        self.timer = None
        if self.torch is not None and not self.interpret:
            self.torch.cuda.empty_cache()

    # --- set-up -----------------------------------------------------------------------------

    def _check_arguments(self) -> None:
        arg_names = list(getattr(self.fn, "arg_names", []) or [])
        constexprs = list(getattr(self.fn, "constexpr_names", []) or [])
        if not arg_names:
            return
        runtime = [n for n in arg_names if n not in constexprs]
        spec_names = [a.name for a in self.spec.args]
        if runtime != spec_names:
            raise ValueError(f"the spec's args {spec_names} do not match the kernel's runtime arguments {runtime}")
        missing = [c for c in constexprs if c not in self.spec.space and c not in self.spec.constants]
        if missing:
            raise ValueError(f"constexpr(s) {', '.join(missing)} have no value: add them to space or constants")

    def _load_reference(self) -> dict[str, Any] | None:
        if not self.spec.check.outputs:
            return {}
        if self.spec.reference is not None:
            return self._run_reference_kernel()
        return self._reference_file()

    def _reference_file(self) -> dict[str, Any] | None:
        """The reference outputs saved in the job's work directory (by this job's earlier run, or by
        another worker of it on this host), or None."""
        if not self.reference_path.exists():
            return None
        if self.plane is not None:
            import numpy as np

            with np.load(self.reference_path) as ref:
                return {k: ref[k] for k in ref.files if k in self.spec.check.outputs}
        ref = self.torch.load(self.reference_path, map_location=self.device)
        return {k: v for k, v in ref.items() if k in self.spec.check.outputs}

    def _snapshot(self) -> dict[str, Any]:
        """The checked outputs as they are now (host arrays, except on torch's plane)."""
        if self.plane is not None:
            return {n: self.plane.host(self.tensors[n]) for n in self.spec.check.outputs}
        return {n: self.tensors[n].clone() for n in self.spec.check.outputs}

    def _save_reference(self) -> None:
        tmp = self.reference_path.with_name(f"{self.reference_path.stem}.{os.getpid()}.tmp{self.reference_path.suffix}")
        if self.plane is not None:
            import numpy as np

            with open(tmp, "wb") as f:
                np.savez(f, **self.reference)
        else:
            self.torch.save({k: v.cpu() for k, v in self.reference.items()}, tmp)
        os.replace(tmp, self.reference_path)   # atomic: workers sharing a job may read it

    def _run_reference_kernel(self) -> dict[str, Any]:
        ref = self.spec.reference
        fn = self.fn if ref.source is None and ref.name == self.spec.kernel.name else \
            self.compiler.jit_from_source(ref.source or self.spec.kernel.source, ref.name)
        constexprs, num_warps, num_stages = split_config(ref.config)
        env = {**self.env, **self.spec.constants, **ref.config}
        from jobspec.safe_eval import safe_eval

        grid_exprs = ref.grid if ref.grid is not None else self.spec.grid
        grid = tuple(int(safe_eval(g, env)) for g in grid_exprs)
        self.reset()
        fn[grid](*self.args, num_warps=num_warps, num_stages=num_stages, **self._launch_kw(),
                 **{**self.spec.constants, **constexprs})
        self.sync()
        return self._snapshot()

    # --- running ----------------------------------------------------------------------------

    def sync(self) -> None:
        if self.plane is not None:
            self.plane.sync()
        elif not self.interpret:
            self.torch.cuda.synchronize()

    def _clone(self, t):
        return self.plane.clone(t) if self.plane is not None else t.clone()

    def _copy(self, dst, src) -> None:
        if self.plane is not None:
            self.plane.copy(dst, src)
        else:
            dst.copy_(src)

    def _launch_kw(self) -> dict[str, Any]:
        return dict(self.plane.launch_kw) if self.plane is not None else {}

    def reset(self) -> None:
        for n, t in self.initial.items():
            self._copy(self.tensors[n], t)

    def reset_inplace(self) -> None:
        for n in self.inplace:
            self._copy(self.tensors[n], self.initial[n])

    def load(self, compiled) -> None:
        """Load the module now (timed), falling back to the PTX when the driver refuses the cubin
        (e.g. a ptxas newer than the driver)."""
        t = time.perf_counter()
        index = self.index
        try:
            try:
                compiled.load(index)
            except Exception as exc:  # noqa: BLE001
                if not compiled.asm.get("cubin") or getattr(exc, "call", None) != "cuModuleLoadData":
                    raise
                self.cubin_error = describe(exc)
                compiled.asm.pop("cubin", None)
                compiled.load(index)
            self.loaded.append(compiled)
        finally:
            self.timing["load_s"] = self.timing.get("load_s", 0.0) + time.perf_counter() - t

    def launcher(self, config: dict[str, Any], compiled) :
        key = config_key(config)
        if key in self.launchers:
            # already built (and its module loaded) for this config: the re-measurement sends the
            # finalists' kernels again, which need no second load
            return self.launchers[key]
        grid = self.spec.grid_for(config, self.env)
        constexprs, num_warps, num_stages = split_config(config)
        if compiled is not None:
            if not self.interpret:
                self.load(compiled)
            args = self.args
            if self.plane is not None:
                stream = self.plane.stream_handle

                def run():
                    # on the plane's stream: the one its events time and its graphs capture
                    compiled.launch(grid, args, stream)
            else:
                current_stream = self.torch.cuda.current_stream

                def run():
                    # on torch's current stream: the one CUDA events time and CUDA graphs capture
                    compiled.launch(grid, args, current_stream().cuda_stream)
        else:
            kernel = self.fn[grid]
            args = self.args
            kw = {**self.spec.constants, **constexprs, "num_warps": num_warps, "num_stages": num_stages,
                  **self._launch_kw()}

            def run():
                kernel(*args, **kw)
        self.launchers[key] = run
        return run

    def context_ok(self) -> bool:
        """After an error on the GPU: is the CUDA context still usable?"""
        if self.plane is not None:
            return self.plane.context_ok()
        if self.interpret:
            return True
        try:
            self.torch.cuda.synchronize()
            x = self.torch.ones(4, device=self.device)
            return float((x + 1).sum()) == 8.0
        except Exception:
            return False

    def measure(self, run, *, rep_scale: float = 1.0, part: float = 1.0):
        """`part` < 1: a part of a re-measurement round (tuner/final_rounds.py) takes that part of
        everything a measurement costs, the warm-up and the repeat bounds too, so that parts of a
        round split between workers add up to one round, also for a kernel long enough that
        `min_reps` decides."""
        m = self.spec.measure

        def reps(n: int) -> int:
            return max(1, math.ceil(n * part))

        if self.interpret:
            from tuner.measure import measure_cpu

            return measure_cpu(run, self.reset_inplace if self.inplace else None, warmup_ms=0.0,
                               rep_ms=m.rep_ms * rep_scale, min_reps=reps(min(m.min_reps, 3)),
                               max_reps=reps(min(m.max_reps, 5)))
        return self.timer.measure(run, self.reset_inplace if self.inplace else None, warmup_ms=m.warmup_ms * part,
                                  rep_ms=m.rep_ms * rep_scale, min_reps=reps(m.min_reps), max_reps=reps(m.max_reps),
                                  cuda_graph=m.cuda_graph, cuda_graph_below_us=m.cuda_graph_below_us)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        if req["op"] == "run":
            return self.run_config(req["config"], req.get("compiled"), measure=req.get("measure", True),
                                   share_reference=req.get("share_reference", True))
        if req["op"] == "remeasure":
            rounds = req.get("rounds", 5)
            return self.remeasure(req["items"], rounds, req.get("rep_scale") or 2.0 / max(1, rounds),
                                  req.get("part", 1.0))
        if req["op"] == "ping":
            return {"pong": True}
        raise ValueError(f"unknown op {req['op']!r}")

    def run_config(self, config: dict[str, Any], compiled, *, measure: bool = True,
                   share_reference: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "ok", "samples_ms": [], "error": None, "reference": False}
        t_run = time.perf_counter()
        lap = _laps(self.timing.setdefault("first_run_parts", {}))   # where a long first run went (per request)
        try:
            run = self.launcher(config, compiled)
            lap("launcher")
            self.reset()
            lap("reset")
            run()
            lap("launch")
            self.sync()
            lap("sync")
        except Exception as exc:  # noqa: BLE001 - every failure of a config is a result
            out.update(status=classify(exc), error=describe(exc))
            if not self.context_ok():
                out["_fatal"] = True
            return out
        finally:
            self.timing["first_run_s"] = self.timing.get("first_run_s", 0.0) + time.perf_counter() - t_run
        if self.spec.check.outputs:
            t_check = time.perf_counter()
            try:
                why = self._check(out, share=share_reference)
            finally:
                self.timing["check_s"] = self.timing.get("check_s", 0.0) + time.perf_counter() - t_check
            if why:
                out.update(status="wrong-result", error=why)
                return out
        if measure:
            t = time.perf_counter()
            try:
                m = self.measure(run)
                self.timing["measure_s"] = self.timing.get("measure_s", 0.0) + time.perf_counter() - t
            except Exception as exc:  # noqa: BLE001
                out.update(status="runtime-error", error=describe(exc))
                if not self.context_ok():
                    out["_fatal"] = True
                return out
            out["samples_ms"] = m.samples_ms
            out["method"] = m.method
        return out

    def _check(self, out: dict[str, Any], share: bool = True) -> str | None:
        """The outputs against the reference (the first correct run's, kept as the reference): why
        they differ, or None. `share`: a reference made here is saved for the job's other workers
        on this host (not when it comes from a config they should not trust: engine.py _run_request)."""
        if self.reference is None or (self.reference_provisional and self.reference_path.exists()):
            # another worker of this job on this host may have saved one since the job started
            # here (a worker joining a job): the outputs of the config it trusted, checked against;
            # they replace a reference made here from a config the others were not to trust
            saved = self._reference_file()
            if saved is not None or self.reference is None:
                self.reference, self.reference_provisional = saved, False
            out["reference"] = True
            if self.reference is None:
                self.reference = self._snapshot()
                self.reference_provisional = not share
                if share:
                    self._save_reference()
                return None
        from tuner.data import compare, tolerances

        for n in self.spec.check.outputs:
            atol, rtol = tolerances(self.spec, n)
            if self.plane is not None:
                why = self.plane.compare(self.tensors[n], self.reference[n], atol, rtol)
            else:
                why = compare(self.tensors[n], self.reference[n], atol, rtol)
            if why:
                return f"{n}: {why}"
        return None

    def remeasure(self, items: list[dict[str, Any]], rounds: int, rep_scale: float,
                  part: float = 1.0) -> dict[str, Any]:
        """Interleaved rounds over the finalists, so that drift (clocks, temperature) hits them alike."""
        samples: list[list[float]] = [[] for _ in items]
        errors: list[str | None] = [None] * len(items)
        runs = []
        for i, item in enumerate(items):
            try:
                runs.append(self.launcher(item["config"], item.get("compiled")))
            except Exception as exc:  # noqa: BLE001
                runs.append(None)
                errors[i] = describe(exc)
        for _ in range(rounds):
            for i, run in enumerate(runs):
                if run is None or errors[i]:
                    continue
                try:
                    samples[i].extend(self.measure(run, rep_scale=rep_scale, part=part).samples_ms)
                except Exception as exc:  # noqa: BLE001
                    errors[i] = describe(exc)
                    if not self.context_ok():
                        return {"samples_ms": samples, "errors": errors, "_fatal": True}
        return {"samples_ms": samples, "errors": errors}


def _start_job(conn, init: dict[str, Any], runtime: Runtime, entered: float) -> Bench | None:
    """Build the job's Bench and send the ready message (or the error: the parent then kills us)."""
    try:
        bench = Bench(init, runtime)
    except BaseException as exc:  # noqa: BLE001
        try:
            conn.send({"error": describe(exc), "traceback": traceback.format_exc()})
        except (BrokenPipeError, OSError):
            pass
        return None
    conn.send({"ready": True, "props": bench.props, "pid": os.getpid(), "has_reference": bench.reference is not None,
               "entered_at": entered, "ready_at": time.time(), "startup": {**runtime.startup, **bench.startup}})
    runtime.startup = {}      # a warm child's next job did not pay for the runtime
    return bench


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def child_main(conn, init: dict[str, Any]) -> None:
    """Entry point of the spawned child. With a spec in `init` it starts that job at once; without
    one (a warm child, tuner/standby.py) it builds the runtime, says it is idle and waits for a
    job's {"op": "init", "init": {...}}. After {"op": "release"} the job's state is freed and the
    child waits for the next job."""
    entered = time.time()
    try:
        runtime = Runtime(init)
    except BaseException as exc:  # noqa: BLE001
        try:
            conn.send({"error": describe(exc), "traceback": traceback.format_exc()})
        finally:
            return
    bench: Bench | None = None
    if init.get("spec") is not None:
        bench = _start_job(conn, init, runtime, entered)
        if bench is None:
            return
    else:
        conn.send({IDLE: True, "pid": os.getpid(), "entered_at": entered, "ready_at": time.time(),
                   "startup": runtime.startup})
        runtime.startup = {}      # paid before any job: not the first job's start-up
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req is None:
            # nothing to flush (the reference outputs are already on disk): skip the interpreter's
            # slow teardown of torch's thread pools and of the CUDA context
            conn.close()
            os._exit(0)
        if req.get("op") == "init" and bench is None:
            bench = _start_job(conn, req["init"], runtime, time.time())
            if bench is None:
                return
            continue
        if req.get("op") == "release" and bench is not None:
            try:
                bench.release()
                ok = runtime.interpret or (runtime.plane.context_ok() if runtime.plane is not None else True)
            except BaseException:  # noqa: BLE001 - not fit for another job: the parent replaces us
                ok = False
            bench = None
            gc.collect()
            resp = {"released": ok, "rss": _rss_bytes()}
            if ok and not runtime.interpret:
                from tuner.device_plane import free_memory, held_bytes

                resp["device_free"] = free_memory()
                resp["device_held"] = held_bytes()
            conn.send(resp)
            if not ok:
                conn.close()
                os._exit(3)
            continue
        if bench is None:
            conn.send({"status": "runtime-error", "error": f"no job in this child for {req.get('op')!r}",
                       "samples_ms": []})
            continue
        t = time.perf_counter()
        bench.timing = {}
        try:
            resp = bench.handle(req)
        except BaseException as exc:  # noqa: BLE001
            resp = {"status": "runtime-error", "error": describe(exc), "samples_ms": []}
        if isinstance(resp, dict):
            resp["timing"] = {**bench.timing, "handle_s": time.perf_counter() - t}
            if bench.cubin_error:
                resp["cubin_error"] = bench.cubin_error
        fatal = resp.pop("_fatal", False)
        if fatal:
            resp[EXITING] = True     # the parent waits for the exit
        conn.send(resp)
        if fatal:
            conn.close()
            os._exit(3)
