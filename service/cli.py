"""The `blocktune` command: one entry point, each part of the product adds its own subcommands.

Subcommand modules are imported lazily so that `blocktune compile` never imports the web stack.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# module → the subcommands it registers through `register(subparsers)`
_PARTS = {
    "compiler.cli": ("compile",),
    "tuner.cli": ("tune", "best", "gpus"),
    "service.commands": ("serve", "worker", "token", "migrate"),
    "client.cli": ("submit",),
}


def _build_parser(only: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="blocktune", description="Triton-compatible kernel compiler and tuning service")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module, commands in _PARTS.items():
        if only is not None and only not in commands:
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(module.split(".")[0]):
                continue  # that part is not built in this checkout
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(first if first in {c for cs in _PARTS.values() for c in cs} else None)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
