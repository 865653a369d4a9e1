"""What a tuning job is, in one place for every part of blocktune: the job spec, the problem key,
the config's built-in options and the device a job's constraints see.

    from jobspec import JobSpec, load_spec
    spec = load_spec("add.yaml")                    # validated: pydantic.ValidationError otherwise
    spec.problem_key()                              # {"n_elements": 98432}

model.py        JobSpec (and its parts), load_spec, parse_spec_text, read_spec_data; ProblemKey
safe_eval.py    the expression language of grids, constraints and derived scalars (never Python)
problem_key.py  a problem key's format: canonical_key() and its bounds (no pydantic)
config.py       CONFIG_BUILTINS (num_warps, num_stages), their DEFAULTS, split_config()
device.py       DEVICE_NAMES that constraints see, device_env(), the CPU interpreter's stand-in

It imports nothing else of ours (pydantic and PyYAML only, in model.py), so the tuner, the service,
the CLI and the stand-alone client all use it (docs/contracts.md). The names below load model.py on
first use: the client's launch-time lookup imports problem_key.py and device.py without pydantic.
"""
from __future__ import annotations

__all__ = ["JobSpec", "load_spec", "parse_spec_text", "read_spec_data"]


def __getattr__(name: str):
    if name in __all__:
        from jobspec import model  # noqa: PLC0415 - on first use (see the module doc)
        return getattr(model, name)
    raise AttributeError(f"module 'jobspec' has no attribute {name!r}")
