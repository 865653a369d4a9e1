"""A profile's call tree and its hatchet file (proton's `tree` data, `.hatchet` output).

The file is what proton's TreeData::dumpHatchet writes: a JSON list of two items, the tree and the
devices. Every node is `{"frame": {"name", "type": "function"}, "metrics": {...}, "children": [...]}`
with its *exclusive* values; the root (`ROOT`) lists every inclusive metric's name with a 0 (the
viewer sums those up the tree). A kernel node has `time (ns)`, `count`, `device_id` (a string) and
`device_type`; scope and launch-metadata nodes carry the user's metrics (`flops16`, `bytes`, ...).
"""
from __future__ import annotations

import json
import numbers
import os

ROOT_NAME = "ROOT"
TIME = "time (ns)"
COUNT = "count"
INTERPRETER_DEVICE = "INTERPRETER"   # kernels run by blocktune's CPU interpreter: wall time


class Node:
    __slots__ = ("name", "children", "metrics", "kernel")

    def __init__(self, name: str):
        self.name = name
        self.children: dict[str, Node] = {}
        self.metrics: dict = {}
        self.kernel = None            # (device_type, device_id) once a launch is timed here

    def child(self, name: str) -> "Node":
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Node(name)
        return node

    def add_metrics(self, metrics: dict) -> None:
        for k, v in metrics.items():
            if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                v = int(v)                   # numpy and torch scalars too (the file is JSON)
            elif isinstance(v, numbers.Real):
                v = float(v)
            else:
                raise TypeError(f"metric {k!r} must be an int or a float, got {type(v).__name__}")
            self.metrics[k] = self.metrics.get(k, 0) + v

    def add_time(self, ns: int, device_type: str, device_id: int) -> None:
        self.metrics[TIME] = self.metrics.get(TIME, 0) + int(ns)
        self.metrics[COUNT] = self.metrics.get(COUNT, 0) + 1
        self.kernel = (device_type, device_id)


class Tree:
    def __init__(self):
        self.root = Node(ROOT_NAME)
        self.devices: dict[str, dict[str, dict]] = {}

    def node(self, path) -> Node:
        node = self.root
        for name in path:
            node = node.child(name)
        return node

    def add_device(self, device_type: str, device_id: int, info: dict) -> None:
        self.devices.setdefault(device_type, {}).setdefault(str(device_id), info)

    def to_hatchet(self) -> list:
        inclusive: set[str] = set()

        def dump(node: Node) -> dict:
            metrics = dict(node.metrics)
            inclusive.update(k for k in metrics if not k.endswith("(exc)"))
            if node.kernel is not None:
                metrics["device_type"], metrics["device_id"] = node.kernel[0], str(node.kernel[1])
            return {"frame": {"name": node.name, "type": "function"}, "metrics": metrics,
                    "children": [dump(c) for c in node.children.values()]}

        tree = dump(self.root)
        for name in sorted(inclusive):
            tree["metrics"].setdefault(name, 0)
        return [tree, self.devices]

    def write(self, path: str) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.to_hatchet(), f, indent=4)
        os.replace(tmp, path)
