"""Measurement: the device a run tunes on, and the child process that runs and measures configs on it
(tuner.child: it owns the CUDA context, or the CPU interpreter in interpret mode).

The child starts first (torch or the driver, the CUDA context, the inputs: seconds); the device's
properties come from the driver in the parent meanwhile (no CUDA context), so that the study opens
and the first compiles go out before the child is ready. When the child sees other properties than
the parent did, its own are adopted (`wait_ready()` says so: the compiles are then redone).
"""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Callable

from db.repo import capability_str
from jobspec.device import interpreter_properties
from tuner.child import child_main
from tuner.isolation import ChildCrashed, ChildTimeout, IsolatedChild
from tuner.results import Result
from tuner.run_context import RunContext
from tuner.settings import tuner_settings
from tuner.standby import Standby

log = logging.getLogger("blocktune.tuner")

# what makes compiles for one device unfit for another
_COMPILE_RELEVANT = ("name", "target", "max_shared_memory", "capability")


class Measurement:
    def __init__(self, ctx: RunContext, *, device: int = 0, interpret: bool = False, standby: Standby | None = None):
        self.ctx = ctx
        self.device = device
        self.interpret = interpret
        self.standby = standby        # a service worker's warm child, taken for the run and given back
        self.child: IsolatedChild | None = None
        self.props: dict[str, Any] | None = None
        self.gpu_model = ""
        self.capability = ""
        self.target: str | None = None               # None in interpret mode
        self.ptxas: str | None = None                # the compile pool assembles cubins with it
        self.cubin_disabled: str | None = None       # why cubins are off (the child refused one)
        self.ready = False
        self.has_reference = False
        self.first_sent: float | None = None         # when the first config went to the child
        self.last_answer: float | None = None

    # --- the device ----------------------------------------------------------------------------

    def parent_props(self) -> dict[str, Any] | None:
        """The device's properties without the child: the interpreter's, or the driver's attributes
        (cuInit + cuDeviceGetAttribute: no CUDA context is created, so nothing is inherited by the
        spawned child and pool). None when the driver cannot say: then the child's are awaited."""
        if self.interpret:
            return interpreter_properties()
        try:
            from compiler.runtime import driver

            props = dict(driver.device_properties(self.device))
            props["target"] = driver.target_for_device(self.device)
            return props
        except Exception as exc:  # noqa: BLE001 - the child will tell
            log.info("device properties from the driver failed (%s); waiting for the GPU child's", exc)
            return None

    def set_props(self, props: dict[str, Any]) -> None:
        self.props = props
        self.gpu_model = str(props["name"])
        self.capability = capability_str(props["capability"])
        cap = props["capability"]
        self.target = None if self.interpret else (props.get("target") or f"sm_{cap[0]}{cap[1]}")
        self.ptxas = None
        if not self.interpret:
            from tuner.compile_step import select_ptxas

            if self.cubin_disabled is None:
                self.ptxas = select_ptxas(str(props.get("cuda_version") or ""))
        self.ctx.timeline.details["ptxas"] = self.ptxas

    # --- the child -----------------------------------------------------------------------------

    def _workdir(self) -> Path:
        import platformdirs

        ctx = self.ctx
        tag = hashlib.sha256(f"{ctx.db_url}|{ctx.study_name}|{ctx.identity}".encode()).hexdigest()[:12]
        d = Path(platformdirs.user_cache_dir("blocktune", appauthor=False)) / "jobs" / f"{ctx.study_name}-{tag}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def launch(self) -> None:
        """Spawn the child; it builds its context and the inputs while the parent opens the study and
        the pool compiles (`wait_ready` waits for it)."""
        init = {"spec": self.ctx.spec.to_json(), "interpret": self.interpret, "device": self.device,
                "workdir": str(self._workdir()), "torch": tuner_settings().child_torch}
        warm = self.standby.take_child() if self.standby is not None else None
        if warm is not None:
            self.child = warm
            warm.assign(init)       # the runtime is up: only the job's inputs and reference are built
        else:
            self.child = IsolatedChild(child_main, init, start_timeout=300)
            self.child.launch()
        self.ctx.timeline.details["child_warm"] = warm is not None

    def wait_ready(self) -> bool:
        """Wait for the child's ready message (once); adopt its device properties if the parent has
        none. True when they differ from the parent's: then what was compiled for those is unfit."""
        assert self.child is not None
        if self.ready:
            return False
        tl = self.ctx.timeline
        with tl.phase("child_wait"):
            ready = self.child.wait_ready()
        self.ready = True
        self.has_reference = bool(ready.get("has_reference"))
        launched = getattr(self.child, "launched_at", None)
        if launched is not None and ready.get("ready_at"):
            tl.add("child_start", float(ready["ready_at"]) - launched)
            tl.mark_wall("child_ready", float(ready["ready_at"]))
            detail = {"spawn": round(max(0.0, float(ready.get("entered_at", launched)) - launched), 3)}
            detail.update(ready.get("startup") or {})
            tl.details["child_start_detail"] = detail
        tl.details["child_pid"] = ready.get("pid")
        props = ready["props"]
        if self.props is None:
            self.set_props(props)
            return False
        if not any(props.get(k) != self.props.get(k) for k in _COMPILE_RELEVANT):
            return False
        log.warning("the GPU child sees device properties %s, the parent %s: compiling again for the child's",
                    {k: props.get(k) for k in ("name", "target", "max_shared_memory")},
                    {k: self.props.get(k) for k in ("name", "target", "max_shared_memory")})
        self.set_props(props)
        return True

    def ready_now(self) -> bool:
        """Whether the child has answered its start (`wait_ready` will not block), without waiting."""
        if self.ready:
            return True
        conn = getattr(self.child, "conn", None)
        try:
            return conn is not None and conn.poll(0)
        except (EOFError, OSError):
            return True           # gone: wait_ready() says so at once

    def send(self, request: dict[str, Any]) -> None:
        self.wait_ready()
        self.child.send(request)
        if self.first_sent is None:
            self.first_sent = time.monotonic()
            self.ctx.timeline.mark("first_run")

    def receive(self, timeout: float, phase: str | None = "child_wait_run") -> dict[str, Any]:
        """The child's answer; `phase`: the timeline's name for the wait (None: not counted, a
        thread other than the run's waits: tuner/relay.py)."""
        if phase is None:
            resp = self.child.receive(timeout)
        else:
            with self.ctx.timeline.phase(phase):
                resp = self.child.receive(timeout)
        self.last_answer = time.monotonic()
        self.note_timing(resp)
        return resp

    def child_alive(self) -> bool:
        return self.child is not None and self.child.alive

    def note_timing(self, resp: dict[str, Any]) -> None:
        """Where the child's time went; a cubin the driver refused turns cubins off for this run."""
        timing = resp.get("timing") or {}
        tl = self.ctx.timeline
        tl.add("child_busy", timing.get("handle_s") or 0.0)
        tl.add("child_load", timing.get("load_s") or 0.0)
        tl.add("child_measure", timing.get("measure_s") or 0.0)
        first = timing.get("first_run_s") or 0.0
        tl.add("child_first_run", first)
        # one long first run is a fixed cost on the job's path (a launcher built, a lazy load):
        # worth telling apart from many short ones
        if first > tl.details.get("first_run_longest_s", 0.0):
            tl.details["first_run_longest_s"] = round(first, 3)
            tl.details["first_run_longest_parts"] = {k: round(v, 3) for k, v in (timing.get("first_run_parts") or {}).items()}
        tl.add("child_check", timing.get("check_s") or 0.0)
        if resp.get("cubin_error") and self.cubin_disabled is None:
            self.cubin_disabled = str(resp["cubin_error"])
            self.ptxas = None
            tl.details["ptxas"] = None
            log.warning("the driver refused a cubin (%s): shipping PTX from now on", self.cubin_disabled[:500])

    def run(self, config: dict[str, Any], compiled, *, measure: bool = True) -> tuple[str, list[float], str | None]:
        """Run (and measure) one config in the child: (status, samples, error)."""
        try:
            self.send({"op": "run", "config": config, "compiled": compiled, "measure": measure})
        except ChildTimeout as exc:
            return "timeout", [], f"timeout: {exc}"
        except ChildCrashed as exc:
            return "runtime-error", [], f"the GPU process died: {exc}"
        return self.answer()

    def answer(self) -> tuple[str, list[float], str | None]:
        """The child's answer to the config sent last: (status, samples, error)."""
        try:
            resp = self.receive(self.ctx.spec.measure.timeout_s)
        except (ChildTimeout, ChildCrashed) as exc:
            return self.outcome(None, exc)
        return self.outcome(resp)

    def outcome(self, resp: dict[str, Any] | None, error: BaseException | None = None
                ) -> tuple[str, list[float], str | None]:
        """(status, samples, error) of the child's answer to a run request, or of the error receiving
        it raised."""
        if isinstance(error, ChildTimeout):
            return "timeout", [], f"timeout: {error}"
        if isinstance(error, ChildCrashed):
            return "runtime-error", [], f"the GPU process died: {error}"
        if error is not None:
            raise error
        assert resp is not None
        if resp.get("reference"):
            self.has_reference = True
        return resp["status"], list(resp.get("samples_ms") or []), resp.get("error")

    def restore_reference(self, results: list[Result], compiled_for: Callable[[dict[str, Any]], Any]) -> None:
        """A resumed job whose reference outputs are gone: re-run its first good configs to get them."""
        spec = self.ctx.spec
        if self.has_reference or not spec.check.outputs or spec.reference is not None:
            return
        ok = sorted((r for r in results if r.status == "ok"), key=lambda r: r.number)
        for r in ok[:3]:
            status, _, _ = self.run(r.config, compiled_for(r.config), measure=False)
            if status == "ok" and self.has_reference:
                return

    def remeasure_round(self, items: list[dict[str, Any]], rep_scale: float, part: float = 1.0) -> dict[str, Any]:
        """Measure `items` ({config, compiled}) once each, interleaved, every measurement `rep_ms` ×
        `rep_scale` long: one round, or the `part` of one, of the final re-measurement
        (tuner/final_rounds.py).
        {"samples_ms", "errors"}; a child that dies or hangs raises ChildError."""
        with self.ctx.timeline.phase("remeasure"):
            self.send({"op": "remeasure", "items": items, "rounds": 1, "rep_scale": rep_scale, "part": part})
            resp = self.child.receive(self.ctx.spec.measure.timeout_s * len(items) + 60)
        self.last_answer = time.monotonic()     # a round in the search is work, not a gap (engine.py child_gaps)
        self.note_timing(resp)
        return resp

    def close(self) -> None:
        if self.standby is not None:
            self.standby.give_back(self.child)
        elif self.child is not None:
            self.child.close()
        self.child = None
