"""The cold path of a tuning run: the phase timeline, the GPU child's start-up overlapped with the
first compiles, the automatic lookahead, the next config sent to the child before the previous
result is recorded, and the cubin path (PTX assembled by ptxas in the compile pool)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
import yaml

from compiler import ptxas as assembler
from db import migrate
from db.engine import make_engine, session_factory
from db.models import Job, Trial
from jobspec.device import INTERPRETER_LIMITS, INTERPRETER_MODEL, interpreter_properties
from jobspec.model import JobSpec
from kernels import example
from tuner import compile_step, isolation
from tuner.child import Bench
from tuner.compile_queue import CompileQueue
from tuner.engine import Tuner, run_job
from tuner.measurement import Measurement
from tuner.submission import create_job_from_spec
from tuner.timeline import Timeline, format_timeline

REPO = Path(__file__).resolve().parents[2]
VENV_PTXAS = REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13" / "bin" / "ptxas"


def _new_job(url, spec_dict) -> int:
    migrate.upgrade(url)
    return create_job_from_spec(url, JobSpec.model_validate(spec_dict))


def _vector_add(n_configs: int = 4, **over) -> dict:
    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [256, 512, 1024, 2048], "num_warps": [2, 4, 8]}
    spec["configs"] = [{"BLOCK_SIZE": b, "num_warps": w} for b, w in
                       ((256, 2), (512, 4), (1024, 4), (2048, 8), (512, 2), (1024, 8))][:n_configs]
    spec["budget"] = {"trials": n_configs}
    spec["sampler"] = "random"
    spec["measure"] = {"remeasure_top": 2, "remeasure_rounds": 2}
    spec.update(over)
    return spec


def _trials(url, job_id):
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            job = s.get(Job, job_id)
            rows = s.scalars(sa.select(Trial).where(Trial.job_id == job_id).order_by(Trial.number)).all()
            return job.state, job.trials_done, job.error, [(t.number, t.config, t.status, t.median_ms) for t in rows]
    finally:
        engine.dispose()


# --- the timeline ---------------------------------------------------------------------------

def test_timeline_accumulates_marks_and_formats():
    now = [100.0]
    tl = Timeline(clock=lambda: now[0])
    with tl.phase("record"):
        now[0] += 0.25
    tl.add("record", 0.5)
    now[0] += 1.0
    tl.mark("first_compile")
    now[0] += 1.0
    tl.mark("first_compile")            # only the first time
    tl.count("compiled", 3)
    tl.details["child_start_detail"] = {"import_torch": 1.5}
    d = tl.as_dict()
    assert d["record_s"] == 0.75 and d["first_compile_s"] == 1.25 and d["compiled"] == 3
    text = format_timeline({**d, "total_s": 3.0, "child_start_s": 2.0}, indent="  ")
    assert "total 3.00 s" in text and "GPU child start 2.00 s" in text and "import_torch 1.50 s" in text
    assert all(line.startswith("  ") for line in text.splitlines())
    assert format_timeline(None) == ""


def test_timeline_notes_keep_the_longest_stalls_in_time_order():
    now = [0.0]
    tl = Timeline(clock=lambda: now[0])
    for at, s in [(0.5, 0.01), (1.0, 0.40), (2.0, 0.02), (3.0, 0.30), (4.0, 0.03), (5.0, 0.50), (6.0, 0.04)]:
        tl.note("compile_waits", at=at, s=s, compiling=2)
    tl.note("child_gaps", at=1.0, s=0.41)
    d = tl.as_dict()
    # the four longest, told in the order they happened, and how many there were
    assert [(i["at"], i["s"]) for i in d["compile_waits"]] == [(1.0, 0.4), (3.0, 0.3), (5.0, 0.5), (6.0, 0.04)]
    assert d["compile_waits_count"] == 7 and d["child_gaps_count"] == 1
    text = format_timeline(d)
    assert "the child left without work 1×, the longest: 0.41 s at 1.00 s" in text
    assert "compiles waited for 7×, the longest: 0.40 s at 1.00 s (compiling 2)" in text
    assert "slowest compiles" not in text


def test_done_event_carries_the_timeline_and_compiles_overlap_the_child_start(sqlite_url, monkeypatch):
    """The study is opened and the first known-good configs' compiles are submitted before the
    parent waits for the GPU child; the "done" event has the phase timeline."""
    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "3")
    submitted = []
    seen_at_wait = {}
    real_submit, real_wait = isolation.CompilePool.submit, isolation.IsolatedChild.wait_ready

    def submit(self, fn, *args):
        submitted.append(getattr(fn, "__name__", "?"))
        return real_submit(self, fn, *args)

    def wait_ready(self):
        seen_at_wait.setdefault("compiles", submitted.count("compile_config"))
        return real_wait(self)

    monkeypatch.setattr(isolation.CompilePool, "submit", submit)
    monkeypatch.setattr(isolation.IsolatedChild, "wait_ready", wait_ready)
    job_id = _new_job(sqlite_url, _vector_add(5))
    events = []
    run_job(sqlite_url, job_id, interpret=True, on_event=lambda k, d: events.append((k, d)))
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded", error
    assert done == 5 and [t[2] for t in trials] == ["ok"] * 5
    # the first configs (one per worker, compiled before the study opened) were compiling before the
    # child was awaited; the rest of the lookahead may be asked while the child runs the first
    assert 3 <= seen_at_wait["compiles"] <= 5
    kinds = [k for k, _ in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    tl = events[-1][1]["timeline"]
    for key in ("total_s", "child_start_s", "child_ready_s", "child_wait_s", "props_s", "study_open_s",
                "first_compile_s", "first_run_s", "compile_wait_s", "compile_cpu_s", "child_busy_s", "child_measure_s",
                "child_idle_s", "ask_s", "record_s", "search_s", "remeasure_s", "finalize_s"):
        assert isinstance(tl.get(key), float) and tl[key] >= 0.0, key
    assert tl["compiled"] == 5 and tl["compile_workers"] == 3 and tl["lookahead"] == "auto"
    assert tl["early_compiles"] == 3          # one per worker, submitted before the study opened
    assert tl["remeasure_s"] <= tl["finalize_s"] <= tl["total_s"]
    assert tl["first_compile_s"] <= tl["first_run_s"] <= tl["total_s"]
    assert {"spawn", "import_compiler", "device", "inputs"} <= set(tl["child_start_detail"])
    assert "import_torch" not in tl["child_start_detail"]      # interpret mode runs on numpy arrays
    # every compile's wall time was noted when it came back; the slowest are kept with their config
    assert tl["compile_walls_count"] == 5 and len(tl["compile_walls"]) == 4
    assert all(w["s"] >= 0 and w["at"] <= tl["total_s"] and "/" in w["config"]
               for w in tl["compile_walls"]), tl["compile_walls"]


def _compiles_before_the_study_opens(monkeypatch):
    """Two compile workers; (the configs compiled, as (BLOCK_SIZE, num_warps)) and, at each study
    open, the list of those compiled before it."""
    from tuner.study import JobStudy

    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "2")
    compiles, at_open = [], []
    real_submit, real_open = isolation.CompilePool.submit, JobStudy._open

    def submit(self, fn, *args):
        if getattr(fn, "__name__", "") == "compile_config":
            compiles.append((args[3]["BLOCK_SIZE"], args[4]))      # constexprs, num_warps
        return real_submit(self, fn, *args)

    def open_study(self, props):
        at_open.append(list(compiles))
        return real_open(self, props)

    monkeypatch.setattr(isolation.CompilePool, "submit", submit)
    monkeypatch.setattr(JobStudy, "_open", open_study)
    return compiles, at_open


def test_a_fresh_study_compiles_its_known_good_configs_before_it_opens(sqlite_url, monkeypatch):
    """A fresh job's first asks are its known-good configs: the first (one per compile worker) are
    compiling before the study opens, and the search takes those compiles instead of compiling them
    again. A resumed job (trials recorded) compiles nothing before its study is open."""
    compiles, at_open = _compiles_before_the_study_opens(monkeypatch)
    oks = {"n": 0}

    def count(kind, d):
        oks["n"] += kind == "trial" and d["status"] == "ok"

    job_id = _new_job(sqlite_url, _vector_add(5))
    events = []
    run_job(sqlite_url, job_id, interpret=True, should_stop=lambda: oks["n"] >= 2,
            on_event=lambda k, d: (count(k, d), events.append((k, d))))
    # the default config (1024, 4 warps), then the spec's first: the order the study asks them in
    assert at_open == [[(1024, 4), (256, 2)]]
    assert [(d["config"]["BLOCK_SIZE"], d["config"]["num_warps"]) for k, d in events if k == "trial"][:2] \
        == [(1024, 4), (256, 2)]
    assert _trials(sqlite_url, job_id)[:2] == ("running", 2)
    # the prefetched compiles were taken: every config asked was compiled once
    assert len(compiles) == len(set(compiles))
    compiles.clear()
    at_open.clear()
    events.clear()
    run_job(sqlite_url, job_id, interpret=True, on_event=lambda k, d: events.append((k, d)))
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 5, error
    assert at_open == [[]]                         # resumed: nothing compiled before the study opened
    assert "early_compiles" not in events[-1][1]["timeline"]


def test_a_joining_worker_draws_its_first_configs_and_compiles_them_before_its_study_opens(sqlite_url, monkeypatch):
    """A worker joining a shared job nothing was recorded for draws its first random configs before
    its study opens (none of the known-good ones: the claimer runs those), as many as its random
    sampler asks ahead (two per compile worker), and compiles them meanwhile; its sampler then
    proposes exactly those for its first asks, so the search takes the compiles under way instead
    of compiling other configs."""
    from tuner.space import config_key as key_of

    compiles, at_open = _compiles_before_the_study_opens(monkeypatch)
    spec = _vector_add(6)
    job_id = _new_job(sqlite_url, spec)
    engine = make_engine(sqlite_url)
    with session_factory(engine).begin() as s:
        s.get(Job, job_id).claimed_by = "worker-a"        # the claimer, which runs the known-good configs
    engine.dispose()
    events = []
    oks = {"n": 0}

    def on_event(kind, d):
        events.append((kind, d))
        oks["n"] += kind == "trial" and d["status"] == "ok"

    run_job(sqlite_url, job_id, interpret=True, worker_id="worker-b", should_stop=lambda: oks["n"] >= 2,
            on_event=on_event)
    known = {(c["BLOCK_SIZE"], c["num_warps"]) for c in spec["configs"]}
    [drawn] = at_open
    assert len(drawn) == 4 and len(set(drawn)) == 4 and not set(drawn) & known
    # the first trials this worker ran are drawn configs, and nothing was compiled twice
    first = [(d["config"]["BLOCK_SIZE"], d["config"]["num_warps"]) for k, d in events if k == "trial"][:2]
    assert len(first) == 2 and set(first) <= set(drawn)
    assert len(compiles) == len(set(compiles))
    # another worker draws other configs (its own seed), the same worker the same ones
    from tuner.study import JobStudy

    def draws(worker: str) -> list[str]:
        st = JobStudy.__new__(JobStudy)
        st.ctx = SimpleNamespace(spec=JobSpec.model_validate(spec), worker_id=worker)
        st.space, st._known_good = None, []      # no known-good configs: any valid one may be drawn
        st._constraint_env = lambda props: {}
        return [key_of(c) for c in st.first_draws({}, "m", 3)]

    assert draws("worker-b") == draws("worker-b") != draws("worker-c")
    # handed out and compiled cheapest first: the child's first configs come back soonest
    from tuner.space import compile_cost_hint
    costs = [compile_cost_hint(json.loads(k)) for k in draws("worker-b")]
    assert costs == sorted(costs)


def test_first_draws_sampler_hands_its_configs_to_new_trials_only():
    """FirstDrawsSampler: the first new trials take the drawn configs, in order; an enqueued trial
    (fixed params) takes none; once they are handed out, the base sampler proposes."""
    import optuna

    from tuner.samplers import FirstDrawsSampler

    dists = {"B": optuna.distributions.CategoricalDistribution([1, 2, 3, 4]),
             "W": optuna.distributions.CategoricalDistribution([2, 4, 8])}
    draws = [{"B": 3, "W": 8}, {"B": 1, "W": 2}]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=FirstDrawsSampler(optuna.samplers.RandomSampler(seed=1), draws, dists))
    study.enqueue_trial({"B": 4, "W": 4})

    def ask() -> dict:
        t = study.ask()
        return {name: t.suggest_categorical(name, d.choices) for name, d in dists.items()}

    assert ask() == {"B": 4, "W": 4}             # the queue's, fixed: no draw taken
    assert ask() == draws[0] and ask() == draws[1]
    rest = [ask() for _ in range(20)]
    assert all(r["B"] in (1, 2, 3, 4) and r["W"] in (2, 4, 8) for r in rest) and len({str(r) for r in rest}) > 3


def test_the_first_config_goes_to_the_child_once_it_could_run_it(sqlite_url, monkeypatch):
    """The start's critical path is the first config reaching the child: once one compiled ahead is
    compiled and the child has made the inputs, it is sent — before any trial is asked, the study
    opening meanwhile (tuner/first_run.py) — and its trial, asked after, takes its result. Every
    config still runs once, and the budget holds."""
    from tuner.study import JobStudy

    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "3")
    monkeypatch.setattr(CompileQueue, "done", staticmethod(lambda task: task.future.result(60) is not None))
    # deterministic on a loaded machine: "compiled" and "the child ready" wait until they are so
    monkeypatch.setattr(Measurement, "ready_now", lambda self: (self.wait_ready(), True)[1])
    asks, at_first_run = [], []
    real_ask, real_send = JobStudy.ask, Measurement.send

    def ask(self, mine):
        trial = real_ask(self, mine)
        asks.append(trial is not None)
        return trial

    def send(self, request):
        if request.get("op") == "run" and not at_first_run:
            at_first_run.append(sum(asks))
        return real_send(self, request)

    monkeypatch.setattr(JobStudy, "ask", ask)
    monkeypatch.setattr(Measurement, "send", send)
    job_id = _new_job(sqlite_url, _vector_add(5))
    run_job(sqlite_url, job_id, interpret=True)
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 5 and [t[2] for t in trials] == ["ok"] * 5, error
    assert at_first_run == [0]         # compiled, the child ready: sent before its trial was asked
    assert sum(asks) == 5 and len({json.dumps(t[1], sort_keys=True) for t in trials}) == 5


def test_parent_without_device_properties_waits_for_the_child_first(sqlite_url, monkeypatch):
    """When the parent cannot read the device's properties, the child's are used (the old order)."""
    monkeypatch.setattr(Measurement, "parent_props", lambda self: None)
    job_id = _new_job(sqlite_url, _vector_add(3))
    events = []
    run_job(sqlite_url, job_id, interpret=True, on_event=lambda k, d: events.append((k, d)))
    state, done, error, _ = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 3, error
    assert events[0][1]["gpu_model"] == INTERPRETER_MODEL


def test_child_properties_that_differ_from_the_parents_are_adopted(sqlite_url, monkeypatch):
    """Compiles submitted for the parent's view of the device are redone for the child's."""
    monkeypatch.setattr(Measurement, "parent_props",
                        lambda self: {**interpreter_properties(), "max_shared_memory": 1024})
    job_id = _new_job(sqlite_url, _vector_add(3))
    tuner = Tuner(sqlite_url, job_id, interpret=True)
    tuner.run()
    state, done, error, _ = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 3, error
    assert tuner.measurement.props["max_shared_memory"] == INTERPRETER_LIMITS["max_shared_memory"]
    assert tuner.study.env["max_shared_memory"] == INTERPRETER_LIMITS["max_shared_memory"]
    assert tuner.timeline_data["compiled"] >= 3
    d = tuner.timeline_data          # the start's first compile: out, back, and the first run after
    assert d["first_compile_s"] <= d["first_compiled_s"] <= d["first_run_s"]
    assert f"first compile submitted at {d['first_compile_s']:.2f} s, back at {d['first_compiled_s']:.2f} s" \
        in format_timeline(d)


# --- the lookahead ----------------------------------------------------------------------------

def _want(lookahead, workers, kind, queued):
    q = CompileQueue.__new__(CompileQueue)
    q.ctx = SimpleNamespace(spec=SimpleNamespace(lookahead=lookahead))
    q.pool = SimpleNamespace(workers=workers)
    n = 0
    while q.wants(n, sampler_kind=kind, queued=queued) and n < 100:
        n += 1
    return n


def test_auto_lookahead_compiles_the_queued_configs_at_once():
    assert _want(None, 8, "random", 16) == 16     # the tutorial's 16 configs, 8 workers: all at once
    assert _want(None, 8, "tpe", 16) == 16
    assert _want(None, 8, "tpe", 40) == 16        # at most 2 per worker
    assert _want(None, 8, "tpe", 0) == 2          # TPE: each result informs the next proposal
    assert _want(None, 8, "random", 0) == 16      # nothing to learn: two per worker keep the pool busy
    assert _want(None, 1, "tpe", 5) == 2
    assert _want(3, 8, "tpe", 16) == 3            # the spec's value wins
    assert JobSpec.model_validate(_vector_add()).lookahead is None
    assert JobSpec.model_validate(_vector_add(lookahead=1)).lookahead == 1


def test_explicit_lookahead_one_still_runs_every_config(sqlite_url):
    job_id = _new_job(sqlite_url, _vector_add(4, lookahead=1, sampler="tpe"))
    run_job(sqlite_url, job_id, interpret=True)
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 4, error


# --- sending the next config before recording ---------------------------------------------------

def _compiles_done_in_time(monkeypatch) -> None:
    """Sending early needs the next config's compile done; on a loaded 2-core machine it may not be
    yet: wait for it, so that the path under test is taken every time."""
    import concurrent.futures as cf

    real = Tuner._dispatch_ready

    def dispatch_ready(self, pending):
        if pending and pending[0][2].future is not None:
            cf.wait([pending[0][2].future], timeout=60)
        return real(self, pending)

    monkeypatch.setattr(Tuner, "_dispatch_ready", dispatch_ready)


def _count_calls(monkeypatch, name: str) -> list:
    calls = []
    real = getattr(Tuner, name)

    def wrapper(self, *a, **k):
        out = real(self, *a, **k)
        calls.append(out)
        return out

    monkeypatch.setattr(Tuner, name, wrapper)
    return calls


def test_patience_stops_exactly_although_the_next_config_is_sent_early(sqlite_url, monkeypatch):
    """The next config goes to the child before the previous result is recorded only when that
    result cannot stop the search: patience stops after exactly N non-improving trials."""
    _compiles_done_in_time(monkeypatch)
    early = _count_calls(monkeypatch, "_dispatch_ready")
    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024, 2048], "num_warps": [1, 2, 4, 8]}
    spec["constraints"] = []
    spec["budget"] = {"trials": 20, "patience": 2}
    spec["sampler"] = "random"
    spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
    job_id = _new_job(sqlite_url, spec)
    run_job(sqlite_url, job_id, interpret=True)
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded", error
    best, since, stop_at = None, 0, None
    for i, (_, _, status, ms) in enumerate(trials, 1):
        if ms is not None and (best is None or ms < best):
            best, since = ms, 0
        else:
            since += 1
        if best is not None and since >= 2:
            stop_at = i
            break
    assert stop_at is not None and len(trials) == stop_at == done
    assert any(x is not None for x in early)      # configs were sent before the previous was recorded


def test_a_stop_with_a_config_in_the_child_puts_it_back(sqlite_url, monkeypatch):
    _compiles_done_in_time(monkeypatch)
    interrupted = _count_calls(monkeypatch, "_interrupted")
    n = {"ok": 0}

    def count(kind, d):
        n["ok"] += kind == "trial" and d["status"] == "ok"

    spec = _vector_add(6)
    job_id = _new_job(sqlite_url, spec)
    run_job(sqlite_url, job_id, interpret=True, on_event=count, should_stop=lambda: n["ok"] >= 2)
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "running" and done == 2, error
    assert interrupted == [True]          # the third config was in the child when the stop came
    run_job(sqlite_url, job_id, interpret=True)     # resumes: the rest, none twice
    state, done, error, trials = _trials(sqlite_url, job_id)
    assert state == "succeeded" and done == 6, error
    keys = [tuple(sorted(t[1].items())) for t in trials if t[2] == "ok"]
    assert len(keys) == len(set(keys)) == 6


# --- the CLI and the benchmark show it ----------------------------------------------------------

def test_cli_verbose_prints_the_timeline(tmp_path, sqlite_url, capsys):
    from service.cli import main

    spec = example("vector_add", N=1500)
    spec["space"] = {"BLOCK_SIZE": [256, 512], "num_warps": [2, 4]}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    rc = main(["tune", str(p), "--db", sqlite_url, "--interpret", "--trials", "2", "-v", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "timeline" in out and "GPU child start" in out and "compile pool ready" in out
    rc = main(["tune", str(p), "--db", sqlite_url, "--interpret", "--trials", "2", "--quiet"])
    assert rc == 0 and "GPU child start" not in capsys.readouterr().out


def test_bench_part2_prints_the_timeline(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", os.environ.get("BLOCKTUNE_CACHE_DIR", ""))
    sys.modules.pop("tuning", None)
    import tuning

    assert tuning.main(["--parts", "2", "--interpret"]) == 0
    out = capsys.readouterr().out
    assert "where blocktune's time went" in out and "GPU child start" in out and '"child_start_s"' in out
    assert "FAILED" not in out


# --- cubins -------------------------------------------------------------------------------------

def _ptxas() -> str | None:
    if VENV_PTXAS.exists():
        return str(VENV_PTXAS)
    return compile_step.select_ptxas(None)


def test_the_tuner_ships_cubins_from_the_ptxas_that_suits_the_driver(monkeypatch):
    """compiler.ptxas.for_driver picks it (tests/compiler/test_ptxas.py); BLOCKTUNE_TUNER_CUBIN=0
    makes the tuner ship PTX."""
    monkeypatch.setattr(assembler, "candidates", lambda: ["/x/b", "/x/c"])
    monkeypatch.setattr(assembler, "version", {"/x/b": (13, 5), "/x/c": (12, 4)}.get)
    monkeypatch.delenv("BLOCKTUNE_TUNER_CUBIN", raising=False)
    assert compile_step.select_ptxas("13.0") == "/x/c"
    monkeypatch.setenv("BLOCKTUNE_TUNER_CUBIN", "0")
    assert compile_step.select_ptxas("13.0") is None


def _vector_add_compile(ptxas, **kw):
    spec = JobSpec.model_validate(example("vector_add", N=4096))
    from tuner.data import signature, specialization

    env = spec.scalar_env()
    div16, one = specialization(spec, env)
    return compile_step.compile_config(spec.kernel.source, spec.kernel.name, signature(spec, env),
                                       {"BLOCK_SIZE": 1024}, 4, 3, "sm_90", div16, one, 232448, False, ptxas, **kw)


@pytest.mark.skipif(_ptxas() is None, reason="no ptxas on this machine")
def test_compile_step_ships_a_cubin_made_by_ptxas(monkeypatch, tmp_path):
    from compiler.runtime import compile as rc

    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "kcache"))
    rc._memory.clear()
    ptxas = _ptxas()
    assert assembler.version(ptxas) is not None
    res = _vector_add_compile(ptxas)
    assert res["status"] == "ok", res.get("error")
    ck = res["compiled"]
    assert ck.asm["cubin"][:4] == b"\x7fELF" and "ptx" in ck.asm
    assert "llir" not in ck.asm and "ir" not in ck.asm        # not shipped to the parent and the child
    assert res["ptxas_s"] > 0 and res["cubin_error"] is None and res["compile_s"] >= res["ptxas_s"]
    key = ck.metadata["cache_key"]
    assert (tmp_path / "kcache" / key[:2] / (key + ".cubin")).read_bytes() == ck.asm["cubin"]
    import pickle

    assert pickle.loads(pickle.dumps(ck)).asm["cubin"] == ck.asm["cubin"]
    # a warm cache: the cubin comes from the disk, no ptxas
    rc._memory.clear()
    again = _vector_add_compile(ptxas)
    assert again["ptxas_s"] == 0.0 and again["compiled"].asm["cubin"] == ck.asm["cubin"]
    # no ptxas: PTX only
    rc._memory.clear()
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "kcache2"))
    plain = _vector_add_compile(None)
    assert plain["status"] == "ok" and "cubin" not in plain["compiled"].asm and plain["compiled"].asm["ptx"]


def test_a_failing_ptxas_leaves_the_ptx(monkeypatch, tmp_path):
    from compiler.runtime import compile as rc

    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "kcache"))
    rc._memory.clear()
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'ptxas fatal: nope' >&2\nexit 1\n")
    fake.chmod(0o755)
    res = _vector_add_compile(str(fake))
    assert res["status"] == "ok" and "nope" in res["cubin_error"]
    assert "cubin" not in res["compiled"].asm and res["compiled"].asm["ptx"]


class _LoadError(RuntimeError):
    call = "cuModuleLoadData"


class _FakeKernel:
    def __init__(self, refuse_cubin: bool):
        self.asm = {"ptx": "// ptx", "cubin": b"\x7fELF..."}
        self.refuse_cubin = refuse_cubin
        self.loaded_with = None

    def load(self, device):
        if self.asm.get("cubin") and self.refuse_cubin:
            raise _LoadError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        self.loaded_with = "cubin" if self.asm.get("cubin") else "ptx"


def _bare_bench():
    b = Bench.__new__(Bench)
    b.index = 0
    b.timing, b.cubin_error, b.loaded = {}, None, []
    return b


def test_child_falls_back_to_the_ptx_when_the_driver_refuses_the_cubin():
    b = _bare_bench()
    ok = _FakeKernel(refuse_cubin=False)
    b.load(ok)
    assert ok.loaded_with == "cubin" and b.cubin_error is None and b.timing["load_s"] >= 0
    refused = _FakeKernel(refuse_cubin=True)
    b.load(refused)
    assert refused.loaded_with == "ptx" and "UNSUPPORTED" in b.cubin_error and "cubin" not in refused.asm
    assert b.loaded == [ok, refused]        # unloaded when a warm child releases the job

    class Broken(_FakeKernel):
        def load(self, device):
            raise ValueError("not a load failure")

    with pytest.raises(ValueError):
        _bare_bench().load(Broken(refuse_cubin=False))


def test_the_parent_stops_asking_for_cubins_once_the_child_refused_one():
    m = Measurement(SimpleNamespace(timeline=Timeline()))
    m.ptxas = "/usr/bin/ptxas"
    m.note_timing({"timing": {"handle_s": 0.5, "load_s": 0.1, "measure_s": 0.3}, "cubin_error": "refused"})
    assert m.ptxas is None and m.cubin_disabled == "refused"
    assert m.ctx.timeline.seconds["child_busy"] == 0.5 and m.ctx.timeline.seconds["child_load"] == 0.1


def test_the_timeline_tells_one_long_first_run_from_many_short_ones():
    m = Measurement(SimpleNamespace(timeline=Timeline()))
    for first in (0.004, 0.35, 0.006):
        parts = {"launcher": 0.001, "reset": 0.002, "launch": first - 0.004, "sync": 0.001}
        m.note_timing({"timing": {"handle_s": first + 0.1, "first_run_s": first, "first_run_parts": parts}})
    tl = m.ctx.timeline
    assert tl.seconds["child_first_run"] == pytest.approx(0.36)
    assert tl.details["first_run_longest_s"] == 0.35
    assert ("first runs 0.36 s (longest 0.35 s: launcher 0.001, reset 0.002, launch 0.346, sync 0.001)"
            in format_timeline(tl.as_dict()))


def test_the_native_launcher_is_prebuilt_in_the_pool(monkeypatch, tmp_path):
    """GPU mode builds the compiler's native launcher (a C compile) in the pool while the child
    starts; the child's first launch then only loads it."""
    import shutil

    from compiler.runtime import native

    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "kcache"))
    native.module.cache_clear()
    try:
        seconds = compile_step.prebuild_launcher()
        assert seconds >= 0.0
        built = list((tmp_path / "kcache" / "native").glob("blocktune_launch-*"))
        has_cc = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
        assert bool(built) == (has_cc and native.module() is not None)
    finally:
        native.module.cache_clear()


def test_a_warm_standby_builds_the_native_launcher_before_its_worker_registers(monkeypatch, tmp_path):
    """A service worker's standby builds the native launcher with the pool's warm-up, which
    wait_warm waits for: the first job neither builds it in the pool (0.46-0.84 s of a compile
    process at its start, on 2 x H100) nor in the child."""
    import concurrent.futures as cf
    import shutil
    import sysconfig

    from tuner.standby import Standby

    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "kcache"))
    standby = Standby.__new__(Standby)           # its pool only: a GPU child needs a GPU
    standby.interpret, standby.pool = False, isolation.CompilePool(1)
    try:
        warming = standby._warm_pool()
        assert len(warming) == 2                  # the worker's warm-up, then the launcher's build
        done, _ = cf.wait(warming, timeout=180)
        assert len(done) == 2
        buildable = (any(shutil.which(c) for c in ("cc", "gcc", "clang"))
                     and os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
        assert bool(list((tmp_path / "kcache" / "native").glob("blocktune_launch-*"))) == buildable
        standby.interpret = True                  # a CPU worker's standby has no launcher to build
        assert len(standby._warm_pool()) == 1
    finally:
        standby.pool.close(kill=True)


def test_the_gpu_childs_runs_never_import_optuna(tmp_path):
    """A config's first run, its check, its measurement and a re-measurement round in the child do
    not import optuna (0.25 s, paid inside each worker's first job: measured at 21:30 on 2 x H100 as
    a 0.23-0.31 s first run, all of it in building the config's launcher)."""
    import json
    import subprocess

    spec = example("vector_add", N=4096)
    config = {"BLOCK_SIZE": 256, "num_warps": 4}
    script = f"""
import json, sys
from tuner.child import Bench, Runtime
runtime = Runtime({{"interpret": True, "device": 0}})
bench = Bench({{"spec": json.loads({json.dumps(json.dumps(spec))}), "workdir": {str(tmp_path)!r}}}, runtime)
for _ in range(2):       # the first run keeps the reference, the second is checked against it
    out = bench.run_config({config!r}, None)
    assert out["status"] == "ok", out
    assert out["samples_ms"], out
again = bench.remeasure([{{"config": {config!r}}}], 2, 0.5)
assert again["samples_ms"][0] and again["errors"] == [None], again
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "optuna")))
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_until_the_child_has_a_reference_only_known_good_configs_go_the_first_compiled_first():
    """A known-good config pending: only the known-good configs may go, the first compiled of them
    first (any of them may make the reference; a random config asked before one must not). Only
    random configs pending (a worker joining a job): the first compiled goes first."""
    from jobspec.config import config_key

    known, known2 = {"BLOCK_SIZE": 128, "num_warps": 4}, {"BLOCK_SIZE": 64, "num_warps": 4}
    other = {"BLOCK_SIZE": 256, "num_warps": 4}
    done, compiling = SimpleNamespace(done=True), SimpleNamespace(done=False)
    tuner = Tuner.__new__(Tuner)
    tuner.ctx = SimpleNamespace(spec=SimpleNamespace(check=SimpleNamespace(outputs=["out"])))
    tuner.measurement = SimpleNamespace(has_reference=False)
    tuner.queue = SimpleNamespace(done=lambda task: task.done)
    tuner._known_good_keys = {config_key(known), config_key(known2)}
    assert not tuner._any_order([(None, other, None), (None, known, None)])
    assert tuner._any_order([(None, other, None)])
    # the random config is compiled first, the first known-good one still compiles: the second goes
    pending = [(None, other, done), (None, known, compiling), (None, known2, done)]
    assert tuner._eligible(pending) == [1, 2] and tuner._compiled_index(pending) == 2
    pending[2] = (None, known2, compiling)
    assert tuner._compiled_index(pending) is None
    tuner.measurement.has_reference = True
    assert tuner._any_order([(None, other, None), (None, known, None)])
    assert tuner._compiled_index(pending) == 0
    tuner.measurement.has_reference = False
    tuner.ctx.spec.check.outputs = []
    assert tuner._any_order([(None, known, None)])


def test_a_joining_workers_child_checks_against_the_reference_another_worker_saved(tmp_path):
    """Two workers of one job on one host: the child of the one that joined (started before any
    reference was saved) checks its first run against the reference the other saved meanwhile,
    not against its own outputs (here the saved one is altered, so the first run is wrong)."""
    import numpy as np

    from tuner.child import Runtime

    spec = example("vector_add", N=4096)
    config = {"BLOCK_SIZE": 256, "num_warps": 4}
    runtime = Runtime({"interpret": True, "device": 0})
    joiner = Bench({"spec": spec, "workdir": str(tmp_path)}, runtime)
    assert joiner.reference is None
    claimer = Bench({"spec": spec, "workdir": str(tmp_path)}, runtime)
    assert claimer.run_config(config, None)["reference"] is True
    path = claimer.reference_path
    with np.load(path) as saved:
        altered = {k: saved[k] + 1 for k in saved.files}
    with open(path, "wb") as f:
        np.savez(f, **altered)
    out = joiner.run_config(config, None)
    assert out["status"] == "wrong-result" and out["reference"] is True


def test_a_joiners_reference_from_a_random_config_is_not_shared_and_yields_to_the_claimers(tmp_path):
    """A joining worker's child that runs a random config before the claimer saved its reference
    keeps that run's outputs as its own provisional reference and saves nothing (the other workers
    must not trust a random config); once the claimer's reference is on disk, the joiner checks
    against it. The engine asks for sharing only for known-good configs of a shared job."""
    import numpy as np

    from tuner.child import Runtime
    from tuner.space import config_key as key_of

    spec = example("vector_add", N=4096)
    config = {"BLOCK_SIZE": 256, "num_warps": 4}
    runtime = Runtime({"interpret": True, "device": 0})
    joiner = Bench({"spec": spec, "workdir": str(tmp_path)}, runtime)
    first = joiner.run_config(config, None, share_reference=False)
    assert first["status"] == "ok" and first["reference"] is True
    assert joiner.reference_provisional and not joiner.reference_path.exists()
    claimer = Bench({"spec": spec, "workdir": str(tmp_path)}, runtime)
    assert claimer.run_config(config, None)["reference"] is True and claimer.reference_path.exists()
    with np.load(claimer.reference_path) as saved:     # altered: a joiner checking against it fails
        altered = {k: saved[k] + 1 for k in saved.files}
    with open(claimer.reference_path, "wb") as f:
        np.savez(f, **altered)
    out = joiner.run_config(config, None, share_reference=False)
    assert out["status"] == "wrong-result" and not joiner.reference_provisional

    known = {"BLOCK_SIZE": 1024, "num_warps": 4}
    tuner = Tuner.__new__(Tuner)
    tuner.ctx = SimpleNamespace(shared=True)
    tuner._known_good_keys = {key_of(known)}
    assert tuner._run_request(known, None)["share_reference"] is True
    assert tuner._run_request(config, None)["share_reference"] is False
    tuner._known_good_keys = set()                     # no known-good configs: the first run is all there is
    assert tuner._run_request(config, None)["share_reference"] is True
    tuner.ctx.shared = False
    tuner._known_good_keys = {key_of(known)}
    assert tuner._run_request(config, None)["share_reference"] is True


def test_a_round_fills_the_childs_wait_only_for_stragglers_at_the_end_of_the_budget():
    """The child idle and waiting for compiles: a round of the finalists is measured meanwhile only
    when every config that may go is a straggler (compiling for STRAGGLER_S or more) and the trial
    budget has no room (else the search asks more configs instead)."""
    from tuner import engine as engine_mod

    now = [10.0]
    calls = []
    room = [False]
    tuner = Tuner.__new__(Tuner)
    tuner.ctx = SimpleNamespace(spec=SimpleNamespace(check=SimpleNamespace(outputs=[])),
                                timeline=SimpleNamespace(since_start=lambda: now[0]),
                                retry=lambda fn, what: fn())
    tuner.queue = SimpleNamespace(done=lambda task: task.done)
    tuner.measurement = SimpleNamespace(has_reference=True)
    tuner.study = SimpleNamespace(budget_has_room=lambda mine: room[0])
    tuner.final_rounds = SimpleNamespace(round_while_waiting=lambda: calls.append(now[0]) or True)
    old = SimpleNamespace(done=False, submitted_s=now[0] - engine_mod.STRAGGLER_S - 0.1)
    fresh = SimpleNamespace(done=False, submitted_s=now[0] - 0.05)
    assert tuner._round_while_compiling([(None, {"A": 1}, old)]) and calls == [10.0]
    # a fresh compile may land any moment: wait for it
    assert not tuner._round_while_compiling([(None, {"A": 1}, old), (None, {"A": 2}, fresh)])
    # one is compiled already (the loop sends it), or nothing is pending
    assert not tuner._round_while_compiling([(None, {"A": 1}, SimpleNamespace(done=True, submitted_s=0.0))])
    assert not tuner._round_while_compiling([])
    # the budget has room: the search asks more configs rather than re-measuring
    room[0] = True
    assert not tuner._round_while_compiling([(None, {"A": 1}, old)]) and calls == [10.0]


def test_the_asks_stop_when_the_child_waits_for_the_run():
    """`_fill` asks no further than three ahead (in the child, staged, compiling) once the child
    needs the run's thread: it answered (the config staged for it runs, nothing after it), or
    nothing is in it and a config is compiled. A lookahead of 16 asked in one go was half a second
    of asks on PostgreSQL, while the child waited after its first run; the rest is asked once the
    child has its next config."""
    from tuner.engine import AHEAD_BEFORE_SERVING

    done = SimpleNamespace(done=True)
    cfg = {"BLOCK_SIZE": 128, "num_warps": 4}
    asked = []
    tuner = Tuner.__new__(Tuner)
    tuner.ctx = SimpleNamespace(spec=SimpleNamespace(check=SimpleNamespace(outputs=[])),
                                retry=lambda fn, what: fn())
    tuner.measurement = SimpleNamespace(has_reference=True)
    tuner.queue = SimpleNamespace(done=lambda task: task.done, wants=lambda n, **kw: n < 16)
    tuner.study = SimpleNamespace(asks=0, max_asks=1000, n_valid=1000, sampler_kind="random", queued=0,
                                  budget_elsewhere=False)
    tuner.recorder = SimpleNamespace(tried=lambda: 0)
    tuner.first_run = SimpleNamespace(unrecorded=lambda: 0)
    tuner._known_good_keys = set()
    compiles = {"task": done}

    def ask_one(pending, inflight, staged=None):
        asked.append(len(pending))
        pending.append((None, dict(cfg), compiles["task"]))
        return True

    tuner._ask_one = ask_one
    tuner._stage = lambda pending, inflight, staged: staged
    answered = {"now": False}
    tuner.relay = SimpleNamespace(waiting=lambda: answered["now"])
    busy = SimpleNamespace(trial=None, result=None)
    # the child runs a config and has not answered: the whole lookahead is asked
    tuner._fill([], busy)
    assert len(asked) == 16
    # it answered: three ahead, then the answer is read
    asked.clear()
    answered["now"] = True
    tuner._fill([], busy)
    assert len(asked) == AHEAD_BEFORE_SERVING == 3
    # three are ahead already: no ask until the answer is read
    asked.clear()
    tuner._fill([(None, dict(cfg), done)] * 3, busy)
    assert asked == []
    # nothing in it, configs compiled: three ahead, then one goes to the child
    answered["now"] = False
    asked.clear()
    tuner._fill([], None)
    assert len(asked) == 3
    # nothing in it and nothing compiled: the asks go on
    asked.clear()
    compiles["task"] = SimpleNamespace(done=False)
    tuner._fill([], None)
    assert len(asked) == 16


def test_compile_cost_hint_orders_configs_by_the_tile_a_thread_holds():
    from tuner.space import compile_cost_hint

    def mm(m, n, k, w, s=3):
        return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 8, "num_warps": w,
                "num_stages": s}

    # 64x256x128 on 2 warps compiled in 2.0 s on the H100 host, 128x256x64 on 8 in 0.25 s
    assert compile_cost_hint(mm(64, 256, 128, 2)) == 4 * compile_cost_hint(mm(128, 256, 64, 8))
    assert compile_cost_hint(mm(64, 64, 32, 4)) < compile_cost_hint(mm(64, 64, 32, 2))
    # what is not a tile (GROUP_SIZE_M, num_stages) does not count
    assert compile_cost_hint(mm(64, 64, 32, 4, 5)) == compile_cost_hint({**mm(64, 64, 32, 4), "GROUP_SIZE_M": 1})
    assert compile_cost_hint({"BLOCK_SIZE": 1024, "num_warps": 4}) == 8.0
