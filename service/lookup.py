"""The launch-time config lookup: kernel (fingerprint or name) + problem key + GPU model → best config.

Match levels, best first:
  "exact"               same kernel, same key, same GPU model
  "compute_capability"  same kernel, same key, another GPU model of the same compute capability
  "nearest_key"         same kernel and GPU model (else same compute capability), the tuned key nearest
                        to the asked one (same key names, equal non-numeric values, smallest sum of
                        |log2 a - log2 b| over the numeric values)

The whole best_configs table is held in memory and reloaded when it changed (checked at most every
`refresh_s`, and at once after a write through this process), so a lookup costs no database query.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from db.models import BestConfig, Gpu


@dataclass
class Entry:
    fingerprint: str
    name: str
    key: dict
    key_str: str
    gpu_model: str
    cc: str | None
    body: dict      # the JSON answer, less "match"


@dataclass
class _Index:
    by_kernel: dict[str, list[Entry]] = field(default_factory=dict)   # fingerprint → entries
    by_name: dict[str, list[Entry]] = field(default_factory=dict)     # name → entries
    cc_of_model: dict[str, str] = field(default_factory=dict)
    version: tuple = ()


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def key_distance(a: dict, b: dict) -> float | None:
    """None when the keys are not comparable (other names, other non-numeric values)."""
    if a.keys() != b.keys():
        return None
    d = 0.0
    for k, va in a.items():
        vb = b[k]
        if _num(va) and _num(vb):
            if va > 0 and vb > 0:
                d += abs(math.log2(va) - math.log2(vb))
            else:
                d += abs(va - vb)
        elif va != vb:
            return None
    return d


class ConfigIndex:
    def __init__(self, sessionmaker, refresh_s: float = 1.0):
        self._sessionmaker = sessionmaker
        self._refresh_s = refresh_s
        self._index = _Index()
        self._checked = 0.0
        self._lock = threading.Lock()

    @property
    def current(self):
        """The index object now in use (replaced, never mutated, on reload)."""
        return self._index

    def invalidate(self) -> None:
        self._checked = 0.0
        self._index.version = ()

    def _version(self, s) -> tuple:
        row = s.execute(sa.select(sa.func.count(BestConfig.id), sa.func.max(BestConfig.updated_at),
                                  sa.func.max(BestConfig.id))).one()
        gpus = s.scalar(sa.select(sa.func.count(Gpu.id)))
        return (row[0], str(row[1]), row[2], gpus)

    def _reload(self, s, version) -> None:
        idx = _Index(version=version)
        for g in s.scalars(sa.select(Gpu)):
            idx.cc_of_model.setdefault(g.model, g.compute_capability)
        for b in s.scalars(sa.select(BestConfig).order_by(BestConfig.id)):
            try:
                key = json.loads(b.problem_key)
            except ValueError:
                continue
            if not isinstance(key, dict):
                continue
            body = {"kernel_fingerprint": b.kernel_fingerprint, "kernel_name": b.kernel_name, "problem_key": key,
                    "gpu_model": b.gpu_model, "compute_capability": b.compute_capability, "config": b.config,
                    "median_ms": b.median_ms, "default_ms": b.default_ms,
                    "speedup": (b.default_ms / b.median_ms) if b.default_ms and b.median_ms else None,
                    "job_id": b.job_id}
            e = Entry(b.kernel_fingerprint, b.kernel_name, key, json.dumps(key, sort_keys=True), b.gpu_model,
                      b.compute_capability, body)
            idx.by_kernel.setdefault(e.fingerprint, []).append(e)
            idx.by_name.setdefault(e.name, []).append(e)
            if b.compute_capability:
                idx.cc_of_model.setdefault(b.gpu_model, b.compute_capability)
        self._index = idx

    def refresh_if_stale(self) -> None:
        now = time.monotonic()
        if now - self._checked < self._refresh_s:
            return
        with self._lock:
            if time.monotonic() - self._checked < self._refresh_s:
                return
            with self._sessionmaker() as s:
                v = self._version(s)
                if v != self._index.version:
                    self._reload(s, v)
            self._checked = time.monotonic()

    def lookup(self, kernel: str, key: dict, gpu_model: str, compute_capability: str | None = None) -> dict | None:
        idx = self._index
        entries = idx.by_kernel.get(kernel) or idx.by_name.get(kernel)
        if not entries:
            return None
        key_str = json.dumps(key, sort_keys=True)
        cc = compute_capability or idx.cc_of_model.get(gpu_model)
        same_cc = None
        for e in entries:
            if e.key_str == key_str:
                if e.gpu_model == gpu_model:
                    return {**e.body, "match": "exact"}
                if same_cc is None and cc and e.cc == cc:
                    same_cc = e
        if same_cc is not None:
            return {**same_cc.body, "match": "compute_capability"}
        for pool in ([e for e in entries if e.gpu_model == gpu_model],
                     [e for e in entries if cc and e.cc == cc]):
            best, best_d = None, None
            for e in pool:
                d = key_distance(key, e.key)
                if d is not None and (best_d is None or d < best_d):
                    best, best_d = e, d
            if best is not None:
                return {**best.body, "match": "nearest_key"}
        return None
