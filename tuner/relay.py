"""The GPU child's next config, sent the moment it answers the current one: a thread of the run's
that waits for the child's answers during the search (tuner/engine.py).

Without it the child waits for the run's thread after every answer: that thread reads the answer only
when it is done with what it was doing (asking Optuna, storing a result, taking the job's lock:
tens of milliseconds of database round trips, more when another worker shares the job and holds
the lock), then sends the next config. The run now stages the next config (compiled, and certain to
be run whatever the current one's result: engine.py `_surely_continues`) while the current one is in
the child; this thread receives the answer, sends the staged config at once and hands the answer
over. The child's work is the same (one request at a time, each checked and timed as before); only
the wait between requests goes.

One request is in the child at a time, as before: an answer that is an error (a timeout, a dead
child) sends nothing; the run gets its staged config back and decides (tuner/isolation.py restarts
the child on the next send).
"""
from __future__ import annotations

import collections
import threading
from typing import Any

from tuner.isolation import ChildCrashed, ChildTimeout
from tuner.measurement import Measurement

__all__ = ["Answer", "ChildRelay"]


class Answer:
    """The child's answer to a request: the response or the error receiving it raised, and whether
    the staged request went to the child after it (else `unsent` is that request, or None)."""

    def __init__(self, resp: Any, error: BaseException | None, sent_next: bool, unsent: Any):
        self.resp, self.error, self.sent_next, self.unsent = resp, error, sent_next, unsent


class ChildRelay:
    def __init__(self, measurement: Measurement, timeout_s: float):
        self.m = measurement
        self.timeout_s = timeout_s
        self._cv = threading.Condition()
        self._outstanding = 0                # requests in the child (0 or 1) the thread is to receive
        self._staged: Any = None             # the request to send when the child answers
        self._answers: collections.deque[Answer] = collections.deque()
        self._thread: threading.Thread | None = None
        self._closed = False

    def send(self, request: dict[str, Any]) -> None:
        """Send a request to the idle child now (Measurement.send: may raise ChildTimeout or
        ChildCrashed); its answer comes from `answer()`."""
        with self._cv:
            assert self._outstanding == 0 and not self._answers, "the child has a request already"
        self.m.send(request)
        with self._cv:
            self._outstanding = 1
            self._cv.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"child-relay-{self.m.ctx.job_id}", daemon=True)
            self._thread.start()

    def stage(self, request: dict[str, Any]) -> bool:
        """The request to send the moment the child answers the one it has. False when it has none
        (it answered already, or nothing was sent): then the caller sends it itself, or keeps it."""
        with self._cv:
            if self._outstanding == 0 or self._answers or self._staged is not None:
                return False
            self._staged = request
            return True

    def unstage(self) -> bool:
        """Take the staged request back (the search stops); False when it was sent already."""
        with self._cv:
            if self._staged is None:
                return False
            self._staged = None
            return True

    def waiting(self) -> bool:
        """Whether an answer waits for the run's thread (which then has a config to stage: the
        child runs the one staged before, if any, and has nothing after it)."""
        with self._cv:
            return bool(self._answers)

    def answer(self, timeout: float | None = None) -> Answer | None:
        """The next answer, waited for; None if none came within `timeout` seconds."""
        with self._cv:
            if not self._answers:
                if self._closed:
                    raise RuntimeError("the child relay is closed")
                self._cv.wait(timeout)
                if not self._answers:
                    return None
            return self._answers.popleft()

    def close(self) -> None:
        """Stop the thread (after the search: the final re-measurement talks to the child itself).
        The run has read every answer by then; a thread still waiting on the child (a run that
        failed mid-request) is left to end with the child, which the run closes next."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None

    def _work(self) -> None:
        while True:
            with self._cv:
                while self._outstanding == 0 and not self._closed:
                    self._cv.wait()
                if self._outstanding == 0:
                    return
            resp, error = None, None
            try:
                resp = self.m.receive(self.timeout_s, phase=None)
            except (ChildTimeout, ChildCrashed) as exc:
                error = exc
            except BaseException as exc:  # noqa: BLE001 - handed to the run's thread
                error = exc
            with self._cv:
                staged, self._staged = self._staged, None
                sent = False
                if error is None and staged is not None and not self._closed and self.m.child_alive():
                    try:
                        self.m.send(staged)
                        sent = True
                    except (ChildTimeout, ChildCrashed):
                        sent = False     # the run sends it again (the child restarts) or records the failure
                self._outstanding = 1 if sent else 0
                self._answers.append(Answer(resp, error, sent, None if sent else staged))
                self._cv.notify_all()
