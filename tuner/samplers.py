"""Optuna samplers for tuning: TPE (default), brute force (when everything fits the budget), random."""
from __future__ import annotations

import warnings

import optuna

CONSTRAINT_KEY = "infeasible"


def mark(trial: optuna.trial.Trial, feasible: bool) -> None:
    """Tell Optuna whether the trial's config was usable. TPE ranks infeasible trials (constraint
    violated, compile error, out of resources, fault, hang, wrong result) below every feasible one,
    so it learns to stay away from them (Optuna ≥ 5: `Trial.set_constraint`)."""
    trial.set_constraint(CONSTRAINT_KEY, 0.0 if feasible else 1.0)


class AskTellBruteForceSampler(optuna.samplers.BruteForceSampler):
    """Optuna's brute-force sampler, driven by ask/tell.

    Its only after-trial work is `study.stop()` once the grid is exhausted, which Optuna allows
    inside `optimize()` only; the engine stops by itself when every valid config has been tried.
    """

    def after_trial(self, study, trial, state, values) -> None:
        return None


def choose_kind(requested: str, n_valid: int, budget_trials: int | None) -> str:
    """`auto`: brute force when every valid config fits in the trial budget, else TPE."""
    if requested != "auto":
        return requested
    if budget_trials is not None and n_valid <= budget_trials:
        return "brute"
    return "tpe"


def make_sampler(kind: str, *, seed: int | None = None, constant_liar: bool = False,
                 n_startup_trials: int = 10) -> optuna.samplers.BaseSampler:
    if kind == "tpe":
        return optuna.samplers.TPESampler(
            multivariate=True, group=False, constant_liar=constant_liar, seed=seed,
            n_startup_trials=n_startup_trials)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "brute":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return AskTellBruteForceSampler(seed=seed, avoid_premature_stop=True)
    raise ValueError(f"unknown sampler {kind!r}")
