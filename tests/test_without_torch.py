"""torch is optional: interpret mode, `blocktune tune --interpret` and a CPU worker run where it is
not installed. Each runs in a subprocess whose `import torch` fails (tests/without_torch puts a
meta-path blocker first in it and in every process it starts), as on a machine with numpy only."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKER = Path(__file__).resolve().parent / "without_torch"
SPEC = ROOT / "tests" / "service" / "data" / "add.yaml"


def _run(args: list[str], *, timeout: float = 300, returncode: int = 0) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": f"{BLOCKER}{os.pathsep}{ROOT}"}
    e.pop("BLOCKTUNE_CHILD_TORCH", None)
    p = subprocess.run([sys.executable, *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == returncode, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_the_blocker_makes_import_torch_fail():
    p = _run(["-c", textwrap.dedent("""
        try:
            import torch
        except ModuleNotFoundError as exc:
            print("blocked:", exc)
        """)])
    assert "blocked: No module named 'torch' (blocked: tests/without_torch)" in p.stdout


def test_a_kernel_runs_in_interpret_mode_over_numpy_arrays_without_torch(tmp_path):
    script = tmp_path / "softmax.py"       # @jit reads the kernel's source from its file
    script.write_text(textwrap.dedent("""
        import os, sys
        os.environ["BLOCKTUNE_INTERPRET"] = "1"
        import numpy as np
        import compiler as triton
        import compiler.language as tl

        @triton.jit
        def softmax_rows(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

        rng = np.random.default_rng(0)
        x = rng.standard_normal((37, 100), dtype=np.float32)
        out = np.full_like(x, np.nan)
        softmax_rows[(x.shape[0],)](out, x, x.shape[1], BLOCK=128)
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
        assert "torch" not in sys.modules
        print("softmax ok")
        """))
    assert "softmax ok" in _run([str(script)]).stdout


def test_tune_interpret_runs_without_torch(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    p = _run(["-m", "service.cli", "tune", str(SPEC), "--interpret", "--db", url, "--quiet"])
    assert "trials: 6 ok" in p.stdout, p.stdout
    best = _run(["-m", "service.cli", "best", "--kernel", "add_kernel", "--key", "n_elements=4096", "--db", url,
                 "--json"])
    assert '"gpu_model": "blocktune interpreter (CPU)"' in best.stdout


def test_bfloat16_in_interpret_mode_says_it_needs_torch(tmp_path):
    """numpy has no bfloat16: such a spec's interpret-mode job fails with the reason, not a crash."""
    spec = tmp_path / "add_bf16.yaml"
    spec.write_text(SPEC.read_text().replace("dtype: float32", "dtype: bfloat16"))
    p = _run(["-m", "service.cli", "tune", str(spec), "--interpret", "--db", f"sqlite:///{tmp_path / 'bf16.db'}",
              "--quiet"], returncode=1)
    assert "bfloat16 tensors in interpret mode need torch (numpy has no bfloat16)" in " ".join(p.stdout.split())


@pytest.mark.timeout(600)
def test_a_cpu_worker_finishes_a_job_without_torch(tmp_path):
    url = f"sqlite:///{tmp_path / 'worker.db'}"
    _run(["-c", textwrap.dedent(f"""
        from db.migrate import upgrade
        from tuner.submission import create_job_from_spec
        from jobspec.model import load_spec
        upgrade({url!r})
        print("job", create_job_from_spec({url!r}, load_spec({str(SPEC)!r})))
        """)])
    _run(["-m", "service.cli", "worker", "--interpret", "--server-db", url, "--exit-when-idle", "--no-join",
          "--poll", "0.2"])
    import sqlalchemy as sa

    from db.engine import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as c:
            state, done, error = c.execute(sa.text("SELECT state, trials_done, error FROM jobs")).one()
            workers = c.execute(sa.text("SELECT w.name, g.model FROM workers w JOIN gpus g ON g.id = w.gpu_id")).all()
    finally:
        engine.dispose()
    assert (state, done) == ("succeeded", 6), error
    assert [m for _, m in workers] == ["blocktune interpreter (CPU)"]
