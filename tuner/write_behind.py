"""Database writes a run makes after a trial's result is stored, done in order on a thread of their own:
telling Optuna the result, the job's progress. The search loop goes on meanwhile (asking, sending the
next config to the GPU child): on PostgreSQL they are ~4 commits a trial (the constraint, the status,
the tell; the progress), as long as the rest of the parent's bookkeeping together.

What must be in the database before the loop goes on is written before it, by the loop: the trial's
row in tuning_trials (the budget counts it, other workers sharing the job read it). A result stored
and not yet told is a RUNNING trial with a row: it counts once against the budget, other workers
take its config for a repeat, and a run killed meanwhile tells it when the job resumes
(tuner/study.py `_resume`).

Each write is retried through database outages (RunContext.retry); any other error is kept and
raised in the run by the next `check()` or `drain()`. The run drains the writes before it reads
what they wrote (the end of the search: the elapsed time, the finalists).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from tuner.run_context import RunContext

_STOP = object()


class WriteBehind:
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], object], what: str) -> None:
        """Run `fn()` after the writes submitted before it (retried through outages as `what`)."""
        self.check()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"write-behind-{self.ctx.job_id}", daemon=True)
            self._thread.start()
        self._queue.put((fn, what))

    def check(self) -> None:
        """Raise the error a write ended with, if one did."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def drain(self) -> None:
        """Wait until every write submitted is done, then `check()`."""
        if self._thread is not None:
            self._queue.join()
        self.check()

    def close(self) -> None:
        """Stop the thread after the writes under way (a failed or stopped run: a trial left
        RUNNING with its result stored is told when the job resumes)."""
        if self._thread is None:
            return
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                break
        self._queue.put((_STOP, ""))
        self._thread.join(30)
        self._thread = None

    def _work(self) -> None:
        tl = self.ctx.timeline
        while True:
            fn, what = self._queue.get()
            try:
                if fn is _STOP:
                    return
                if self._error is None:      # after an error, nothing more: the run raises it
                    t = time.monotonic()
                    self.ctx.retry(fn, what)
                    tl.add("record_behind", time.monotonic() - t)
            except BaseException as exc:  # noqa: BLE001 - handed to the run's thread
                self._error = exc
            finally:
                self._queue.task_done()
