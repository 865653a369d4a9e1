"""The compile queue: configs compiled ahead of the GPU in a pool of processes (tuner.compile_step), for
the device the run measures on, and how far ahead of it the run asks (the lookahead)."""
from __future__ import annotations

import logging
from typing import Any

from jobspec.config import split_config
from tuner.isolation import CompilePool, CompilerCrashed, CompileTask
from tuner.measurement import Measurement
from tuner.run_context import RunContext
from tuner.space import config_key
from tuner.standby import Standby

log = logging.getLogger("blocktune.tuner")


class CompileQueue:
    def __init__(self, ctx: RunContext, device: Measurement, *, workers: int | None = None,
                 standby: Standby | None = None):
        self.ctx = ctx
        self.device = device
        # a service worker's pool outlives the run (its processes have imported the compiler already)
        self.borrowed = standby is not None
        self.pool = standby.pool if standby is not None else CompilePool(workers)
        self.compiled: dict[str, Any] = {}           # config_key → CompiledKernel (or None in interpret mode)
        self.early: dict[str, CompileTask] = {}      # config_key → compiles submitted before the study opened

    @property
    def workers(self) -> int:
        return self.pool.workers

    def start(self) -> None:
        """Start every compile process now (imports, while the child starts too); in GPU mode also
        build the native launcher there (a C compile, ~0.5 s on a fresh cache) off the child's path."""
        from tuner.compile_step import prebuild_launcher, warm_up

        tl = self.ctx.timeline
        tl.details["compile_workers"] = self.pool.workers
        tl.details["pool_warm"] = self.borrowed
        left = [self.pool.workers]

        def one_done(_f) -> None:     # in the executor's thread: a float written once
            left[0] -= 1
            if left[0] == 0:
                tl.mark("pool_ready")

        for f in self.pool.start_workers(warm_up, not self.device.interpret):
            f.add_done_callback(one_done)
        if not self.device.interpret:
            def built(f) -> None:
                if not f.cancelled() and f.exception() is None:
                    tl.add("launcher_build", f.result())

            self.pool.submit_untracked(prebuild_launcher).add_done_callback(built)

    def prefetch(self, configs: list[dict[str, Any]]) -> None:
        """Compile configs the run expects to ask for first (a fresh study's known-good configs),
        before the study is open: `submit` of one of them takes its compile, under way already."""
        self.compile_ahead(configs)
        self.ctx.timeline.details["early_compiles"] = len(self.early)

    def compile_ahead(self, configs: list[dict[str, Any]]) -> None:
        """Submit the compiles of configs needed later (not yet asked, or finalists another worker
        ran); `submit` and `has` take them up."""
        for config in configs:
            key = config_key(config)
            if key not in self.early and key not in self.compiled:
                self.early[key] = self._submit(config)

    def submit(self, config: dict[str, Any]) -> CompileTask:
        task = self.early.pop(config_key(config), None)
        return task if task is not None else self._submit(config)

    def _submit(self, config: dict[str, Any]) -> CompileTask:
        from tuner.compile_step import compile_config
        from tuner.data import signature, specialization

        spec, device = self.ctx.spec, self.device
        constexprs, num_warps, num_stages = split_config(config)
        constexprs = {**spec.constants, **constexprs}
        env = spec.scalar_env()
        div16, one = specialization(spec, env)
        tl = self.ctx.timeline
        tl.mark("first_compile")
        task = self.pool.submit(compile_config, spec.kernel.source, spec.kernel.name, signature(spec, env),
                                constexprs, num_warps, num_stages, device.target, div16, one,
                                int(device.props.get("max_shared_memory") or 0) or None, device.interpret,
                                device.ptxas)
        task.submitted_s = sent = tl.since_start()
        if task.future is not None:
            label = "/".join(str(v) for v in config.values())

            def came_back(_f) -> None:
                # in the pool's thread: when the start's first compile came back (against when it went
                # out and when the first run went: the start's compile latency), and each compile's
                # wall time, so that the slowest are told with when they went out
                tl.mark("first_compiled")
                tl.note("compile_walls", at=sent, s=tl.since_start() - sent, config=label)

            task.future.add_done_callback(came_back)
        return task

    def result(self, task: CompileTask) -> dict[str, Any]:
        """The compile's outcome (compile_step.compile_config's dict), waited for."""
        if task.outcome is not None:
            return task.outcome            # read before (engine.py stages compiled configs)
        tl = self.ctx.timeline
        t0 = tl.since_start()
        try:
            with tl.phase("compile_wait"):
                res = self.pool.result(task, timeout=self.ctx.spec.measure.compile_timeout_s)
        except CompilerCrashed as exc:
            res = {"status": "compile-error", "error": str(exc)}
        except TimeoutError as exc:
            res = {"status": "timeout", "error": f"timeout: {exc}"}
        else:
            self._account(res)
        waited = tl.since_start() - t0
        if waited > 0.005:
            tl.note("compile_waits", at=t0, s=waited, oldest=t0 - (task.submitted_s or t0))
        task.outcome = res
        return res

    def _account(self, res: dict[str, Any]) -> None:
        tl = self.ctx.timeline
        tl.add("compile_cpu", res.get("compile_s") or 0.0)
        tl.add("ptxas", res.get("ptxas_s") or 0.0)
        if res.get("status") == "ok":
            tl.count("compiled")
            asm = getattr(res.get("compiled"), "asm", None) or {}
            if asm.get("cubin"):
                tl.count("cubins")
        if res.get("cubin_error"):
            tl.count("ptxas_failures")
            if tl.counts["ptxas_failures"] == 1:
                log.warning("ptxas (%s) failed on a config, its PTX is used instead: %s", self.device.ptxas,
                            str(res["cubin_error"])[:500])

    def remember(self, config: dict[str, Any], compiled) -> None:
        self.compiled[config_key(config)] = compiled

    def has(self, config: dict[str, Any]) -> bool:
        """Whether the config's compiled kernel is at hand, without waiting: run here, or its compile
        submitted ahead (`compile_ahead`) and done."""
        key = config_key(config)
        task = self.early.get(key)
        if key not in self.compiled and task is not None and self.done(task):
            res = self.result(task)
            if res.get("status") == "ok":        # a failed one stays: not submitted again
                del self.early[key]
                self.remember(config, res.get("compiled"))
        return key in self.compiled

    def compiled_for(self, config: dict[str, Any]):
        """The config's compiled kernel, compiled now if it is not at hand; None if it fails."""
        return self.compiled_for_all([config])[0]

    def compiled_for_all(self, configs: list[dict[str, Any]]) -> list[Any]:
        """`compiled_for` of each config, the missing ones compiled side by side in the pool (the
        finalists another worker sharing the job measured were not compiled here)."""
        tasks = {config_key(c): self.submit(c) for c in configs if config_key(c) not in self.compiled}
        for config in configs:
            task = tasks.pop(config_key(config), None)
            if task is not None:
                res = self.result(task)
                if res.get("status") == "ok":
                    self.remember(config, res.get("compiled"))
        return [self.compiled.get(config_key(c)) for c in configs]

    @staticmethod
    def done(task: CompileTask) -> bool:
        """Whether the compile has finished (its result can be had without waiting)."""
        f = task.future
        return f is not None and f.done() and not task.lost()

    def forget(self) -> None:
        """Drop what was compiled (for a device the run no longer measures on)."""
        self.compiled.clear()
        self.early.clear()

    def wants(self, n: int, *, sampler_kind: str, queued: int) -> bool:
        """Ask another config? `n` are asked and not yet recorded (compiling, compiled, in the child).

        The spec's `lookahead` when given. Otherwise: while known-good configs are queued (`queued`:
        the spec's list, the previous winner, the default), up to 2 per compile worker, so that the
        pool compiles all of them at once while the GPU child starts; then 2 ahead for TPE (each
        result informs its next proposal) and `auto_depth` for samplers that learn nothing from
        results."""
        if self.ctx.spec.lookahead is not None:
            return n < self.ctx.spec.lookahead
        base = 2 if sampler_kind == "tpe" else self.auto_depth()
        return n < base or (queued > 0 and n < max(base, 2 * self.pool.workers))

    def auto_depth(self) -> int:
        """How far ahead a sampler that learns nothing from results is asked: two configs per
        compile worker. Such a sampler loses nothing by proposing early, and the second config of
        each worker hides a slow compile (1-2 s for a 2-warp matmul tile on the H100 host) behind
        the others' runs: at one per worker, such a compile asked mid-search could end the search
        after everything else."""
        return max(2, 2 * self.pool.workers)

    def close(self) -> None:
        if self.borrowed:
            self.pool.drop_pending()
        else:
            self.pool.close()
