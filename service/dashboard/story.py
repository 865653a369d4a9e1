"""Plain words for what a job page shows: why trial numbers are missing from the table, what each
trial status means, and why the search ended when it did.

Trial numbers are Optuna's: every config the sampler proposed got one, but only configs that were
run (or refused by a constraint) have a row in tuning_trials. The others are explained from the
study (service.dashboard.study)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from service.dashboard.study import StudyRecord

STATUS_MEANING = {
    "ok": "compiled, ran, gave the right result: timed",
    "invalid": "breaks one of the spec's constraints: never compiled or run, not counted in the trial budget",
    "compile-error": "the compiler refused this config (e.g. too much shared memory): not run",
    "runtime-error": "the kernel failed on the GPU (e.g. an illegal memory access) with this config",
    "wrong-result": "ran, but its outputs differ from the reference: not timed",
    "timeout": "ran longer than the spec's per-trial timeout: stopped",
}

# the tuner's stop reasons (tuner.engine), said for a reader of the page
STOP_WORDS = {
    "trial budget spent": "the trial budget (budget.trials) was spent",
    "time budget spent": "the time budget (budget.seconds) was spent",
    "search space exhausted": "every valid config of the search space was tried",
    "sampler keeps proposing known configs": "the sampler kept proposing configs already measured",
    "the rest of the trial budget is in flight on other workers": "the last trials of the budget were running "
                                                                   "on another worker sharing the job",
    "asked to stop": "the worker was asked to stop (shutdown)",
    "job is cancelled": "the job was cancelled",
}


@dataclass
class Gap:
    number: int
    kind: str          # repeat, duplicate, stopped, running, queued, pruned
    text: str


def _stop_words(reason: str) -> str:
    if reason.startswith("no improvement in "):
        return f"stopped early: {reason} (the spec's budget.patience)"
    return STOP_WORDS.get(reason, reason)


def gaps(recorded: Sequence[int], study: StudyRecord | None) -> list[Gap]:
    """One entry per trial number of the study that has no row in tuning_trials."""
    if study is None:
        return []
    have = set(recorded)
    requeued_as = {t.attrs["requeued_from"]: t.number for t in study.trials if "requeued_from" in t.attrs}
    out = []
    for t in study.trials:
        if t.number in have:
            continue
        a = t.attrs
        if "repeat_of" in a:
            out.append(Gap(t.number, "repeat", f"the sampler proposed the config of trial {a['repeat_of']} again: "
                                               "its time was reused, not measured twice"))
        elif "duplicate_of" in a:
            out.append(Gap(t.number, "duplicate", f"the same config was being measured as trial {a['duplicate_of']} "
                                                  "at that moment: not measured twice"))
        elif a.get("in_flight_elsewhere"):
            out.append(Gap(t.number, "duplicate", "the same config was being measured by another trial at that "
                                                  "moment: not measured twice"))
        elif t.state == "FAIL":
            again = requeued_as.get(t.number)
            out.append(Gap(t.number, "stopped", "asked but not run: the run stopped first (a cancel, the budget, or "
                                                "its worker died)" + (f"; its config was queued again as trial {again}"
                                                                     if again is not None else "")))
        elif t.state == "RUNNING":
            out.append(Gap(t.number, "running", "being compiled or measured now"))
        elif t.state == "WAITING":
            out.append(Gap(t.number, "queued", "queued: not asked yet"))
        else:
            out.append(Gap(t.number, t.state.lower(), f"not measured ({t.state.lower()} in Optuna)"))
    return out


def status_counts(trials: Sequence[Any]) -> list[tuple[str, int, str]]:
    """(status, how many, what it means) for the statuses present, ok first."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    order = list(STATUS_MEANING)
    return [(s, counts[s], STATUS_MEANING.get(s, s)) for s in sorted(counts, key=lambda s: (order.index(s)
                                                                                         if s in order else 99, s))]


def ending(job: Any, study: StudyRecord | None) -> str | None:
    """Why the job ended, or why it has not started; None while it runs normally."""
    done, total = job.trials_done or 0, job.trials_total
    of = f"{done} of {total}" if total else f"{done}"
    reasons = sorted(set((study.stop_reasons if study else {}).values()))
    said = "; ".join(_stop_words(r) for r in reasons)
    if job.state == "cancelled":
        return f"Cancelled after {of} trials. Trials asked but not run are listed below as stopped."
    if job.state == "failed":
        return f"Failed after {of} trials: {job.error or 'no error recorded'}."
    if job.state == "succeeded":
        if said:
            return f"Finished after {of} trials: {said}."
        if total and done >= total:
            return f"Finished after {of} trials: the trial budget was spent."
        return f"Finished after {of} trials (this run recorded no reason: it predates stop reasons)."
    return None
