"""tuner/first_run.py: the first config, sent before its trial exists, paired with its trial."""
from __future__ import annotations

from types import SimpleNamespace

from tuner.first_run import FirstRun
from tuner.results import InFlight, Result

CONFIG = {"BLOCK_SIZE": 256, "num_warps": 4}


def _answer() -> Result:
    return Result(-1, dict(CONFIG), "ok", [1.0, 1.1])


def test_an_answer_before_its_trial_waits_for_it_and_is_recorded_with_its_number():
    f = FirstRun()
    inflight = f.sent(dict(CONFIG), task=None)
    assert f.takes({"num_warps": 4, "BLOCK_SIZE": 256}) and not f.takes({"BLOCK_SIZE": 512, "num_warps": 4})
    r = _answer()
    assert f.answered(inflight, r) is True            # kept: nothing to record yet
    assert f.unrecorded() == 0 and f.take_ready() == []
    trial = SimpleNamespace(number=7)
    f.attach(trial)
    assert f.unrecorded() == 1                        # asked, not recorded: the budget counts it
    assert f.take_ready() == [(r, trial)] and r.number == 7
    assert f.unrecorded() == 0 and f.inflight is None and not f.takes(CONFIG)


def test_a_trial_before_the_answer_makes_it_an_ordinary_answer():
    f = FirstRun()
    inflight = f.sent(dict(CONFIG), task=None)
    f.attach(SimpleNamespace(number=3))
    assert inflight.trial.number == 3 and not f.takes(CONFIG)
    assert f.answered(inflight, _answer()) is False  # recorded by the engine as any answer
    assert f.inflight is None and f.take_ready() == [] and f.unrecorded() == 0


def test_another_configs_answer_is_not_the_first_runs():
    f = FirstRun()
    f.sent(dict(CONFIG), task=None)
    other = InFlight(SimpleNamespace(number=1), {"BLOCK_SIZE": 512, "num_warps": 4})
    assert f.answered(other, Result(1, other.config, "ok", [2.0])) is False
    assert f.takes(CONFIG)                            # still waiting for its own answer and trial
