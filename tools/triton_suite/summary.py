"""Compare two junit XML runs of Triton's tests: Triton's own interpreter and blocktune.

    python -m tools.triton_suite.summary --reference triton.xml --blocktune blocktune.xml [--markdown OUT]

Prints, per test function, the cases each side passed; the share of the cases Triton passes that
blocktune passes too (the measure of issue 13: >= 95%); and blocktune's failures among those cases
grouped by their error, most frequent first, so the next thing to implement is on top.
"""
from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class Case:
    function: str  # "language/test_core.py::test_bin_op" (the module for a collection error)
    name: str  # the full test id, parameters included
    outcome: str  # passed | failed | skipped
    message: str = ""  # the failure's first line ("" for passes and skips)


def _test_file(classname: str) -> str:
    """junit's dotted classname -> the test file ("language.test_core" -> "language/test_core.py");
    a test in a class keeps the class ("language.test_core.TestX" -> "language/test_core.py::TestX")."""
    parts = classname.split(".")
    if parts[:3] == ["python", "test", "unit"]:  # run from a Triton checkout's root
        parts = parts[3:]
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_") or parts[i - 1] == "conftest":
            return "/".join(parts[:i]) + ".py" + "".join("::" + p for p in parts[i:])
    return classname.replace(".", "/")


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def read_junit(path: Path) -> dict[str, Case]:
    """Every test case of a junit XML file by its id (`file::function[params]`)."""
    cases: dict[str, Case] = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        classname, name = tc.get("classname", ""), tc.get("name", "")
        if classname:
            test_id = f"{_test_file(classname)}::{name}"
            function = test_id.split("[", 1)[0]
        else:  # a module that failed to collect
            test_id = function = _test_file(name)
        outcome, message = PASSED, ""
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = FAILED
                message = child.get("message", "")
                if message in ("", "collection failure"):  # the exception is in the text's E lines
                    e_lines = [ln[1:].strip() for ln in (child.text or "").splitlines() if ln.startswith("E ")]
                    message = e_lines[-1] if e_lines else child.text or message
                message = _first_line(message)
                break
            if child.tag == "skipped":
                outcome = SKIPPED
        if test_id in cases and cases[test_id].outcome == FAILED:
            continue  # an error in teardown after a failure: keep the first report
        if test_id in cases and outcome == PASSED:
            continue  # pytest reports a teardown error as a second entry of a passed test
        cases[test_id] = Case(function, test_id, outcome, message)
    return cases


def read_all(paths) -> dict[str, Case]:
    """The cases of several junit files of one side (runs of different selections)."""
    cases: dict[str, Case] = {}
    for path in paths:
        cases.update(read_junit(path))
    return cases


_LOCATION = re.compile(r"^(?:\S+?:\d+:\d+:\s*|at \d+:\d+:\s*)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")  # also inside type names: u8/i32 and u16/i64 are one error
_MISSING_ATTR = re.compile(r"(?:module |type object |)'?([\w.]+)'?(?: object)? has no attribute '(\w+)'")
_QUOTED_NAME = re.compile(r"'[\w.]+'")
_MISSING_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def error_group(message: str) -> str:
    """A failure message reduced to what tells failures apart: the missing module, name or
    attribute when it is one, else the exception's first line without file positions and numbers."""
    msg = message.strip()
    m = _MISSING_MODULE.search(msg)
    if m:
        return f"missing module {m.group(1)}"
    m = _MISSING_NAME.search(msg)
    if m:
        return f"missing name {m.group(2)}.{m.group(1)}"
    m = _MISSING_ATTR.search(msg)
    if m:
        return f"missing attribute {m.group(1)}.{m.group(2)}"
    exc, sep, rest = msg.partition(": ")
    if sep and re.fullmatch(r"[\w.]+", exc):
        exc = exc.rsplit(".", 1)[-1]
        rest = _LOCATION.sub("", rest)
    else:
        exc, rest = "", _LOCATION.sub("", msg)
    rest = _QUOTED_NAME.sub("'…'", _NUMBER.sub("N", rest))  # the kernel's or a variable's name
    if len(rest) > 110:
        rest = rest[:107] + "..."
    return f"{exc}: {rest}" if exc else rest or "(no message)"


@dataclass
class FunctionRow:
    function: str
    cases: int = 0
    reference_passed: int = 0
    blocktune_passed: int = 0
    both_passed: int = 0


@dataclass
class Comparison:
    rows: list[FunctionRow]
    reference_passed: int
    blocktune_passed: int
    both_passed: int
    total: int
    groups: list[tuple[str, int, list[str]]] = field(default_factory=list)  # (error, cases, functions)
    not_run: int = 0  # reference cases outside blocktune's run, left out of the comparison

    @property
    def share(self) -> float:
        """The share of the cases Triton's interpreter passes that blocktune passes too."""
        return self.both_passed / self.reference_passed if self.reference_passed else 0.0


def compare(reference: dict[str, Case], blocktune: dict[str, Case]) -> Comparison:
    """Line up the two runs case by case. A case Triton's run lacks counts as not passed there; one
    blocktune's run lacks is left out, unless its module failed to collect in blocktune's run (the
    error then stands for all of the module's cases)."""
    rows: dict[str, FunctionRow] = {}
    group_cases: Counter = Counter()
    group_functions: dict[str, list[str]] = defaultdict(list)
    not_run = 0
    for test_id in sorted(set(reference) | set(blocktune)):
        ref, bt = reference.get(test_id), blocktune.get(test_id)
        function = (ref or bt).function
        if bt is None and _module_error(blocktune, function) is None:
            not_run += 1  # outside blocktune's selection (-k, paths), or its run was cut short
            continue
        row = rows.setdefault(function, FunctionRow(function))
        row.cases += 1
        ref_ok = ref is not None and ref.outcome == PASSED
        bt_ok = bt is not None and bt.outcome == PASSED
        row.reference_passed += ref_ok
        row.blocktune_passed += bt_ok
        row.both_passed += ref_ok and bt_ok
        if ref_ok and not bt_ok:
            group = "collection: " + error_group(_module_error(blocktune, function).message) if bt is None else (
                error_group(bt.message) if bt.outcome == FAILED else "skipped by blocktune's run")
            group_cases[group] += 1
            if function not in group_functions[group]:
                group_functions[group].append(function)
    ordered = sorted(rows.values(), key=lambda r: r.function)
    groups = [(g, n, group_functions[g]) for g, n in group_cases.most_common()]
    return Comparison(ordered, sum(r.reference_passed for r in ordered), sum(r.blocktune_passed for r in ordered),
                      sum(r.both_passed for r in ordered), sum(r.cases for r in ordered), groups, not_run)


def _module_error(blocktune: dict[str, Case], function: str) -> Case | None:
    """The collection error of the function's module in blocktune's run, if it failed to import."""
    err = blocktune.get(function.split("::", 1)[0])
    return err if err is not None and err.outcome == FAILED else None


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def render(c: Comparison, console: Console, only_gaps: bool = False, max_groups: int = 30,
           reference: str = "Triton's interpreter") -> None:
    table = Table(title=f"Triton's tests: {reference} vs blocktune (passed / cases)")
    table.add_column("test function", overflow="fold")
    table.add_column("cases", justify="right")
    table.add_column("triton", justify="right")
    table.add_column("blocktune", justify="right")
    table.add_column("of triton's", justify="right")
    for r in c.rows:
        if only_gaps and r.both_passed == r.reference_passed:
            continue
        style = "green" if r.both_passed == r.reference_passed else "red" if r.both_passed == 0 else "yellow"
        table.add_row(r.function, str(r.cases), str(r.reference_passed), str(r.blocktune_passed),
                      f"[{style}]{r.both_passed}/{r.reference_passed}[/]" if r.reference_passed else "-")
    console.print(table)
    console.print(f"cases: {c.total}; {reference} passes {c.reference_passed}, blocktune {c.blocktune_passed}"
                  + (f" ({c.not_run} cases of Triton's run are not in blocktune's and left out)" if c.not_run else ""))
    console.print(f"[bold]blocktune passes {_pct(c.both_passed, c.reference_passed)} of the cases "
                  f"{reference} passes[/] ({c.both_passed}/{c.reference_passed}; target 95%)")
    groups = Table(title="blocktune's failures among the cases Triton passes, by error")
    groups.add_column("cases", justify="right")
    groups.add_column("error", overflow="fold")
    groups.add_column("test functions", overflow="fold")
    for g, n, fns in c.groups[:max_groups]:
        names = ", ".join(f.rsplit("::", 1)[-1] for f in fns[:4]) + (f" (+{len(fns) - 4})" if len(fns) > 4 else "")
        groups.add_row(str(n), g, names)
    console.print(groups)


def markdown(c: Comparison, max_groups: int = 40, reference: str = "Triton's interpreter") -> str:
    """The same report as Markdown tables, for docs/compatibility.md."""
    out = ["| test function | cases | triton | blocktune | of triton's |", "|---|--:|--:|--:|--:|"]
    for r in c.rows:
        out.append(f"| `{r.function}` | {r.cases} | {r.reference_passed} | {r.blocktune_passed} | "
                   f"{r.both_passed}/{r.reference_passed} |")
    out += ["", f"**blocktune passes {_pct(c.both_passed, c.reference_passed)} of the cases {reference} "
            f"passes** ({c.both_passed}/{c.reference_passed}; {c.total} cases run; {reference} passes "
            f"{c.reference_passed}, blocktune {c.blocktune_passed}).", "",
            "| cases | error | test functions |", "|--:|---|---|"]
    for g, n, fns in c.groups[:max_groups]:
        names = ", ".join(f.rsplit("::", 1)[-1] for f in fns[:4]) + (f" (+{len(fns) - 4})" if len(fns) > 4 else "")
        out.append(f"| {n} | {g.replace('|', '/')} | {names} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, action="append", required=True,
                   help="junit XML of Triton's own run (repeat for several)")
    p.add_argument("--blocktune", type=Path, action="append", required=True,
                   help="junit XML of blocktune's run (repeat for several)")
    p.add_argument("--markdown", type=Path, help="also write the report as Markdown here")
    p.add_argument("--reference-name", default="Triton's interpreter",
                   help="what made the reference run, for the report (e.g. 'Triton on the GPU')")
    p.add_argument("--only-gaps", action="store_true", help="list only the functions where blocktune passes less")
    a = p.parse_args(argv)
    c = compare(read_all(a.reference), read_all(a.blocktune))
    console = Console()
    if not console.is_terminal:  # a log file or a pipe: don't fold the test names at 80 columns
        console = Console(width=160)
    render(c, console, only_gaps=a.only_gaps, reference=a.reference_name)
    if a.markdown:
        a.markdown.write_text(markdown(c, reference=a.reference_name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
