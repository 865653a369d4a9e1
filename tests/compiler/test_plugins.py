"""compiler.plugins: distributions that declare an entry point in `blocktune.compiler_plugins` are
registered at the first autotuning event of a process, and take part through knobs.autotuning.

Each test installs a real distribution (a dist-info directory with entry_points.txt) on the path
of a fresh Python process and launches an @autotune kernel there in interpret mode."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]

KERNEL = textwrap.dedent('''
    import json, sys, warnings
    import numpy as np
    import compiler as triton
    import compiler.language as tl
    from compiler import plugins

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def double(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    assert not plugins._loaded            # importing the compiler loads no plug-in
    x = np.ones(100, np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        double[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100)
    assert (x == 2).all()
    print(json.dumps({"loaded": plugins._loaded, "best": double.best_config.kwargs,
                      "warnings": [str(m.message) for m in w if "plug-in" in str(m.message)]}))
''')


def _install(site: pathlib.Path, name: str, module_text: str, entry: str) -> None:
    (site / f"{name}.py").write_text(textwrap.dedent(module_text))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[blocktune.compiler_plugins]\n{name} = {entry}\n")


def _run(tmp_path: pathlib.Path) -> dict:
    script = tmp_path / "launch.py"
    script.write_text(KERNEL)
    env = dict(os.environ, BLOCKTUNE_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path / "site")]),
               PLUGIN_LOG=str(tmp_path / "events.jsonl"))
    env.pop("BLOCKTUNE_SERVICE_URL", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_installed_plugin_answers_before_tuning(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "demo_plugin", '''
        import json, os

        def before_tuning(*, fn, key_args, configs, **_):
            with open(os.environ["PLUGIN_LOG"], "a") as f:
                f.write(json.dumps({"event": "before_tuning", "kernel": fn.__name__, "key": key_args}) + "\\n")
            return configs[1]

        def register(knobs):
            knobs.autotuning.before_tuning.add(before_tuning)
    ''', "demo_plugin:register")
    out = _run(tmp_path)
    assert out == {"loaded": True, "best": {"BLOCK": 64}, "warnings": []}
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0] == {"event": "before_tuning", "kernel": "double", "key": {"n": 100}}


def test_a_broken_plugin_costs_one_warning(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "broken_plugin", '''
        def register(knobs):
            raise RuntimeError("cannot start")
    ''', "broken_plugin:register")
    out = _run(tmp_path)
    assert out["loaded"] and out["best"] == {"BLOCK": 16}          # the first config, as without plug-ins
    assert len(out["warnings"]) == 1 and "broken_plugin" in out["warnings"][0] and "cannot start" in out["warnings"][0]
