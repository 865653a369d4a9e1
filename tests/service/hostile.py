"""Hostile kernel sources for the submission tests: the ones issue 9 names, and two that stay within
the compiler's own bounds but burn CPU or memory (only the checker's process limits stop those)."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "add.yaml").read_text())


def with_body(*lines: str, constants: str = "") -> dict:
    """The add spec whose kernel runs `lines` (kernel-body statements) before its store, with
    `constants` (module-level lines) after the imports."""
    spec = copy.deepcopy(SPEC)
    source = spec["kernel"]["source"].replace("import triton.language as tl\n", "import triton.language as tl\n" + constants)
    head, store = source.rsplit("    tl.store(", 1)
    spec["kernel"]["source"] = head + "".join(f"    {ln}\n" for ln in lines) + "    tl.store(" + store
    return spec


# name → (spec, what the 422's reason says)
ISSUE_SOURCES = {
    "huge power": (with_body("X = 9**9**9"), "9 ** 387420489 would have about"),
    "huge static_range": (with_body("for i in tl.static_range(10**7):", "    mask = mask & mask"),
                          "tl.static_range of 10000000 iterations is over the limit of 4096"),
    "static_range over a huge constant": (with_body("for i in tl.static_range(STEPS):", "    mask = mask & mask",
                                                    constants="STEPS = tl.constexpr(4294967296)\n"),
                                          "of 4294967296 iterations is over the limit of 4096"),
    "huge string": (with_body("s = 'a' * 10**9"), "str * 1000000000 would have 1000000000 characters"),
    "deep nesting": (with_body("x = " + "-" * 30_000 + "1"), "nests too deeply to parse"),
    "deep expression": (with_body("x = " + "[" * 150 + "1" + "]" * 150), "nests more than 100 levels deep"),
}

# ~33,000 compile-time membership tests of 10,000 strings of 1,000 characters: many seconds of CPU
# within every bound of the compiler (each test is one step)
CPU_BURNER = with_body("t = ('a' * 1000,) * 10000", "u = 'a' * 999 + 'b'",
                       "for i in tl.static_range(4096):", "    for j in tl.static_range(4096):",
                       "        found = u in t")
# 8,000 compile-time strings of 100,000 characters: 800 MB
MEMORY_HOG = with_body("t = ()", "for i in tl.static_range(4000):", "    t = t + (f'{i:>99999}', f'{i:<99999}')")


def checker_pids(parent: int) -> list[int]:
    """The kernel checker processes started by process `parent`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"service.kernel_check" in cmd:
            out.append(int(entry))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (the ones still there)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")
