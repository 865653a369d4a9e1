"""Where a tuning run's wall time goes: a small phase timeline kept by the engine.

`Timeline` accumulates seconds per phase (`with tl.phase("record"):` or `tl.add("x", s)`), marks
points in time since the run started (`tl.mark("first_compile_submitted")`), counts things
(`tl.count("cubins")`) and keeps a few details (the GPU child's own start-up split). `as_dict()`
is what the engine logs at the end, puts in the "done" event (`data["timeline"]`) and what
`bench/tuning.py` and `blocktune tune -v` print (`format_timeline`).

Phases (seconds; "since start" = since Tuner.run began):
    child_start      spawn of the GPU child → its ready message (the child's own clock; overlaps);
                     a service worker's warm child (details: child_warm true) started before the
                     job: then the job's init message → ready (its inputs and reference only)
    child_ready      since start, when the child was ready (its clock)
    child_wait       the parent blocked waiting for that ready message
    pool_ready       since start, when every compile worker had started and imported the compiler
    launcher_build   the native launcher's C build, done in the pool (GPU mode; 0 when cached)
    props            device properties in the parent (driver attributes, no CUDA context)
    study_open       Optuna storage + study, resume state, known-good configs enqueued
    first_compile    since start, when the first compile was submitted
    first_compiled   since start, when a compile first came back from the pool
    first_run        since start, when the first config went to the child (the later of the
                     child's start and the first compile, the start-up's critical path)
    compile_wait     the parent blocked on compile results
    compile_cpu      compile time summed over the pool's workers (front end + LLVM + ptxas)
    ptxas            of which ptxas (PTX → cubin), summed over workers
    ask / record     Optuna ask + suggest / storing a result (its row in tuning_trials and the job's
                     count; when shared, only while its trial is RUNNING)
    claim            a sharing worker admitting a trial to the budget (tuner/trial_claims.py; count:
                     claims_refused, the trials refused: the budget's last places taken meanwhile)
    record_behind    Optuna's tell of each result and the job's progress, written on a thread of
                     their own while the search goes on (tuner/write_behind.py)
    lock_wait        a sharing worker waiting for the job's lock (db.job_lock), held by another worker
    lock_held        this worker holding it (on SQLite, the budget count + Optuna's ask; a resumed
                     job's orphaned trials failed): what the workers sharing a job do one at a time
    child_wait_run   the parent blocked waiting for the child's answers during the search
    child_busy       the child's own time handling run requests (load + check + measure)
    child_load       of which module loads (cubin: cheap; PTX: the driver's JIT)
    child_measure    of which timing
    child_first_run  of which each config's first run (its launcher, inputs reset, the run, a sync;
                     the module load included; details: first_run_longest_s, the longest one, and
                     first_run_longest_parts, its launcher, inputs reset, launch and sync)
    child_check      of which checking the outputs against the reference
    child_idle       during the search, the child waiting for the parent (first request → last answer);
                     counts: answered (the child's answers read), relayed (of which those on which
                     the next config went to the child at once: tuner/relay.py)
    search           the whole search loop
    remeasure_start  since start, when this run began re-measuring the finalists (tuner/final_rounds.py;
                     before finalists_final: a worker sharing the job measured rounds of the finalists
                     as they stood while others ran the last trials)
    finalists_final  since start, when the finalists were final here (the search over everywhere)
    remeasure        the final re-measurement's rounds measured here (count: final_rounds, of which
                     rounds_while_compiling: measured in the search while its last configs compiled; details:
                     final_rounds_here / final_rounds_elsewhere, the rounds the winner was picked from;
                     final_round_part, the part of a round this run measured at a time: 1/k, k workers)
    remeasure_wait   waiting for rounds other workers had under way
    finalize         remeasure + waiting + storing the winner
    total            the run, start to "done"
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

ORDER = ("total", "child_start", "child_ready", "child_wait", "pool_ready", "launcher_build", "props",
         "study_open", "first_compile", "first_compiled", "first_run", "compile_wait", "compile_cpu", "ptxas", "ask", "claim", "record", "record_behind", "lock_wait",
         "lock_held", "child_wait_run",
         "child_busy", "child_load", "child_measure", "child_first_run", "child_check", "child_idle", "search", "remeasure_start", "finalists_final",
         "remeasure", "remeasure_wait", "finalize")
NOTES_KEPT = 4


class Timeline:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.start = clock()
        self.wall_start = time.time()      # to place other processes' time.time() stamps
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.details: dict[str, Any] = {}
        self.notes: dict[str, list[dict[str, Any]]] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, float(seconds))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = self.clock()
        try:
            yield
        finally:
            self.add(name, self.clock() - t)

    def mark(self, name: str, *, once: bool = True) -> None:
        """The time since start at which `name` happened (the first time, with once=True)."""
        if once and name in self.seconds:
            return
        self.seconds[name] = self.clock() - self.start

    def mark_wall(self, name: str, wall_time: float) -> None:
        """Like mark(), for a time.time() stamp (another process's, e.g. the child's ready)."""
        self.seconds[name] = max(0.0, float(wall_time) - self.wall_start)

    def since_start(self) -> float:
        return self.clock() - self.start

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def note(self, name: str, **item: Any) -> None:
        """A notable moment (e.g. a compile waited for: `at` since start, `s` seconds): as_dict()
        keeps the NOTES_KEPT longest of each name (by `s`), so that a run's worst stalls are told
        with when and why they happened, not only summed into a phase."""
        self.notes.setdefault(name, []).append({k: round(v, 3) if isinstance(v, float) else v
                                                for k, v in item.items()})

    def as_dict(self) -> dict[str, Any]:
        seconds = dict(self.seconds)      # a pool thread may mark while we read
        out: dict[str, Any] = {}
        for k in ORDER:
            if k in seconds:
                out[k + "_s"] = round(seconds[k], 3)
        for k in sorted(set(seconds) - set(ORDER)):
            out[k + "_s"] = round(seconds[k], 3)
        out.update({k: v for k, v in sorted(self.counts.items())})
        out.update(self.details)
        for name, items in list(self.notes.items()):
            kept = sorted(list(items), key=lambda i: -float(i.get("s") or 0.0))[:NOTES_KEPT]
            out[name] = sorted(kept, key=lambda i: float(i.get("at") or 0.0))
            out[name + "_count"] = len(items)
        return out


def format_timeline(d: dict[str, Any] | None, *, indent: str = "") -> str:
    """A few readable lines from `Timeline.as_dict()` (an empty string for None)."""
    if not d:
        return ""

    def s(key: str) -> str:
        v = d.get(key + "_s")
        return "—" if v is None else f"{v:.2f} s"

    lines = [
        f"total {s('total')}: search {s('search')}, finalize {s('finalize')} (re-measure {s('remeasure')})",
        f"GPU child {'warm, job start' if d.get('child_warm') else 'start'} {s('child_start')}, ready at {s('child_ready')} (parent waited {s('child_wait')}"
        + (f"; {_detail(d.get('child_start_detail'))}" if d.get("child_start_detail") else "") + ")",
        f"compile pool{' (warm)' if d.get('pool_warm') else ''} ready at {s('pool_ready')} "
        f"({d.get('compile_workers', '?')} workers"
        + (f", native launcher built in {s('launcher_build')}" if "launcher_build_s" in d else "")
        + f"); props {s('props')}; "
        f"study open {s('study_open')}; first compile submitted at {s('first_compile')}"
        + (f", back at {s('first_compiled')}" if "first_compiled_s" in d else "") + ", first run sent at "
        f"{s('first_run')}",
        f"compiles: {d.get('compiled', 0)} ({d.get('cubins', 0)} cubins), CPU {s('compile_cpu')} "
        f"(ptxas {s('ptxas')}), parent waited {s('compile_wait')}; lookahead {d.get('lookahead', '?')}",
        f"child: busy {s('child_busy')} (module load {s('child_load')}, first runs {s('child_first_run')}"
        + (f" (longest {d['first_run_longest_s']:.2f} s{_parts(d.get('first_run_longest_parts'))})"
           if "first_run_longest_s" in d else "") + ", "
        f"checks {s('child_check')}, measure {s('child_measure')}), "
        f"idle between requests {s('child_idle')}"
        + (f" (the next config sent on {d.get('relayed', 0)} of {d['answered']} answers)" if "answered" in d else "")
        + f", parent waited {s('child_wait_run')}",
        f"parent bookkeeping: ask {s('ask')}, record {s('record')} (then written behind {s('record_behind')})"
        + (f"; claims {s('claim')} ({d.get('claims_refused', 0)} refused)" if "claim_s" in d else "")
        + (f"; the job's lock waited for {s('lock_wait')}, held {s('lock_held')}" if "lock_held_s" in d else ""),
    ]
    if "remeasure_start_s" in d:
        lines.append(
            f"final re-measurement from {s('remeasure_start')} (finalists final at {s('finalists_final')}): "
            f"{d.get('final_rounds', 0)} rounds"
            + (f" (each 1/{round(1 / d['final_round_part'])} of one)" if d.get("final_round_part", 1.0) < 1 else "")
            + f" measured here in {s('remeasure')}, waited {s('remeasure_wait')} "
            f"for others'; the winner's rounds: {d.get('final_rounds_here', '—')} here, "
            f"{d.get('final_rounds_elsewhere', '—')} on other workers"
            + (f"; {d['rounds_while_compiling']} measured while the search's last compiles finished"
               if d.get("rounds_while_compiling") else ""))
    stalls = [_notes(d, "child_gaps", "the child left without work"),
              _notes(d, "compile_waits", "compiles waited for"),
              _notes(d, "compile_walls", "slowest compiles")]
    if any(stalls):
        lines.append("; ".join(x for x in stalls if x))
    return "\n".join(indent + line for line in lines)


def _notes(d: dict[str, Any], name: str, title: str) -> str:
    """`title` N times, the longest: S s at T s (their other fields), from Timeline.note()."""
    items = d.get(name)
    if not items:
        return ""
    told = []
    for item in items:
        extra = ", ".join(f"{k} {v}" for k, v in item.items() if k not in ("at", "s"))
        told.append(f"{item.get('s', 0):.2f} s at {item.get('at', 0):.2f} s" + (f" ({extra})" if extra else ""))
    return f"{title} {d.get(name + '_count', len(items))}×, the longest: " + ", ".join(told)


def _detail(detail: Any) -> str:
    if isinstance(detail, dict):
        return ", ".join(f"{k} {v:.2f} s" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in detail.items())
    return str(detail)


def _parts(parts: Any) -> str:
    if not isinstance(parts, dict) or not parts:
        return ""
    return ": " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
