"""The README's tuning commands, as a new user runs them: the `best --key` finds what `tune` tuned.

The commands are read from the README's "## Tuning" section; they run on the CPU interpreter
(the README's `--interpret` line) with a database of their own and a small trial budget.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jobspec.model import load_spec

ROOT = Path(__file__).resolve().parent.parent


def _tuning_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Tuning", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            argv = shlex.split(line)
            assert argv[0] == ".venv/bin/blocktune", line
            commands.append(argv[1:])
    return commands


def _key_args(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--key")


def test_the_readme_best_key_is_the_problem_key_of_its_tuning_example():
    commands = _tuning_commands()
    tunes = [c for c in commands if c[0] == "tune"]
    (best,) = [c for c in commands if c[0] == "best"]
    assert tunes and {c[1] for c in tunes} == {tunes[0][1]}       # every tune line tunes one spec
    spec = load_spec(ROOT / tunes[0][1])
    assert best[best.index("--kernel") + 1] == spec.kernel.name
    assert _key_args(best) == {k: str(v) for k, v in spec.problem_key().items()}


@pytest.mark.timeout(900)
def test_the_readme_tuning_commands_find_what_they_tuned(tmp_path):
    commands = _tuning_commands()
    (tune,) = [c for c in commands if c[0] == "tune" and "--interpret" in c]
    (best,) = [c for c in commands if c[0] == "best"]
    db = ["--db", f"sqlite:///{tmp_path / 'readme.db'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BLOCKTUNE_CACHE_DIR": str(tmp_path / "cache")}

    def blocktune(*argv: str) -> str:
        p = subprocess.run([sys.executable, "-m", "service.cli", *argv], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=840)
        assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout

    blocktune(*tune, *db, "--trials", "2", "--quiet")
    (row,) = json.loads(blocktune(*best, *db, "--json"))
    assert row["kernel"] == "softmax_kernel" and row["gpu_model"] == "blocktune interpreter (CPU)"
    assert {k: str(v) for k, v in row["problem_key"].items()} == _key_args(best)
