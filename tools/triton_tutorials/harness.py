"""Run one Triton tutorial file, unchanged, and write what happened as JSON.

    python -m tools.triton_tutorials.harness TUTORIAL.py --result OUT.json

Run it with the `triton` shim first on PYTHONPATH (tools/triton_suite/shim.py writes it), so the
tutorial's `import triton` is blocktune's `compiler`. The file runs as `__main__` (runpy), as
`python TUTORIAL.py` would run it; the harness only watches:
- which of the tutorial's check statements ran (a line tracer limited to the tutorial's own code);
- the first error, with the tutorial's line it came through and the innermost line of blocktune;
- the `triton.testing.perf_report` benchmarks: with BLOCKTUNE_TUTORIAL_BENCHMARKS=skip their
  `.run(...)` returns at once (on the CPU a full-size sweep takes hours), and the report lists them
  as skipped; with `run` they run and print their tables.

The same module is the pytest plug-in (`-p tools.triton_tutorials.harness`) for the tutorial's
`test_*` functions, so a tutorial imported by pytest skips or runs its benchmarks the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from tools.triton_tutorials import checks

BENCHMARKS_VAR = "BLOCKTUNE_TUTORIAL_BENCHMARKS"  # "run" or "skip"
_benchmarks: list[dict] = []


def _benchmark_names(mark) -> list[str]:
    benches = mark.benchmarks if isinstance(mark.benchmarks, list) else [mark.benchmarks]
    return [getattr(b, "plot_name", "") or getattr(mark.fn, "__name__", "?") for b in benches]


def watch_benchmarks() -> None:
    """Wrap `triton.testing.Mark.run` (what `@perf_report` returns) to skip or time the sweeps."""
    import triton.testing  # noqa: PLC0415 - through the shim, once it is on sys.path

    mark_class = triton.testing.Mark
    if getattr(mark_class.run, "_tutorial_harness", False):
        return
    original = mark_class.run
    skip = os.environ.get(BENCHMARKS_VAR, "skip") == "skip"

    def run(self, *args, **kwargs):
        entry = {"names": _benchmark_names(self), "ran": not skip, "seconds": 0.0}
        _benchmarks.append(entry)
        if skip:
            print(f"[tutorial harness] benchmark {', '.join(entry['names'])}: skipped ({BENCHMARKS_VAR}=skip)")
            return None
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            entry["seconds"] = round(time.perf_counter() - t0, 3)

    run._tutorial_harness = True
    mark_class.run = run


class CheckTracer:
    """Records which check lines of one file run. The global hook answers 'call' events only, and
    returns a line tracer for frames of that file alone, so blocktune's own code runs untraced."""

    def __init__(self, path: str, lines):
        self.path, self.lines, self.reached = path, frozenset(lines), set()

    def _line(self, frame, event, arg):
        if event == "line" and frame.f_lineno in self.lines:
            self.reached.add(frame.f_lineno)
        return self._line

    def _call(self, frame, event, arg):
        return self._line if frame.f_code.co_filename == self.path else None

    def __enter__(self):
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)


def _describe_error(exc: BaseException, path: str, source_lines: list[str]) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    in_tutorial = [f for f in frames if f.filename == path]
    in_blocktune = [f for f in frames if f"{os.sep}compiler{os.sep}" in f.filename]
    message = f"{type(exc).__name__}: {exc}".strip()
    where = {}
    if in_tutorial:
        last = in_tutorial[-1]
        where = {"tutorial_lineno": last.lineno,
                 "tutorial_line": source_lines[last.lineno - 1].strip() if last.lineno <= len(source_lines) else ""}
    if in_blocktune:
        f = in_blocktune[-1]
        where["blocktune"] = f"{f.filename.split(os.sep + 'compiler' + os.sep, 1)[-1]}:{f.lineno} ({f.name})"
    return {"error": message[:2000], "error_type": type(exc).__name__, **where}


def run_tutorial(path: str) -> dict:
    """Run the tutorial as `__main__` and describe the run (see the module's docstring)."""
    path = os.path.abspath(path)
    source = Path(path).read_text()
    sites = checks.check_sites(source)
    result = {"tutorial": Path(path).stem, "status": "ran", "check_lines": sites}
    sys.argv = [path]  # the tutorial's own argparse (09) sees no harness options
    t0 = time.perf_counter()
    tracer = CheckTracer(path, sites)
    try:
        watch_benchmarks()  # inside the try: a shim that cannot import is this tutorial's failure too
        with tracer:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            result.update(status="failed", error=f"SystemExit: {e.code}", error_type="SystemExit")
    except BaseException as e:  # noqa: BLE001 - every failure of the tutorial is the report's subject
        result.update(status="failed", **_describe_error(e, path, source.splitlines()))
        traceback.print_exc()
    result["seconds"] = round(time.perf_counter() - t0, 3)
    result["checks_reached"] = sorted(tracer.reached)
    result["benchmarks"] = _benchmarks
    return result


def pytest_configure(config):  # the plug-in side: a tutorial imported by pytest
    watch_benchmarks()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tutorial", help="the tutorial's .py file")
    p.add_argument("--result", required=True, type=Path, help="where to write the JSON description")
    a = p.parse_args(argv)
    result = run_tutorial(a.tutorial)
    sys.stdout.flush()
    a.result.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
