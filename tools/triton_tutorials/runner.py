"""Run Triton's tutorials against blocktune and report, per tutorial, whether it ran and whether its
own checks against torch passed.

    python -m tools.triton_tutorials.runner TRITON_CHECKOUT [--gpu] [--only 01,06] [--timeout S]
        [--cases-per-test N] [--benchmarks run|skip] [--out DIR] [--markdown FILE] [--quiet]

Each tutorial (python/tutorials/0[1-9]-*.py of the checkout, unchanged) runs in a child process
(harness.py) with the `triton` shim first on PYTHONPATH; then its pytest tests, if it has any,
run under pytest in another. On the CPU (the default) kernels run in blocktune's interpreter and
the `perf_report` benchmarks are skipped; with --gpu they run on the GPU and print their tables
(--benchmarks skip leaves them out there too: the correctness parts alone take a minute or two).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.triton_suite import shim
from tools.triton_tutorials import checks
from tools.triton_tutorials.harness import BENCHMARKS_VAR

REPO = Path(__file__).resolve().parents[2]
TUTORIAL_GLOB = "0[1-9]-*.py"


@dataclass
class TestsResult:
    selected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_error: str = ""
    timed_out: bool = False
    collection_error: str = ""  # the tutorial did not import under pytest: no case ran


@dataclass
class TutorialReport:
    tutorial: str  # "01-vector-add"
    status: str  # ran | failed | timed out
    error: str = ""
    where: str = ""  # the tutorial's line the error came through, and blocktune's innermost
    needs_cuda: bool = False
    checks: str = "none"  # passed | failed | none (reached none) | "" for a tutorial without any
    check_detail: str = ""
    benchmarks_ran: list[str] = field(default_factory=list)
    benchmarks_skipped: list[str] = field(default_factory=list)
    tests: TestsResult | None = None
    seconds: float = 0.0


def find_tutorials(checkout: Path, only: list[str] | None = None) -> list[Path]:
    """The checkout's tutorials 01-09 (all, or those whose number or name starts with an --only item)."""
    folder = checkout / "python" / "tutorials"
    if not folder.is_dir():
        raise FileNotFoundError(f"{checkout} has no python/tutorials: not a Triton checkout")
    found = sorted(folder.glob(TUTORIAL_GLOB))
    if only:
        found = [p for p in found if any(p.stem.startswith(o.zfill(2) if o.isdigit() else o) for o in only)]
    return found


def judge_checks(harness: dict, output: str, source: str, tests: TestsResult | None) -> tuple[str, str]:
    """(verdict, detail): 'failed' when any check failed (an assert that raised, a printed ❌ or
    too large a difference, a failed pytest case), 'passed' when at least one ran and none failed,
    'none' when the tutorial has checks but none ran, '' when it has none at all."""
    sites = harness.get("check_lines", [])
    reached = harness.get("checks_reached", [])
    printed = checks.printed_checks(output)
    lines = source.splitlines()
    failures = []
    lineno = harness.get("tutorial_lineno")
    if harness.get("status") == "failed" and lineno in sites and harness.get("error_type") == "AssertionError":
        failures.append(f"line {lineno}: {lines[lineno - 1].strip()}")
        reached = [n for n in reached if n != lineno]
    failures += [p.text for p in printed if p.ok is False]
    if tests and tests.failed:
        failures.append(f"{tests.failed}/{tests.selected} pytest cases failed: {tests.first_error}")
    if tests and tests.collection_error and not checks.needs_cuda(tests.collection_error, tests.collection_error):
        failures.append(f"pytest could not import the tutorial: {tests.collection_error}")
    passed = [f"{len(reached)}/{len(sites)} check statements"] if reached else []
    printed_ok = [p for p in printed if p.ok]
    if printed_ok:
        passed.append(f"{len(printed_ok)} printed comparisons")
    if tests and tests.passed:
        passed.append(f"{tests.passed}/{tests.selected} pytest cases" + _skipped(tests))
    not_run = [p.text for p in printed if p.ok is None]
    note = f"; not run by the tutorial: {len(not_run)}" if not_run else ""
    if failures:
        return "failed", "; ".join(failures) + note
    if passed:
        return "passed", ", ".join(passed) + note
    if sites or printed or tests is not None or checks.prints_checks(source):
        return "none", f"0/{len(sites)} check statements, no printed comparison reached" + note
    return "", "the tutorial checks nothing against torch"


def _skipped(tests: TestsResult) -> str:
    # the tutorial's own skips (06 skips fp8 off Blackwell, bwd of fp8...) are not failures: say so
    return f", {tests.skipped} skipped by the tutorial" if tests.skipped else ""


def _child_env(shim_dir: Path, plugins_dir: Path, gpu: bool, benchmarks: str) -> dict:
    env = dict(os.environ)
    # the shim first; what the caller had on PYTHONPATH (carried packages) stays after blocktune
    env["PYTHONPATH"] = os.pathsep.join([str(shim_dir), str(plugins_dir), str(REPO)]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    interpret = "0" if gpu else "1"
    env["BLOCKTUNE_INTERPRET"] = env["TRITON_INTERPRET"] = interpret
    env[BENCHMARKS_VAR] = benchmarks
    env.setdefault("MPLBACKEND", "Agg")  # show_plots=True must not open a window
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_child(cmd: list[str], env: dict, cwd: Path, timeout: float, log: Path, prefix: str,
              echo: bool) -> tuple[int | None, str]:
    """Run `cmd`, echo its output (prefixed) and keep it in `log`; (exit code or None on timeout, output)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group: it and what it started
            proc.wait()
            code = None
    text = log.read_text(errors="replace")
    if echo:
        for line in text.splitlines():
            print(f"{prefix} {line}", flush=True)
    return code, text


def read_tests(junit: Path) -> TestsResult:
    """Count the cases of pytest's junit file. The tutorial lies outside pytest's rootdir, so the
    cases carry no class name: a case is its `name` (`test_op[1-2-128]`)."""
    res = TestsResult()
    if not junit.is_file():
        return res
    for tc in ET.parse(junit).getroot().iter("testcase"):
        bad = [c for c in tc if c.tag in ("failure", "error")]
        message = (bad[0].get("message") or "").strip().splitlines() if bad else []
        if bad and message in ([], ["collection failure"]):  # the exception is in the text's last E line
            message = [ln[1:].strip() for ln in (bad[0].text or "").splitlines() if ln.startswith("E ")][-1:]
        if bad and bad[0].get("message") == "collection failure":
            res.collection_error = message[0] if message else "collection failure"
            continue
        res.selected += 1
        if bad:
            res.failed += 1
            res.first_error = res.first_error or f"{tc.get('name')}: {message[0] if message else ''}"
        elif any(c.tag == "skipped" for c in tc):
            res.skipped += 1
        else:
            res.passed += 1
    return res


def run_one(path: Path, work: Path, env: dict, timeout: float, cases_per_test: int, echo: bool) -> TutorialReport:
    name = path.stem
    tdir = work / name
    tdir.mkdir(parents=True, exist_ok=True)
    result_file = tdir / "result.json"
    result_file.unlink(missing_ok=True)
    t0 = time.perf_counter()
    code, output = run_child([sys.executable, "-m", "tools.triton_tutorials.harness", str(path), "--result",
                              str(result_file)], env, tdir, timeout, tdir / "output.log", f"[{name[:2]}]", echo)
    harness = json.loads(result_file.read_text()) if result_file.is_file() else {}
    report = TutorialReport(name, harness.get("status", "failed"))
    if code is None:
        report.status, report.error = "timed out", f"still running after {timeout:.0f} s"
    elif not harness:
        report.error = f"the harness exited with {code} without a result: {output.strip().splitlines()[-1:]}"
    report.error = report.error or harness.get("error", "")
    if harness.get("tutorial_lineno"):
        report.where = f"{name}.py:{harness['tutorial_lineno']}: {harness.get('tutorial_line', '')}"
    if harness.get("blocktune"):
        report.where += f" (in compiler/{harness['blocktune']})"
    report.needs_cuda = report.status == "failed" and checks.needs_cuda(report.error, harness.get("tutorial_line", ""))
    for b in harness.get("benchmarks", []):
        (report.benchmarks_ran if b["ran"] else report.benchmarks_skipped).extend(b["names"])

    source = path.read_text()
    tests = checks.pytest_tests(source)
    if tests:
        junit = tdir / "pytest.xml"
        junit.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tools.triton_tutorials.harness",
               "-p", shim.SAMPLE_PLUGIN, "--cases-per-test", str(cases_per_test), "--rootdir", str(tdir),
               "-c", os.devnull, f"--junitxml={junit}", *[f"{path}::{t}" for t in tests]]
        code, test_output = run_child(cmd, env, tdir, timeout, tdir / "pytest.log", f"[{name[:2]} pytest]", echo)
        report.tests = read_tests(junit)
        report.tests.timed_out = code is None
        if code is None and not report.tests.first_error:
            report.tests.first_error = f"pytest still running after {timeout:.0f} s"
        output += test_output
    report.checks, report.check_detail = judge_checks(harness, output, source, report.tests)
    report.seconds = round(time.perf_counter() - t0, 1)
    return report


def _status_text(r: TutorialReport) -> str:
    if r.status == "failed" and r.needs_cuda:
        return "failed (needs CUDA)"
    return r.status


def _tests_text(tests: TestsResult | None) -> str:
    if tests is None:
        return ""
    if tests.collection_error and not tests.selected:
        return "not collected"
    return f"{tests.passed}/{tests.selected} passed" + _skipped(tests) + (" (timed out)" if tests.timed_out else "")


def print_report(reports: list[TutorialReport], console: Console, mode: str) -> None:
    table = Table(title=f"Triton's tutorials on blocktune ({mode})")
    for col in ("tutorial", "run", "checks vs torch", "pytest", "benchmarks", "s"):
        table.add_column(col)
    for r in reports:
        tests = _tests_text(r.tests)
        bench = ", ".join([f"ran {len(r.benchmarks_ran)}"] * bool(r.benchmarks_ran)
                          + [f"skipped {len(r.benchmarks_skipped)}"] * bool(r.benchmarks_skipped))
        table.add_row(r.tutorial, _status_text(r), f"{r.checks or '-'}: {r.check_detail}", tests, bench, f"{r.seconds:.0f}")
    console.print(table)
    for r in reports:
        if r.error:
            console.print(f"[bold]{r.tutorial}[/bold]: {r.error.splitlines()[0][:400]}", markup=True, highlight=False)
            if r.where:
                console.print(f"    at {r.where}", highlight=False, markup=False)


def markdown(reports: list[TutorialReport], mode: str) -> str:
    out = [f"| tutorial ({mode}) | run | checks vs torch | pytest | first error |", "|---|---|---|---|---|"]
    for r in reports:
        tests = _tests_text(r.tests)
        err = re.sub(r"\s+", " ", r.error.splitlines()[0] if r.error else "")[:160].replace("|", "\\|")
        detail = f"{r.checks or '-'} ({r.check_detail})".replace("|", "\\|")
        out.append(f"| {r.tutorial} | {_status_text(r)} | {detail} | {tests} | {err} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", type=Path, help="a Triton source checkout")
    p.add_argument("--gpu", action="store_true", help="run on the GPU, benchmarks included")
    p.add_argument("--only", default="", help="comma-separated tutorial numbers or names (default: 01-09)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per tutorial (default 1800 CPU, 900 GPU)")
    p.add_argument("--cases-per-test", type=int, default=None,
                   help="keep at most N cases of each pytest test (default 2 on the CPU, all on the GPU)")
    p.add_argument("--out", type=Path, default=REPO / ".cache" / "triton-tutorials", help="logs and report.json")
    p.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    p.add_argument("--benchmarks", choices=("run", "skip"), default=None,
                   help="run the perf_report benchmarks or skip them (default: run with --gpu, skip on the CPU)")
    p.add_argument("--quiet", action="store_true", help="don't echo the tutorials' output")
    a = p.parse_args(argv)

    checkout = a.checkout.resolve()
    tutorials = find_tutorials(checkout, [o.strip() for o in a.only.split(",") if o.strip()])
    if not tutorials:
        print(f"no tutorial in {checkout}/python/tutorials matches --only {a.only}", file=sys.stderr)
        return 2
    timeout = a.timeout or (900 if a.gpu else 1800)
    cases = a.cases_per_test if a.cases_per_test is not None else (0 if a.gpu else 2)
    a.out.mkdir(parents=True, exist_ok=True)
    shim_dir, plugins_dir = a.out / "shim", a.out / "plugins"
    shim.build(checkout, shim_dir)
    shim.write_plugins(plugins_dir)
    benchmarks = a.benchmarks or ("run" if a.gpu else "skip")
    env = _child_env(shim_dir, plugins_dir, a.gpu, benchmarks)
    mode = f"{'GPU' if a.gpu else 'CPU, interpreter'}, benchmarks {'run' if benchmarks == 'run' else 'skipped'}"

    reports = []
    for path in tutorials:
        print(f"== {path.name} ({mode})", flush=True)
        reports.append(run_one(path, a.out, env, timeout, cases, echo=not a.quiet))
    console = Console(width=200)
    print_report(reports, console, mode)
    (a.out / "report.json").write_text(json.dumps({"mode": mode, "checkout": str(checkout),
                                                    "commit": shim.checkout_commit(checkout),
                                                    "tutorials": [asdict(r) for r in reports]}, indent=1))
    if a.markdown:
        a.markdown.write_text(markdown(reports, mode))
    ok = all(r.status == "ran" and r.checks in ("passed", "") for r in reports)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
