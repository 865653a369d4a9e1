"""The isolation machinery: timeouts kill, crashes are reported, restarts work, the pool survives."""
from __future__ import annotations

import time

import pytest

from isolation_targets import broken_start, compile_like, echo_child, imported
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


def test_compile_processes_run_below_the_workers_cpu_priority(monkeypatch):
    """Compiles run ahead of the GPU; the child's checks and the parent's bookkeeping are each
    trial's critical path: on a host shared by several workers the compile processes yield to them
    (BLOCKTUNE_COMPILE_NICE below the worker's priority; 0 keeps it)."""
    import os

    from tuner.compile_step import warm_up

    base = os.getpriority(os.PRIO_PROCESS, 0)
    for step, want in (("3", min(19, base + 3)), ("0", base)):
        monkeypatch.setenv("BLOCKTUNE_COMPILE_NICE", step)
        pool = CompilePool(workers=1)
        try:
            assert all(f.result(120) for f in pool.start_workers(warm_up))
            assert pool.submit_untracked(os.getpriority, os.PRIO_PROCESS, 0).result(60) == want
        finally:
            pool.close(kill=True)


def test_the_default_pool_is_this_workers_share_of_the_hosts_cpus(monkeypatch):
    """BLOCKTUNE_HOST_WORKERS workers on a host (one per GPU) divide its CPUs: each pool is its
    share less one (for the GPU child), between 1 and 8."""
    from tuner import isolation

    for cpus, host_workers, want in ((16, 1, 8), (16, 2, 7), (16, 4, 3), (2, 1, 1), (4, 8, 1), (64, 2, 8)):
        monkeypatch.setattr(isolation, "usable_cpus", lambda: cpus)
        monkeypatch.setenv("BLOCKTUNE_HOST_WORKERS", str(host_workers))
        monkeypatch.delenv("BLOCKTUNE_COMPILE_WORKERS", raising=False)
        assert isolation.default_compile_workers() == want, (cpus, host_workers)
    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "5")
    assert CompilePool().workers == 5            # an explicit count wins


def test_a_gpu_pools_warm_up_loads_the_code_generator_and_llvm():
    """A GPU run's first compile would import the code generator and llvmlite and initialize
    LLVM's NVPTX target (on every worker's first job's critical path): the warm-up does it instead;
    interpret mode's front end needs none of it."""
    from tuner.compile_step import warm_up

    for backend in (False, True):
        pool = CompilePool(workers=1)
        try:
            assert pool.start_workers(warm_up, backend)[0].result(120)
            got = [pool.submit_untracked(imported, m).result(60) for m in ("compiler.backend.nvptx", "llvmlite.ir")]
            assert got == [backend, backend]
        finally:
            pool.close(kill=True)
