"""Read a `.hatchet` profile and print its tree: proton's `viewer.parse(metrics, file)` and
`viewer.print_tree(tree, metrics)`, without hatchet/pandas.

Metrics (case-insensitive, units optional), as proton's viewer derives them from the file's
inclusive sums:
  time/s, time/ms, time/us, time/ns           time (ns)
  avg_time/s ... avg_time/ns                   time / count
  cpu_time/..., avg_cpu_time/...               cpu_time (ns)(exc)
  flop/s, gflop/s, tflop/s                     flops / time
  flop<W>/s, gflop<W>/s, tflop<W>/s            flops<W> / time  (W = 8, 16, 32, 64)
  byte/s, gbyte/s, tbyte/s                     bytes / time
  <metric>/%                                   the frame's share of the root's (inclusive) value
  <metric>                                     a raw metric of the file (count, bytes, flops16 ...)
Derived and inclusive columns are named "<metric> (inc)".

    python -m compiler.profiler.viewer -m tflop16/s,time/ms matmul.hatchet
"""
from __future__ import annotations

import argparse
import json
import math
import re
from typing import Optional

from .data import INTERPRETER_DEVICE

METADATA_SCOPE = "__proton_launch_metadata"
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_BYTE_SCALES = {"byte/s": 1.0, "gbyte/s": 1e9, "tbyte/s": 1e12}
_FLOP_SCALES = {"": 1.0, "g": 1e9, "t": 1e12}


class Frame:
    __slots__ = ("name", "metrics", "children", "inc")

    def __init__(self, name: str, metrics: dict, children: list):
        self.name = name
        self.metrics = metrics          # exclusive values as in the file
        self.children = children
        self.inc: dict = {}             # inclusive sums and derived columns


class ProfileTree:
    """What `parse` returns: the frames (root first), the device list, and the metric names."""

    def __init__(self, root: Frame, devices: dict, inclusive: list[str], exclusive: list[str]):
        self.root = root
        self.devices = devices
        self.inclusive_metrics = inclusive
        self.exclusive_metrics = exclusive

    def frames(self):
        stack = [self.root]
        while stack:
            f = stack.pop()
            yield f
            stack.extend(reversed(f.children))

    @property
    def interpreted(self) -> bool:
        return INTERPRETER_DEVICE in self.devices


def _load_frame(node: dict) -> Optional[Frame]:
    name = node.get("frame", {}).get("name", "")
    if name == METADATA_SCOPE:
        return None
    children = [c for c in (_load_frame(ch) for ch in node.get("children", [])) if c is not None]
    metrics = node.get("metrics", {})
    if not metrics and not children:   # a scope with nothing recorded (proton's viewer drops it too)
        return None
    return Frame(name, metrics, children)


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read(filename: str) -> ProfileTree:
    with open(filename) as f:
        database = json.load(f)
    if not isinstance(database, list) or not database or not isinstance(database[0], dict):
        raise ValueError(f"{filename}: not a hatchet profile (a JSON list [tree, devices])")
    root = _load_frame(database[0]) or Frame(database[0].get("frame", {}).get("name", "ROOT"), {}, [])
    devices = database[1] if len(database) > 1 and isinstance(database[1], dict) else {}
    inclusive = [k for k, v in database[0].get("metrics", {}).items() if _numeric(v)]
    seen: set[str] = set(inclusive)
    exclusive: list[str] = []
    stack = [root]
    while stack:
        fr = stack.pop()
        stack.extend(fr.children)
        for k, v in fr.metrics.items():
            if _numeric(v) and k not in seen:
                seen.add(k)
                (exclusive if k.endswith("(exc)") else inclusive).append(k)
    if not inclusive and not exclusive:
        raise ValueError(f"{filename}: no metrics found")

    def sums(fr: Frame) -> dict:
        total = {k: fr.metrics[k] for k in inclusive if _numeric(fr.metrics.get(k))}
        for c in fr.children:
            for k, v in sums(c).items():
                total[k] = total.get(k, 0) + v
        fr.inc = {f"{k} (inc)": v for k, v in total.items()}
        return total

    sums(root)
    return ProfileTree(root, devices, inclusive, exclusive)


def _match(tree: ProfileTree, metric: str) -> str:
    """The column of a raw metric named with or without its unit ('time' → 'time (ns) (inc)')."""
    want = metric.lower()
    for raw in tree.inclusive_metrics + tree.exclusive_metrics:
        if want in (raw.lower(), raw.split("(")[0].strip().lower()):
            return f"{raw} (inc)" if raw in tree.inclusive_metrics else raw
    raise RuntimeError(f"Metric {metric} is not found. Available: "
                       f"{', '.join(tree.inclusive_metrics + tree.exclusive_metrics)}")


def _value(fr: Frame, column: str):
    if column.endswith(" (inc)") and column in fr.inc:
        return fr.inc[column]
    return fr.inc.get(column, fr.metrics.get(column))


def _seconds(tree: ProfileTree, fr: Frame, name: str):
    column = _match(tree, name)
    v = _value(fr, column)
    unit = re.search(r"\((\w+)\)", column)
    return None if v is None else v * _TIME_UNITS[unit.group(1) if unit else "ns"]


def _ratio(a, b):
    if a is None or b is None or b == 0:
        return math.nan
    return a / b


def derive_metrics(tree: ProfileTree, metrics: list[str]) -> list[str]:
    columns = []
    for metric in metrics:
        m = metric.lower()
        column = f"{m} (inc)"
        time_m = re.fullmatch(r"(avg_)?(cpu_)?time/(s|ms|us|ns)", m)
        flop_m = re.fullmatch(r"([gt]?)flop(8|16|32|64)?/s", m)
        if time_m:
            avg, cpu, unit = time_m.groups()
            base = "cpu_time" if cpu else "time"
            for fr in tree.frames():
                secs = _seconds(tree, fr, base)
                if avg:
                    secs = _ratio(secs, _value(fr, _match(tree, "count")))
                fr.inc[column] = math.nan if secs is None else secs / _TIME_UNITS[unit]
        elif flop_m:
            scale, width = flop_m.groups()
            source = _match(tree, f"flops{width or ''}")
            for fr in tree.frames():
                fr.inc[column] = _ratio(_value(fr, source), _seconds(tree, fr, "time")) / _FLOP_SCALES[scale]
        elif m in _BYTE_SCALES:
            source = _match(tree, "bytes")
            for fr in tree.frames():
                fr.inc[column] = _ratio(_value(fr, source), _seconds(tree, fr, "time")) / _BYTE_SCALES[m]
        elif m.endswith("/%"):
            source = _match(tree, m[:-2])
            total = _value(tree.root, source)
            column = f"{m} (inc)" if source.endswith("(inc)") else m
            for fr in tree.frames():
                fr.inc[column] = _ratio(_value(fr, source), total) * 100.0
        elif m == "util":
            raise ValueError("metric 'util' needs the GPU's peak rates (proton's specs); blocktune's viewer "
                             "does not derive it: use tflop<W>/s and gbyte/s")
        elif "/" in m:
            raise ValueError(f"Unsupported unit {m.split('/', 1)[1]} in metric {metric!r}")
        else:
            column = _match(tree, m)
        columns.append(column)
    return columns


def filter_frames(tree: ProfileTree, include: Optional[str] = None, exclude: Optional[str] = None,
                  threshold: Optional[float] = None, metric: Optional[str] = None) -> ProfileTree:
    """Keep frames on a path to a frame whose name matches `include`, drop the subtrees of frames
    matching `exclude`, and drop frames whose `metric` is below `threshold` (the root stays)."""
    def keep(fr: Frame) -> Optional[Frame]:
        if exclude and re.search(exclude, fr.name):
            return None
        if threshold is not None and metric is not None:
            v = _value(fr, metric)
            if v is None or (isinstance(v, float) and math.isnan(v)) or v < threshold:
                return None
        kids = [k for k in (keep(c) for c in fr.children) if k is not None]
        if include and not re.search(include, fr.name) and not kids:
            return None
        fr.children = kids
        return fr

    root = tree.root
    root.children = [k for k in (keep(c) for c in root.children) if k is not None]
    return tree


def parse(metrics, filename: str, include: Optional[str] = None, exclude: Optional[str] = None,
          threshold: Optional[float] = None):
    """(tree, metric columns): the profile with the derived metrics computed for every frame."""
    tree = read(filename)
    columns = derive_metrics(tree, metrics if isinstance(metrics, list) else [metrics])
    tree = filter_frames(tree, include, exclude, threshold, columns[0])
    return tree, columns


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    if isinstance(v, int):
        return str(v)
    return f"{v:.3f}"


def format_tree(tree: ProfileTree, metrics: list[str], depth: int = 100) -> str:
    lines = []
    if tree.interpreted:
        lines.append("(times are wall time of blocktune's CPU interpreter, not GPU time)")

    def walk(fr: Frame, prefix: str, last: bool, level: int, is_root: bool):
        values = " ".join(_fmt(_value(fr, m)) for m in metrics)
        if is_root:
            lines.append(f"{values} {fr.name}")
            child_prefix = ""
        else:
            lines.append(f"{prefix}{'└─' if last else '├─'} {values} {fr.name}")
            child_prefix = prefix + ("   " if last else "│  ")
        if level + 1 > depth:
            return
        for i, c in enumerate(fr.children):
            walk(c, child_prefix, i == len(fr.children) - 1, level + 1, False)

    walk(tree.root, "", True, 0, True)
    return "\n".join(lines)


def print_tree(tree: ProfileTree, metrics: list[str], depth: int = 100, format=None, print_sorted: bool = False):
    """Print the tree with the metric columns (`parse`'s), the root first."""
    if format not in (None, "full"):
        raise ValueError(f"format={format!r}: blocktune's frames are names only (no file/function/line)")
    print(format_tree(tree, metrics, depth))
    if print_sorted:
        print("Sorted kernels by metric " + metrics[0])
        rows = sorted((f for f in tree.frames() if f is not tree.root),
                      key=lambda f: -(_value(f, metrics[0]) or 0))
        for f in rows:
            name = f.name[:100] + "..." if len(f.name) > 100 else f.name
            print(f"{name:105} {_fmt(_value(f, metrics[0]))}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Print a .hatchet profile's tree (blocktune's proton viewer).")
    p.add_argument("file")
    p.add_argument("-m", "--metrics", default="time/s", help="comma-separated metrics (see the module doc)")
    p.add_argument("-l", "--list", action="store_true", help="list the file's metrics")
    p.add_argument("-i", "--include")
    p.add_argument("-e", "--exclude")
    p.add_argument("-t", "--threshold", type=float)
    p.add_argument("-d", "--depth", type=int, default=100)
    p.add_argument("--print-sorted", action="store_true")
    a = p.parse_args(argv)
    if a.list:
        tree = read(a.file)
        print("Available inclusive metrics:\n" + "".join(f"- {m}\n" for m in tree.inclusive_metrics), end="")
        print("Available exclusive metrics:\n" + "".join(f"- {m}\n" for m in tree.exclusive_metrics), end="")
        return
    tree, columns = parse(a.metrics.split(","), a.file, a.include, a.exclude, a.threshold)
    print_tree(tree, columns, a.depth, print_sorted=a.print_sorted)


if __name__ == "__main__":
    main()

__all__ = ["parse", "print_tree", "read", "derive_metrics", "filter_frames", "format_tree", "ProfileTree"]
