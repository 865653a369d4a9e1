"""The search space: enumeration, Optuna encoding, constraints, known-good configs."""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Mapping

import optuna

from jobspec.config import DEFAULTS, config_key, split_config  # noqa: F401 - config_key: the tuner's name for it
from jobspec.safe_eval import SafeEvalError, safe_eval


def _is_ordinal(values: list) -> bool:
    return (len(values) >= 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values))


def _even_step(values: list) -> int | None:
    """The step of a sorted list of three or more distinct integers spaced evenly (1, 2, 3, 4 or
    32, 64, 96), which Optuna's IntDistribution(first, last, step) holds exactly; else None."""
    if len(values) < 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    step = values[1] - values[0]
    if step <= 0 or any(b - a != step for a, b in zip(values, values[1:])):
        return None
    return step


def compile_cost_hint(config: dict[str, Any]) -> float:
    """How long a config takes to compile, relatively: the elements of its tiles (the product of
    its BLOCK* constexprs) each thread handles, which is what the unrolled code grows with (a matmul
    tile 64x256x128 on 2 warps: 4x the elements a thread of 128x256x64 on 8 has; 2.0 s against 0.25 s
    to compile on the H100 host)."""
    constexprs, num_warps, _ = split_config(config)
    tile = 1.0
    for name, value in constexprs.items():
        if "BLOCK" in name.upper() and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            tile *= value
    return tile / (32 * num_warps)


class SearchSpace:
    """Lists of values per parameter (constexprs, num_warps, num_stages).

    Optuna is given the real values, so that its trials (and optuna-dashboard) show BLOCK_SIZE=1024,
    not a position in a list: an evenly spaced list of integers (num_stages 1, 2, 3, 4) as an
    integer range with that step, which keeps its order for TPE; any other list (powers of two,
    strings) as categorical. Numeric lists are sorted. The config is also kept on every Optuna
    trial as the user attribute `config`.
    """

    def __init__(self, params: Mapping[str, list], constraints: list[str] | None = None):
        self.params: dict[str, list] = {}
        for name, values in params.items():
            vals = list(values)
            self.params[name] = sorted(vals) if _is_ordinal(vals) else vals
        self.constraints = list(constraints or [])

    @classmethod
    def from_spec(cls, spec) -> "SearchSpace":
        return cls(spec.full_space(), spec.constraints)

    # --- enumeration ------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return list(self.params)

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.params.values())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for combo in itertools.product(*self.params.values()):
            yield dict(zip(self.params, combo))

    def __contains__(self, config: Mapping[str, Any]) -> bool:
        return set(config) == set(self.params) and all(config[k] in v for k, v in self.params.items())

    # --- constraints ------------------------------------------------------------------------

    def violations(self, config: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
        """The constraints `config` breaks (an expression that cannot be evaluated counts as broken)."""
        scope = {**env, **config}
        bad = []
        for c in self.constraints:
            try:
                if not safe_eval(c, scope):
                    bad.append(c)
            except SafeEvalError as exc:
                bad.append(f"{c} ({exc})")
        return bad

    def valid_configs(self, env: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [c for c in self if not self.violations(c, env)]

    # --- Optuna -----------------------------------------------------------------------------

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        out: dict[str, optuna.distributions.BaseDistribution] = {}
        for name, values in self.params.items():
            step = _even_step(values)
            if step is not None:
                out[name] = optuna.distributions.IntDistribution(values[0], values[-1], step=step)
            else:
                out[name] = optuna.distributions.CategoricalDistribution(values)
        return out

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        config = {}
        for name, dist in self.distributions().items():
            if isinstance(dist, optuna.distributions.IntDistribution):
                config[name] = trial.suggest_int(name, dist.low, dist.high, step=dist.step)
            else:
                config[name] = trial.suggest_categorical(name, dist.choices)
        return config

    def encode(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna params for `config` (for enqueue_trial): its values, in the space's order."""
        return {name: config[name] for name in self.params}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {name: params[name] for name in self.params}

    def complete(self, partial: Mapping[str, Any]) -> dict[str, Any] | None:
        """Fill a partial known-good config: num_warps/num_stages from Triton's defaults (or the
        nearest value in the space). None if a constexpr is missing or a value is outside the space."""
        config = {}
        for name, values in self.params.items():
            if name in partial:
                if partial[name] not in values:
                    return None
                config[name] = partial[name]
            elif name in DEFAULTS:
                want = DEFAULTS[name]
                config[name] = min(values, key=lambda v: (abs(v - want), v))
            else:
                return None
        return config
