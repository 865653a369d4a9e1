"""Trivial child programs for testing the isolation machinery itself (tuner/isolation.py).

They stand in for the GPU child only in tests/tuner/test_isolation.py; the real child is
tuner.child.child_main, exercised by the interpret-mode tuning tests.
"""
from __future__ import annotations

import os
import signal
import time


def echo_child(conn, init):
    conn.send({"ready": True, "pid": os.getpid(), "init": init})
    while True:
        req = conn.recv()
        if req is None:
            return
        op = req.get("op")
        if op == "sleep":
            time.sleep(req["s"])
            conn.send({"slept": req["s"]})
        elif op == "stamp":
            received = time.time()
            time.sleep(req["s"])
            conn.send({"received_at": received, "answered_at": time.time()})
        elif op == "exit":
            time.sleep(req.get("after_s", 0.0))
            os._exit(req.get("code", 7))
        elif op == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif op == "answer-then-exit":
            conn.send({"last": True, "_exiting": True})
            os._exit(3)
        else:
            conn.send({"echo": req})


def broken_start(conn, init):
    raise RuntimeError("cannot start")


def compile_like(x):
    if x == "crash":
        os._exit(11)   # what an LLVM fatal error looks like from outside
    time.sleep(0.05)
    return x * 2


def compile_hangs(x):
    if x == "hang":
        time.sleep(3600)
    time.sleep(0.05)
    return x * 3


def imported(name: str) -> bool:
    """Whether module `name` is imported in this (pool) process."""
    import sys

    return name in sys.modules
