"""tuner/relay.py: the next request reaches the child the moment it answers, however long the caller
takes to read that answer; an answer that is an error sends nothing and hands the staged request
back. A real child process (tests/tuner/isolation_targets.py echo_child) behind a real Measurement."""
from __future__ import annotations

import time

import pytest
from isolation_targets import echo_child

from tuner.isolation import ChildCrashed, IsolatedChild
from tuner.measurement import Measurement
from tuner.relay import ChildRelay
from tuner.run_context import RunContext


@pytest.fixture
def relay(tmp_path):
    """A relay over a Measurement whose child is a real echo process."""
    ctx = RunContext(f"sqlite:///{tmp_path / 'relay.db'}", 1)
    m = Measurement(ctx, interpret=True)
    m.child = IsolatedChild(echo_child, {}, start_timeout=60)
    m.child.start()
    m.ready = True
    relay = ChildRelay(m, timeout_s=30)
    try:
        yield relay
    finally:
        relay.close()
        m.child.close()
        ctx.close()


def test_the_staged_request_goes_when_the_child_answers(relay):
    relay.send({"op": "stamp", "s": 0.3})
    assert relay.stage({"op": "stamp", "s": 0.0})
    assert not relay.stage({"op": "stamp", "s": 0.0}), "one request staged at a time"
    time.sleep(1.5)                   # the caller is busy (the database) long after the answer
    read_at = time.time()
    first, second = relay.answer(), relay.answer()
    assert first.error is None and first.sent_next and first.unsent is None
    assert second.error is None and not second.sent_next
    # the child got the second request right after answering the first, not when it was read
    assert second.resp["received_at"] - first.resp["answered_at"] < 0.5
    assert second.resp["received_at"] < read_at - 0.5
    assert not relay.stage({"op": "stamp", "s": 0.0}), "nothing in the child: the caller sends"
    assert relay.answer(timeout=0.05) is None


def test_an_error_sends_nothing_and_gives_the_staged_request_back(relay):
    relay.send({"op": "exit", "code": 9, "after_s": 0.3})
    staged = {"op": "stamp", "s": 0.0}
    assert relay.stage(staged)
    answer = relay.answer()
    assert isinstance(answer.error, ChildCrashed)
    assert not answer.sent_next and answer.unsent is staged
    assert relay.m.outcome(answer.resp, answer.error)[0] == "runtime-error"
    relay.send(staged)                # the caller sends it itself: the child starts again
    again = relay.answer()
    assert again.error is None and "received_at" in again.resp


def test_unstage_takes_back_what_was_not_sent(relay):
    relay.send({"op": "stamp", "s": 0.5})
    assert relay.stage({"op": "stamp", "s": 0.0})
    assert relay.unstage()
    answer = relay.answer()
    assert not answer.sent_next and answer.unsent is None
    assert not relay.unstage()
