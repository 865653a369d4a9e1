"""The search space: enumeration, Optuna encoding, constraints, known-good configs."""
from __future__ import annotations

import itertools
import json
import math
from typing import Any, Iterator, Mapping

import optuna

from jobspec.config import DEFAULTS
from jobspec.safe_eval import SafeEvalError, safe_eval



def config_key(config: Mapping[str, Any]) -> str:
    """Canonical text of a config (sorted keys), for de-duplication and lookups."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def _is_ordinal(values: list) -> bool:
    return (len(values) >= 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values))


class SearchSpace:
    """Lists of values per parameter (constexprs, num_warps, num_stages).

    Numeric parameters with three or more values are given to Optuna as an integer index into
    the sorted list (so TPE sees their order: powers of two become a log scale); others as
    categorical. The decoded config is kept on every Optuna trial as the user attribute `config`.
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
        out = {}
        for name, values in self.params.items():
            if _is_ordinal(values):
                out[name] = optuna.distributions.IntDistribution(0, len(values) - 1)
            else:
                out[name] = optuna.distributions.CategoricalDistribution(values)
        return out

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        config = {}
        for name, dist in self.distributions().items():
            if isinstance(dist, optuna.distributions.IntDistribution):
                config[name] = self.params[name][trial.suggest_int(name, dist.low, dist.high)]
            else:
                config[name] = trial.suggest_categorical(name, dist.choices)
        return config

    def encode(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna params for `config` (for enqueue_trial)."""
        out = {}
        for name, values in self.params.items():
            out[name] = values.index(config[name]) if _is_ordinal(values) else config[name]
        return out

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, values in self.params.items():
            out[name] = values[int(params[name])] if _is_ordinal(values) else params[name]
        return out

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
