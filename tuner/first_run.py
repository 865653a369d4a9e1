"""The job's first config, sent to the GPU child before its trial exists (tuner/engine.py).

A fresh job's start used to be: open the Optuna study (0.25-0.41 s on PostgreSQL on the H100 hosts:
the study, its attributes, the known-good configs enqueued), ask the first trial (a few more
round trips, more for a worker sharing the job), and only then send the first config — though its
compile, submitted before the study opened, came back at 0.26-0.39 s and the child was ready at
0.13 s. On 2 x H100 the first run went out at 0.46-0.81 s.

Now the study opens on a thread of its own while the run's thread waits for the child and for the
first of the configs compiled ahead (a known-good one for the worker that claimed the job, a drawn
one for a worker joining it: tuner/study.py first_configs / first_draws) and sends it at once. The
config's trial comes later, from the ordinary asks: the enqueued known-good trial of that config, or
the joining worker's sampler's draw. `FirstRun` pairs them: a trial asked for the config in the
child takes it (the engine's `_settle`, after the trial's claim), and an answer that comes before
its trial waits for it. A config whose trial is never asked here (another worker asked it first,
the budget refused the claim, the run stopped) leaves its answer unrecorded: the run's only loss is
that config's time in the child.
"""
from __future__ import annotations

from typing import Any

from tuner.results import InFlight, Result
from tuner.space import config_key


class FirstRun:
    def __init__(self) -> None:
        self.inflight: InFlight | None = None      # the config sent before its trial existed
        self._answer: Result | None = None        # its result, come before its trial
        self._ready: list[tuple[Result, Any]] = []   # results whose trial came after them: to record

    def sent(self, config: dict[str, Any], task: Any) -> InFlight:
        self.inflight = InFlight(None, config, task=task)
        return self.inflight

    def takes(self, config: dict[str, Any]) -> bool:
        """Whether a trial just asked for `config` is the one the child has run or is running."""
        f = self.inflight
        return f is not None and f.trial is None and config_key(f.config) == config_key(config)

    def attach(self, trial: Any) -> None:
        """`trial` is the first run's (after its claim): an answer that came already is to record."""
        assert self.inflight is not None
        self.inflight.trial = trial
        if self._answer is not None:
            self._answer.number = trial.number
            self._ready.append((self._answer, trial))
            self._answer = None
            self.inflight = None

    def answered(self, inflight: InFlight, r: Result) -> bool:
        """The child's answer to `inflight`: True when it is the first run's, come before its trial
        (kept for it; the engine records nothing now)."""
        if inflight is not self.inflight:
            return False
        if inflight.trial is not None:       # its trial came first: recorded as any answer
            self.inflight = None
            return False
        self._answer = r
        return True

    def unrecorded(self) -> int:
        """1 while the first run's trial is asked and its result not yet recorded: a trial the budget's
        count (asked and not recorded) must include. Before its trial is asked the first run is no
        trial: the asks must go on until one takes it, whatever the lookahead."""
        return 1 if self._ready else 0

    def take_ready(self) -> list[tuple[Result, Any]]:
        """The first run's result with its trial, once both are there (at most once)."""
        ready, self._ready = self._ready, []
        return ready
