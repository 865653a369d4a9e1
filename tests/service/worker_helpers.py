"""Worker processes for tests: started as a user starts them (`blocktune worker`), or paused in
the middle of a job (pausable_worker.py); jobs submitted through the API; what they recorded."""
from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa
import yaml

from db.engine import make_engine
from db.models import Job, Trial
from svc_helpers import ROOT, make_token

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "add.yaml").read_text())
INTERP = "blocktune interpreter (CPU)"


def start_worker(url: str, name: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--server-db", url, "--interpret",
                             "--name", name, "--poll", "0.2", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def start_pausable_worker(url: str, name: str, pause_after: int, tmp_path: Path, *extra: str):
    """A worker process whose tuner pauses once it has recorded `pause_after` trials of a job
    (tests/service/pausable_worker.py); returns (process, paused file, resume file)."""
    paused, resume = tmp_path / f"{name}.paused", tmp_path / f"{name}.resume"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, str(Path(__file__).parent / "pausable_worker.py"), "--db", url,
                          "--name", name, "--pause-after", str(pause_after), "--paused-file", str(paused),
                          "--resume-file", str(resume), *extra], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return p, paused, resume


def wait_paused(p: subprocess.Popen, paused: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not paused.exists():
        if p.poll() is not None:
            raise AssertionError(f"worker exited before pausing:\n{p.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            raise AssertionError(f"worker did not pause:\n{p.communicate()[0][-3000:]}")
        time.sleep(0.05)


def study_trials(url: str, job_id: int):
    import optuna

    return optuna.load_study(study_name=f"job-{job_id}", storage=url).get_trials(deepcopy=False)


def counted(rows) -> list:
    return [r for r in rows if r.status != "invalid"]


def wait_exit(p: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(f"worker did not finish:\n{out[-3000:]}")
    return out


def submit(url: str, spec: dict) -> int:
    from fastapi.testclient import TestClient

    from service.app import create_app

    tok = make_token(url)
    with TestClient(create_app(database_url=url)) as c:
        r = c.post("/api/v1/jobs", json=spec, headers={"Authorization": f"Bearer {tok}"})
        assert r.status_code == 201, r.text
        return r.json()["id"]


def trials_of(url: str, job_id: int):
    eng = make_engine(url)
    with eng.connect() as c:
        rows = c.execute(sa.select(Trial.number, Trial.status, Trial.worker, Trial.created_at, Trial.config)
                         .where(Trial.job_id == job_id).order_by(Trial.number)).all()
        job = c.execute(sa.select(Job).where(Job.id == job_id)).mappings().one()
    eng.dispose()
    return job, rows


def bigger_spec(trials: int) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["space"] = {"BLOCK_SIZE": [32, 64, 128, 256, 512, 1024], "num_warps": [1, 2, 4], "num_stages": [1, 2, 3]}
    spec["budget"] = {"trials": trials}
    return spec
