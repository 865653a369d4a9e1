"""The isolation machinery: timeouts kill, crashes are reported, restarts work, the pool survives."""
from __future__ import annotations

import time

import pytest

from isolation_targets import broken_start, compile_like, echo_child
from tuner.isolation import ChildCrashed, ChildTimeout, CompilePool, CompilerCrashed, IsolatedChild


def test_call_timeout_crash_and_restart():
    child = IsolatedChild(echo_child, {"x": 1}, start_timeout=60)
    ready = child.start()
    try:
        assert ready["init"] == {"x": 1}
        first_pid = ready["pid"]
        assert child.call({"op": "hi"}, timeout=10) == {"echo": {"op": "hi"}}

        t0 = time.monotonic()
        with pytest.raises(ChildTimeout):
            child.call({"op": "sleep", "s": 30}, timeout=1.0)
        assert time.monotonic() - t0 < 10
        assert not child.alive                       # killed, not left hanging

        # the next call restarts it transparently
        assert child.call({"op": "hi"}, timeout=10) == {"echo": {"op": "hi"}}
        assert child.ready["pid"] != first_pid and child.restarts == 1

        with pytest.raises(ChildCrashed) as info:
            child.call({"op": "exit", "code": 7}, timeout=10)
        assert info.value.exitcode == 7

        with pytest.raises(ChildCrashed, match="SIGSEGV"):
            child.call({"op": "segv"}, timeout=10)

        # an answer written just before the child exits is still delivered
        assert child.call({"op": "answer-then-exit"}, timeout=10) == {"last": True}
        assert child.call({"op": "sleep", "s": 0.01}, timeout=10) == {"slept": 0.01}
    finally:
        child.close()
    assert not child.alive


def test_child_that_cannot_start():
    child = IsolatedChild(broken_start, None, start_timeout=60)
    with pytest.raises(ChildCrashed):
        child.start()


def test_compile_pool_survives_a_crashing_worker():
    pool = CompilePool(workers=2)
    try:
        tasks = [pool.submit(compile_like, x) for x in (1, 2, "crash", 3, 4)]
        results = []
        for t in tasks:
            try:
                results.append(pool.result(t, timeout=60))
            except CompilerCrashed:
                results.append("crashed")
        assert results == [2, 4, "crashed", 6, 8]
        assert pool.result(pool.submit(compile_like, 5), timeout=60) == 10
    finally:
        pool.close()


def test_compile_pool_survives_a_hanging_compile():
    from isolation_targets import compile_hangs

    pool = CompilePool(workers=2)
    try:
        tasks = [pool.submit(compile_hangs, x) for x in ("hang", 1, 2)]
        with pytest.raises(TimeoutError):
            pool.result(tasks[0], timeout=2)
        assert [pool.result(t, timeout=60) for t in tasks[1:]] == [3, 6]
    finally:
        pool.close()
