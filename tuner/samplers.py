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


class FirstDrawsSampler(optuna.samplers.BaseSampler):
    """`base`, except that this process's first new trials take configs drawn before the study
    opened (a worker joining a job compiles them while its study opens: tuner/study.py
    `first_draws`). They are what a random proposal is — uniform over the valid configs — and are
    handed out only while `base` would propose at random too (a random sampler; TPE before its
    start-up trials are done). An enqueued trial (fixed params) takes none."""

    def __init__(self, base: optuna.samplers.BaseSampler, draws: list[dict],
                 distributions: dict[str, optuna.distributions.BaseDistribution]):
        self.base = base
        self._draws = list(draws)
        self._distributions = dict(distributions)
        self._drawing: int | None = None         # the trial whose relative space is the draws'

    def infer_relative_search_space(self, study, trial):
        if self._draws:
            self._drawing = trial.number
            return dict(self._distributions)
        self._drawing = None
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        if self._drawing is not None and self._drawing == trial.number and self._draws:
            self._drawing = None
            return dict(self._draws.pop(0))
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


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
