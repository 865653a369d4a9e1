"""`blocktune tune`, `blocktune best`, `blocktune gpus`."""
from __future__ import annotations

import json

import pytest
import yaml

from kernels import example
from service.cli import main

HAS_GPU = False
try:
    from compiler.runtime import driver

    HAS_GPU = driver.has_gpu()
except Exception:  # noqa: BLE001
    pass


def _spec_file(tmp_path, spec) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


@pytest.mark.skipif(HAS_GPU, reason="checks the message shown without a GPU")
def test_tune_without_gpu_says_so(tmp_path, sqlite_url, capsys):
    rc = main(["tune", _spec_file(tmp_path, example("vector_add")), "--db", sqlite_url])
    out = capsys.readouterr().out
    assert rc == 2 and "No CUDA GPU found" in out and "--interpret" in out


def test_tune_reports_spec_errors(tmp_path, sqlite_url, capsys):
    spec = example("vector_add")
    spec["grid"] = ["cdiv(n_elements, BLOCK)"]
    rc = main(["tune", _spec_file(tmp_path, spec), "--db", sqlite_url, "--interpret"])
    out = capsys.readouterr().out
    assert rc == 2 and "invalid job spec" in out and "unknown name(s) BLOCK" in out
    spec = example("vector_add")
    spec["budget"] = {}
    spec["args"][0]["tensor"]["dtype"] = "complex64"
    rc = main(["tune", _spec_file(tmp_path, spec), "--db", sqlite_url, "--interpret"])
    out = capsys.readouterr().out
    assert rc == 2 and "trials and/or seconds" in out and "unknown dtype" in out


def test_tune_interpret_then_best(tmp_path, sqlite_url, capsys):
    spec = example("vector_add", N=1500)
    spec["space"] = {"BLOCK_SIZE": [256, 512, 1024], "num_warps": [2, 4]}
    rc = main(["tune", _spec_file(tmp_path, spec), "--db", sqlite_url, "--interpret", "--trials", "4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "best BLOCK_SIZE=" in out and "trials: 4 ok" in out
    rc = main(["best", "--kernel", "add_kernel", "--key", "n_elements=1500", "--db", sqlite_url, "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(rows) == 1 and rows[0]["problem_key"] == {"n_elements": 1500}
    assert rows[0]["config"]["BLOCK_SIZE"] in (256, 512, 1024) and rows[0]["median_ms"] > 0
    rc = main(["best", "--kernel", "add_kernel", "--key", "n_elements=7", "--db", sqlite_url])
    assert rc == 1 and "no best config" in capsys.readouterr().out


def test_gpus_lists_local_and_stored(sqlite_url, capsys):
    rc = main(["gpus", "--db", sqlite_url])
    out = capsys.readouterr().out
    assert rc == 0
    assert ("GPUs on this machine" in out) == HAS_GPU


def test_tune_refuses_what_the_api_refuses(tmp_path, sqlite_url, capsys):
    """`blocktune tune` stores a job only after the submission checks the API runs
    (tuner.submission.prepare_submission): here an argument the kernel does not have."""
    import sqlalchemy as sa

    from db.engine import make_engine
    from db.models import Job

    spec = example("vector_add")
    spec["args"].insert(3, {"name": "alpha", "value": 2.0})
    rc = main(["tune", _spec_file(tmp_path, spec), "--db", sqlite_url, "--interpret"])
    out = capsys.readouterr().out
    assert rc == 2 and "job spec rejected" in out and "args: not arguments of kernel add_kernel: alpha" in out
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as c:
            assert c.scalar(sa.select(sa.func.count()).select_from(Job)) == 0
    finally:
        engine.dispose()


def test_gpus_shows_the_cpu_interpreter_as_no_gpu(sqlite_url, capsys):
    from db.engine import make_engine, session_factory
    from db.migrate import upgrade
    from db.repo import get_or_create_gpu
    from jobspec.device import interpreter_properties

    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    with session_factory(engine)() as s:
        get_or_create_gpu(s, interpreter_properties())          # as a CPU worker of an older version registered it
        get_or_create_gpu(s, {"name": "NVIDIA H100 80GB HBM3", "capability": (9, 0), "sm_count": 132,
                              "total_memory": 80 * 2**30})
        s.commit()
    engine.dispose()
    assert main(["gpus", "--db", sqlite_url]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "│" in line]
    cpu = " ".join(line for line in rows if "interpreter" in line or "(CPU)" in line)
    gpu = " ".join(line for line in rows if "H100" in line)
    assert "CPU" in cpu and "132" not in cpu and "0.0" not in cpu
    assert "9.0" in gpu and "132" in gpu
