"""A config: values for the kernel's tuned constexprs, plus the two launch options every config has.

`num_warps` and `num_stages` are searched like any other parameter, but they are options of the
launch, not arguments of the kernel; a config that does not give them gets Triton's defaults.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

CONFIG_BUILTINS = ("num_warps", "num_stages")
DEFAULTS = {"num_warps": 4, "num_stages": 3}


def split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], int, int]:
    """(constexprs, num_warps, num_stages) of a config."""
    constexprs = {k: v for k, v in config.items() if k not in CONFIG_BUILTINS}
    return (constexprs, int(config.get("num_warps", DEFAULTS["num_warps"])),
            int(config.get("num_stages", DEFAULTS["num_stages"])))


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical text of a config (sorted keys), for de-duplication and lookups."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))
