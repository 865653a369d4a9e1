"""Fleet benchmark: workers on several GPUs of one host against one PostgreSQL (issue 10).

    python3 bench/fleet.py [--devices 0,1] [--trials 64] [--size 4096]

Runs what a platform team runs: a throw-away PostgreSQL cluster (bench/postgres.py), `blocktune
serve --no-worker` on it, and `blocktune worker --device N` processes, each with its own name. Jobs
are submitted over the REST API with a submit-scoped token, as a client does, and timed from
submission to `succeeded` (the workers are already up and idle, as in a fleet, on the default
poll: they take a job when its creation or claim wakes them, db/job_wakeups.py). Scenarios:

  one worker     one job of --trials trials, the worker on the first device alone
  shared         one such job, every worker joining it (the job is shared trial by trial)
  two jobs       two such jobs submitted together, as many workers

Each scenario starts from an empty kernel cache of its own, so no scenario compiles for another.
The job is Triton's tutorial matmul (examples/specs/matmul.yaml) at --size³ with random sampling and
no early stop, so every scenario measures exactly --trials trials per job, of one spec and seed. A
worker joining a shared job draws its own random configs (replaying the claimer's would only give
repeats), so the shared run's configs are not all the one worker's: after the runs, each job's
trials are summed up (configs run, how many the one worker ran too, their statuses) to show the
work compared. A trial's cost on the GPU child hardly depends on its config (timing runs for a
fixed time, the output check reads the whole output); the compile's does, off the critical path.
(The same configs exactly would need them queued — 64 Optuna enqueues cost 1.5-2.4 s of the
study's opening here — or brute force, whose every ask reads the whole study: both would move
the start or the parent's bookkeeping, on both sides.) The workers' GPU model is checked to be
one model, and the scenarios run in one invocation, on one host. Target (issue 10): shared / one
worker ≤ 0.55 for a 64-trial job on two GPUs.

The workers are started as a fleet deploys them on one host: BLOCKTUNE_HOST_WORKERS is the
scenario's number of workers, so that their compile pools divide the host's CPUs
(tuner/isolation.py); compile processes run below the workers' CPU priority (BLOCKTUNE_COMPILE_NICE).

Without a GPU, `--simulate-ms 160 --size 64` runs the same fleet with CPU workers whose child
"runs" each config for that long instead (bench/fleet_sim_worker.py): the parents' side of the
scenarios — the database, Optuna, the job's lock — against a child of the H100's speed. Its
numbers are not GPU numbers. Each worker process's own CPU time during the jobs is printed too
(less sensitive than wall time to a machine loaded by others).

After each scenario: every worker's logged timeline, and each job's end read from the database —
per worker its trials, when it recorded its last one and its rounds of the final re-measurement
(tuner/final_rounds.py; "stale": measured before a last trial changed the finalists), and when the
job succeeded. In a shared job the worker that runs out of trials first re-measures while the
other runs the last ones, so its rounds begin before the last trial is recorded.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(REPO))
from common import pin_group_size  # noqa: E402
from postgres import Postgres, free_port  # noqa: E402

BLOCKTUNE = [sys.executable, "-m", "service.cli"]
SIM_WORKER = [sys.executable, str(REPO / "bench" / "fleet_sim_worker.py")]


def job_spec(size: int, trials: int, seed: int) -> dict:
    spec = pin_group_size(yaml.safe_load((REPO / "examples" / "specs" / "matmul.yaml").read_text()))
    spec["sizes"] = {"M": size, "N": size, "K": size}
    spec["budget"] = {"trials": trials, "seconds": 3600, "patience": trials * 10}
    spec["sampler"] = "random"
    spec["seed"] = seed
    return spec


class Fleet:
    """The API server and the workers of one scenario, on one database."""

    def __init__(self, url: str, devices: list[int], cache: str, interpret: bool = False,
                 simulate_ms: float | None = None):
        self.url, self.devices, self.interpret = url, devices, interpret or simulate_ms is not None
        self.simulate_ms = simulate_ms
        self.env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                    "BLOCKTUNE_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1",
                    "BLOCKTUNE_HOST_WORKERS": str(len(devices))}
        if simulate_ms is not None:
            self.env["BLOCKTUNE_SIM_RUN_MS"] = str(simulate_ms)
        self.logs = Path(tempfile.mkdtemp(prefix="fleet-logs-"))
        self.procs: list[subprocess.Popen] = []
        self.workers: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, args: list[str], command: list[str] = BLOCKTUNE) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "w")
        p = subprocess.Popen(command + args, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def __enter__(self):
        subprocess.run(BLOCKTUNE + ["migrate", "--db", self.url], cwd=REPO, env=self.env, check=True,
                       capture_output=True)
        made = subprocess.run(BLOCKTUNE + ["token", "create", "fleet", "--scope", "submit", "--scope", "read",
                                           "--db", self.url], cwd=REPO, env=self.env, check=True,
                              capture_output=True, text=True)
        self.token = made.stdout.strip().splitlines()[-1]
        self.port = free_port()
        self._spawn("api", ["serve", "--no-worker", "--db", self.url, "--port", str(self.port)])
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}",
                                 headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        self._wait(lambda: self.http.get("/healthz").status_code == 200, 60, "the API")
        host = os.uname().nodename
        for d in self.devices:
            self.workers[f"worker-gpu{d}"] = self._spawn(f"worker-gpu{d}", ["worker", "--device", str(d), "--server-db", self.url,
                                           "--name", f"{host}-gpu{d}", "--no-migrate"]
                        + (["--interpret"] if self.interpret else []),
                        SIM_WORKER if self.simulate_ms is not None else BLOCKTUNE)
        self._wait(lambda: sum(w["alive"] for w in self.http.get("/api/v1/workers").json()) == len(self.devices),
                   180, f"{len(self.devices)} live workers")
        return self

    def _wait(self, ready, seconds: float, what: str, poll: float = 0.2):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a process exited ({p.args}); logs in {self.logs}")
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(poll)
        raise TimeoutError(f"waited {seconds:.0f} s for {what}; logs in {self.logs}")

    def parents_cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each worker's own process has used so far: its parent's side
        of the jobs (the database, Optuna, the search), without its GPU child and compile pool.
        Less sensitive than wall time to a machine loaded by others (--simulate-ms)."""
        out = {}
        for name, p in self.workers.items():
            try:
                fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
        return out

    def run_jobs(self, specs: list[dict]) -> tuple[float, list[dict]]:
        """Submit the specs together; seconds until all are done, and the jobs."""
        cpu_before = self.parents_cpu()
        t0 = time.perf_counter()
        self.submitted_at = time.time()
        ids = []
        for spec in specs:
            r = self.http.post("/api/v1/jobs", json=spec)
            r.raise_for_status()
            ids.append(r.json()["id"])
        jobs: list[dict] = []

        def finished():
            nonlocal jobs
            jobs = [self.http.get(f"/api/v1/jobs/{i}").json() for i in ids]
            bad = [j for j in jobs if j["state"] in ("failed", "cancelled")]
            if bad:
                raise RuntimeError(f"job {bad[0]['id']} ended {bad[0]['state']}: {bad[0].get('error')}")
            return all(j["state"] == "succeeded" for j in jobs)

        # looked at every 20 ms: a job's time is read to a few hundredths (at 0.2 s, the poll
        # added 0.04-0.20 s to a 6.5 s shared job, 1-3% of the ratio)
        self._wait(finished, 1800, "the jobs to finish", poll=0.02)
        seconds = time.perf_counter() - t0
        self.jobs_cpu = {n: round(c - cpu_before.get(n, 0.0), 2) for n, c in self.parents_cpu().items()}
        return seconds, jobs

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.http.close()

    def worker_timelines(self) -> dict[str, str]:
        """Each worker's logged job timelines (tuner/timeline.py): where a worker's share of the
        wall time went, the way to see whether start-up or the tail costs a shared job its speed-up."""
        out = {}
        for log in sorted(self.logs.glob("worker-*.log")):
            lines, keep = [], False
            for line in log.read_text(errors="replace").splitlines():
                if "timeline" in line:
                    keep = True
                elif keep and not line.startswith(" "):
                    keep = False
                if keep:
                    lines.append(line)
            out[log.stem] = "\n".join(lines)
        return out


def job_ends(url: str, job_ids: list[int], since: float) -> list[dict]:
    """How each job ended, in seconds since submission, from the database: per worker its trials and
    when it recorded its last one, and the final re-measurement's rounds (tuner/final_rounds.py:
    who measured each, when, and whether it held the final finalists — a round measured while
    another worker's last trial changed the top few does not); when the job succeeded."""
    import optuna
    import sqlalchemy as sa

    from db.models import Job, Trial
    from tuner.final_rounds import read_rounds

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    engine = sa.create_engine(url)
    out = []
    try:
        for job_id in job_ids:
            with engine.connect() as c:
                trials = c.execute(sa.select(Trial.worker, Trial.created_at, Trial.config, Trial.status)
                                   .where(Trial.job_id == job_id)).all()
                finished = c.execute(sa.select(Job.finished_at).where(Job.id == job_id)).scalar_one()
            study = optuna.load_study(study_name=f"job-{job_id}", storage=url)
            deadline = time.monotonic() + 10     # saved by the winner's worker just after the job succeeded
            while "remeasured_ms" not in study.user_attrs and time.monotonic() < deadline:
                time.sleep(0.1)
            finalists = list(study.user_attrs.get("remeasured_ms") or {})
            workers: dict[str, dict] = {}
            ran = sorted({json.dumps(cfg, sort_keys=True) for _, _, cfg, status in trials
                          if status != "invalid"})
            statuses: dict[str, int] = {}
            for _, _, _, status in trials:
                statuses[status] = statuses.get(status, 0) + 1
            for worker, at, _, _ in trials:
                w = workers.setdefault(worker, {"trials": 0, "last_trial_s": 0.0, "rounds": []})
                w["trials"] += 1
                w["last_trial_s"] = round(max(w["last_trial_s"], at.timestamp() - since), 2)
            for r in sorted(read_rounds(study), key=lambda r: r.started):
                if not r.finished:
                    continue
                w = workers.setdefault(r.worker, {"trials": 0, "last_trial_s": None, "rounds": []})
                ended = r.ended or r.started + r.seconds     # after the wait for its compiles and the measuring
                w["rounds"].append({"from_s": round(r.started - since, 2), "to_s": round(ended - since, 2),
                                    "final": r.holds(finalists), "part": r.part})
            out.append({"job": job_id, "succeeded_s": round(finished.timestamp() - since, 2) if finished else None,
                        "workers": workers, "configs": ran, "statuses": statuses})
    finally:
        engine.dispose()
    return out


def _part(r: dict) -> str:
    part = r.get("part", 1.0)
    return "" if part >= 1 else f" (1/{round(1 / part)})"


def print_job_end(name: str, end: dict) -> None:
    last = max((w["last_trial_s"] or 0.0) for w in end["workers"].values())
    print(f"--- {name}: job {end['job']}'s end, seconds since submission (last trial recorded at {last:.2f}, "
          f"succeeded at {end['succeeded_s']})")
    for worker, w in sorted(end["workers"].items()):
        rounds = ", ".join(f"{r['from_s']:.2f}–{r['to_s']:.2f}" + _part(r) + ("" if r["final"] else " (stale)")
                           for r in w["rounds"])
        early = sum(1 for r in w["rounds"] if r["final"] and r["from_s"] < last)
        print(f"  {worker}: {w['trials']} trials, last at {w['last_trial_s']}; re-measurement rounds: {rounds or 'none'}"
              + (f" ({early} begun before the last trial)" if early else ""))


START_MARKS = {"child_ready": r"ready at ([\d.]+) s", "first_compile": r"first compile submitted at ([\d.]+) s",
               "first_run": r"first run sent at ([\d.]+) s"}


def start_marks(timeline: str) -> dict[str, float]:
    """A worker's start from its logged timeline (tuner/timeline.py), seconds since it took the job:
    the GPU child ready (the inputs made), the first compile submitted, the first config sent to the
    child — the later of the first two, the start's critical path."""
    import re

    out = {}
    for key, pattern in START_MARKS.items():
        m = re.search(pattern, timeline)
        if m:
            out[key] = float(m.group(1))
    return out


def scenario(pg_url: str, name: str, devices: list[int], specs: list[dict], interpret: bool,
             simulate_ms: float | None = None, run: int = 1) -> dict:
    db = f"fleet_{name.replace(' ', '_')}_{time.time_ns()}"
    label = name if run == 1 else f"{name} #{run}"
    import sqlalchemy as sa

    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db}"'))
    admin.dispose()
    url = pg_url.rsplit("/", 1)[0] + "/" + db
    with tempfile.TemporaryDirectory(prefix="fleet-cache-") as cache, Fleet(url, devices, cache, interpret, simulate_ms) as fleet:
        seconds, jobs = fleet.run_jobs(specs)
        trials = [j.get("trials_done") for j in jobs]
        workers = fleet.http.get("/api/v1/workers").json()
    ends = job_ends(url, [j["id"] for j in jobs], fleet.submitted_at)
    starts = {}
    for worker, timeline in fleet.worker_timelines().items():
        print(f"--- {label}: {worker}\n{timeline or '(no timeline logged)'}", flush=True)
        if worker in fleet.jobs_cpu:
            print(f"  the worker's own process (parent) used {fleet.jobs_cpu[worker]:.2f} s of CPU during the jobs")
        starts[worker] = start_marks(timeline)
    for end in ends:
        print_job_end(label, end)
    if os.environ.get("OUT"):
        shutil.copytree(fleet.logs, Path(os.environ["OUT"]) / f"fleet-logs-{label.replace(' ', '-').replace('#', '')}")
    row = {"scenario": name, "run": run, "workers": len(devices), "jobs": len(specs), "seconds": round(seconds, 2),
           "trials_done": trials, "worker_names": sorted(w["name"] for w in workers),
           "gpu_models": sorted({w["gpu_model"] for w in workers}), "starts": starts, "ends": ends,
           "parents_cpu_s": fleet.jobs_cpu}
    print(json.dumps({**row, "ends": [{**e, "configs": len(e["configs"])} for e in ends]}), flush=True)
    return row


def host_cpus() -> str:
    """The host's CPUs as the workers see them: what their compile pools are sized for (affinity,
    capped by the cgroup's quota), the quota itself, the physical cores behind the logical ones (two
    pools of compiles on hyperthreads of the same cores run slower) and the load before the runs."""
    from tuner.cpu_quota import cgroup_cpu_limit
    from tuner.settings import usable_cpus

    cores = set()
    try:
        phys = core = None
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "physical id":
                phys = value.strip()
            elif key.strip() == "core id":
                core = value.strip()
                cores.add((phys, core))
    except OSError:
        pass
    quota = cgroup_cpu_limit()
    return (f"host CPUs: {os.cpu_count()} logical, {len(cores) or '?'} physical cores; usable by a worker "
            f"{usable_cpus()} (cgroup quota {'none' if quota is None else f'{quota:g} CPUs'}); "
            f"load {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="0,1")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--interpret", action="store_true",
                    help="CPU workers on the interpreter, to check the script itself (use a small --size)")
    ap.add_argument("--simulate-ms", type=float, default=None,
                    help="CPU workers whose child 'runs' each config for this many ms instead of running it "
                         "(bench/fleet_sim_worker.py): the host side's pace on a machine without a GPU, "
                         "not GPU numbers (use a small --size)")
    ap.add_argument("--simulate-compile", action="store_true",
                    help="with --simulate-ms: each compile takes at least what it took on the 2 x H100 host "
                         "(bench/fleet_sim_worker.py), in a pool of --compile-workers processes")
    ap.add_argument("--compile-workers", type=int, default=None,
                    help="compile processes per worker (BLOCKTUNE_COMPILE_WORKERS; default: the worker's share "
                         "of the CPUs)")
    ap.add_argument("--scenarios", default="one worker,shared,two jobs",
                    help="comma-separated subset of: one worker, shared, two jobs (or one-worker, two-jobs: "
                         "scripts/gpu-check.sh splits BENCH_ARGS_fleet at spaces)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the scenarios this many times, interleaved (one worker, shared, ..., one worker, "
                         "shared, ...), and compare their medians: one run's ratio moves by a few hundredths")
    args = ap.parse_args()
    devices = [int(d) for d in args.devices.split(",")]

    def spec(seed: int) -> dict:
        return job_spec(args.size, args.trials, seed)

    plan = {"one worker": (devices[:1], [spec(1)]), "shared": (devices, [spec(1)]),
            "two jobs": (devices, [spec(1), spec(2)])}
    wanted = [w.strip().replace("-", " ") for w in args.scenarios.split(",")]
    unknown = [w for w in wanted if w not in plan]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}: choose from {sorted(plan)}")
    if args.simulate_compile:
        if args.simulate_ms is None:
            ap.error("--simulate-compile goes with --simulate-ms")
        os.environ["BLOCKTUNE_SIM_COMPILE"] = "1"        # the workers' environment is this one's
    if args.compile_workers is not None:
        os.environ["BLOCKTUNE_COMPILE_WORKERS"] = str(args.compile_workers)
    print(host_cpus(), flush=True)
    pg = Postgres()
    try:
        rows = [scenario(pg.url, name, *plan[name], args.interpret, args.simulate_ms, run)
                for run in range(1, args.repeat + 1) for name in wanted]
    finally:
        pg.stop()
    models = sorted({m for r in rows for m in r["gpu_models"]})
    print(f"\nGPU model of every worker: {', '.join(models)}")
    alone = set(rows[0]["ends"][0]["configs"])

    def tag(r: dict) -> str:
        return r["scenario"] if args.repeat == 1 else f"{r['scenario']} #{r['run']}"
    for r in rows:
        for end in r["ends"]:
            mine = set(end["configs"])
            statuses = ", ".join(f"{n} {st}" for st, n in sorted(end["statuses"].items()))
            print(f"{tag(r)}, job {end['job']}: {len(mine)} configs run ({statuses}); "
                  f"{len(mine & alone)} of them also run by the one worker")
    if len(models) != 1:
        print("WARNING: the workers are on different GPU models: the scenarios are not comparable")
    medians = {name: statistics.median(r["seconds"] for r in rows if r["scenario"] == name) for name in wanted}
    one = medians[wanted[0]]
    runs = "seconds" if args.repeat == 1 else f"median seconds of {args.repeat} (each run)"
    print(f"\n| scenario | workers | jobs × trials | {runs} | × one worker |\n|---|---|---|---|---|")
    for name in dict.fromkeys(wanted):
        mine = [r for r in rows if r["scenario"] == name]
        each = "" if args.repeat == 1 else " (" + ", ".join(f"{r['seconds']:.1f}" for r in mine) + ")"
        print(f"| {name} | {mine[0]['workers']} | {mine[0]['jobs']} × {args.trials} | {medians[name]:.1f}{each} | "
              f"{medians[name] / one:.2f} |")
    if "shared" in medians and wanted[0] == "one worker":
        print(f"shared {args.trials}-trial job on {len(devices)} {'simulated GPUs' if args.simulate_ms else 'GPUs'}: "
              f"{medians['shared'] / one:.2f}× one worker"
              + ("" if args.repeat == 1 else f", medians of {args.repeat} interleaved runs") + " (target ≤ 0.55)")
        if args.repeat > 1:
            pairs = zip((r for r in rows if r["scenario"] == "one worker"), (r for r in rows if r["scenario"] == "shared"))
            print("each run's own ratio: " + ", ".join(f"{s['seconds'] / o['seconds']:.2f}" for o, s in pairs))
    if args.simulate_ms is not None:
        print(f"SIMULATED: each config's run took {args.simulate_ms:g} ms in a CPU child (bench/fleet_sim_worker.py): "
              "the host side's pace, not GPU numbers")
    for r in rows:
        cpu = ", ".join(f"{w} {c:.2f} s" for w, c in sorted(r["parents_cpu_s"].items()))
        print(f"{tag(r)}: the workers' own processes used {cpu} of CPU "
              f"({sum(r['parents_cpu_s'].values()) / (args.trials * r['jobs']) * 1000:.0f} ms a trial in all)")
    for r in rows:
        for worker, marks in sorted(r["starts"].items()):
            print(f"{tag(r)}, {worker}: child ready at {marks.get('child_ready', '—')} s, first compile "
                  f"submitted at {marks.get('first_compile', '—')} s, first run sent at {marks.get('first_run', '—')} s")
    for r in rows:
        for end in r["ends"]:
            last = max((w["last_trial_s"] or 0.0) for w in end["workers"].values())
            # in whole rounds: a worker of two measures half rounds (tuner/final_rounds.py)
            split = ", ".join(f"{w}: {sum(x.get('part', 1.0) for x in v['rounds'] if x['final']):g}"
                              for w, v in sorted(end["workers"].items()))
            print(f"{tag(r)}, job {end['job']}: last trial recorded at {last:.2f} s, succeeded at "
                  f"{end['succeeded_s']:.2f} s (the end took {end['succeeded_s'] - last:.2f} s); "
                  f"rounds of the final finalists by worker: {split}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
