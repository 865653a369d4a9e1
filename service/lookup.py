"""The launch-time config lookup: kernel (fingerprint or name) + problem key + GPU model → best config.

Match levels, best first:
  "exact"               same kernel, same key, same GPU model
  "compute_capability"  same kernel, same key, another GPU model of the same compute capability
  "nearest_key"         same kernel and GPU model (else same compute capability), the tuned key nearest
                        to the asked one (same key names, equal non-numeric values, smallest sum of
                        |log2 a - log2 b| over the numeric values)

The whole best_configs table is held in memory as an immutable snapshot. Lookups only read the
current snapshot: they never touch the database, so they keep answering from the last good index
while the database is slow, locked or down. A background thread (`start()`) keeps the snapshot
current: every `refresh_s` it compares a cheap version of the table (row count, latest update,
highest id, GPU count); when that changed it reads the (id, updated_at, median_ms) of every row and
fetches only the rows that differ, then swaps in a new snapshot. A write through this process
(`writing()` around the upsert, then `apply()` with the row the database returned) is put into the
snapshot at once, so the publisher's next lookup sees it without waiting for the thread.
"""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlalchemy as sa
from cachetools import LRUCache

from db.models import BestConfig, Gpu
from jobspec.problem_key import canonical_key

log = logging.getLogger("blocktune.lookup")

# a memoized answer's cost beyond its strings: the tuple, the bytes object, the LRU's links
_MEMO_OVERHEAD_BYTES = 400
# the version check is cheap but misses a row rewritten with an older updated_at (a writer's clock
# behind another's, or two writers at the same moment): compare every row this often anyway
_FULL_SCAN_EVERY_S = 10.0
_FETCH_CHUNK = 500
_VERSION = sa.select(sa.func.count(BestConfig.id), sa.func.max(BestConfig.updated_at), sa.func.max(BestConfig.id),
                     sa.select(sa.func.count(Gpu.id)).scalar_subquery())


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    stamp: tuple | None  # (updated_at as the driver returns it, median_ms): a row whose stamp changed is
                         # fetched again; None for a row put in by apply() (re-read at the next scan)
    fingerprint: str
    name: str
    key: dict
    key_str: str
    gpu_model: str
    cc: str | None
    body: dict           # the JSON answer, less "match"


def _entry(b, stamp: tuple | None) -> Entry | None:
    """An Entry from a best_configs row (ORM object or Core row); None when its key is not a JSON object."""
    try:
        key = json.loads(b.problem_key)
    except ValueError:
        return None
    if not isinstance(key, dict):
        return None
    body = {"kernel_fingerprint": b.kernel_fingerprint, "kernel_name": b.kernel_name, "problem_key": key,
            "gpu_model": b.gpu_model, "compute_capability": b.compute_capability, "config": b.config,
            "median_ms": b.median_ms, "default_ms": b.default_ms,
            "speedup": (b.default_ms / b.median_ms) if b.default_ms and b.median_ms else None,
            "job_id": b.job_id}
    return Entry(b.id, stamp, b.kernel_fingerprint, b.kernel_name, key, canonical_key(key), b.gpu_model,
                 b.compute_capability, body)


@dataclass(frozen=True)
class Snapshot:
    """One immutable state of the index: replaced, never mutated.

    Generations tell which memoized answers still hold: `kernel_gen[k]` is the generation in which
    the entries of kernel k (a fingerprint or a name) last changed, `base_gen` the one in which
    something every answer may depend on (the compute capability of GPU models) last changed."""
    by_id: dict[int, Entry] = field(default_factory=dict)
    by_kernel: dict[str, tuple[Entry, ...]] = field(default_factory=dict)   # fingerprint → entries, by id
    by_name: dict[str, tuple[Entry, ...]] = field(default_factory=dict)     # kernel name → entries, by id
    cc_of_model: dict[str, str] = field(default_factory=dict)
    gpus: tuple = ()     # (model, compute capability) of the gpus table, in id order
    gen: int = 0
    base_gen: int = 0
    kernel_gen: dict[str, int] = field(default_factory=dict)

    def build(self, by_id: dict[int, Entry], gpus: tuple) -> "Snapshot":
        """The next snapshot, holding `by_id` (entries unchanged since this one are the same objects)."""
        gen = self.gen + 1
        by_kernel: dict[str, list[Entry]] = {}
        by_name: dict[str, list[Entry]] = {}
        cc_of_model = dict(reversed(gpus))   # the first GPU row of a model wins
        for i in sorted(by_id):
            e = by_id[i]
            by_kernel.setdefault(e.fingerprint, []).append(e)
            by_name.setdefault(e.name, []).append(e)
            if e.cc:
                cc_of_model.setdefault(e.gpu_model, e.cc)
        kernel_gen = {k: self.kernel_gen.get(k, gen) for k in (*by_kernel, *by_name)}
        for i in by_id.keys() | self.by_id.keys():
            new, old = by_id.get(i), self.by_id.get(i)
            if new is not old:
                for e in (new, old):
                    if e is not None:
                        kernel_gen[e.fingerprint] = kernel_gen[e.name] = gen
        base_gen = self.base_gen if cc_of_model == self.cc_of_model else gen
        return Snapshot(by_id, {k: tuple(v) for k, v in by_kernel.items()}, {k: tuple(v) for k, v in by_name.items()},
                        cc_of_model, gpus, gen, base_gen, kernel_gen)

    def with_entry(self, e: Entry) -> "Snapshot":
        """A copy with `e` in place of the entry of the same id (copies the dicts, not the entries)."""
        gen = self.gen + 1
        old = self.by_id.get(e.id)
        by_kernel, by_name = dict(self.by_kernel), dict(self.by_name)
        for index, old_k, new_k in ((by_kernel, old and old.fingerprint, e.fingerprint),
                                    (by_name, old and old.name, e.name)):
            if old is not None:
                rest = tuple(x for x in index[old_k] if x.id != e.id)
                if rest:
                    index[old_k] = rest
                else:
                    del index[old_k]
            index[new_k] = tuple(sorted(index.get(new_k, ()) + (e,), key=lambda x: x.id))
        kernel_gen = {**self.kernel_gen, e.fingerprint: gen, e.name: gen}
        if old is not None:
            kernel_gen[old.fingerprint] = kernel_gen[old.name] = gen
        cc_of_model, base_gen = self.cc_of_model, self.base_gen
        if e.cc and e.gpu_model not in cc_of_model:
            cc_of_model, base_gen = {**cc_of_model, e.gpu_model: e.cc}, gen
        return Snapshot({**self.by_id, e.id: e}, by_kernel, by_name, cc_of_model, self.gpus, gen, base_gen, kernel_gen)


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


def _answer_size(value) -> int:
    return value[2]


def _lookup(idx: Snapshot, kernel: str, key: dict, key_str: str, gpu_model: str,
            compute_capability: str | None) -> dict | None:
    entries = idx.by_kernel.get(kernel) or idx.by_name.get(kernel)
    if not entries:
        return None
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


class ConfigIndex:
    def __init__(self, sessionmaker, refresh_s: float = 0.5, memo_bytes: int = 32 * 2**20):
        self._sessionmaker = sessionmaker
        self._refresh_s = refresh_s
        self._index = Snapshot()
        # held by a refresh from its first query to its swap, and by a write through this process
        # from its upsert to its apply(): so the snapshot goes through the database's states in
        # their order (a refresh cannot undo a later write, a write's row cannot undo a later refresh)
        self._write_lock = threading.Lock()
        self._db_version: tuple | None = None
        self._scanned_at = -math.inf
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        # health: monotonic time of the last successful check, the failure since then
        self.checked_at: float | None = None
        self.error: str | None = None
        self.failures = 0
        # answers memoized (event loop only)
        self._memo = LRUCache(maxsize=memo_bytes, getsizeof=_answer_size) if memo_bytes > 0 else None

    # -- keeping it current (background thread; never the event loop) ---------------------------
    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="config-index-refresh", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wait_loaded(self, timeout: float) -> bool:
        """Wait (in a thread) until the first load succeeded; False when it has not within `timeout`."""
        return self._loaded.wait(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as exc:   # keep serving the last good index; say so once per outage
                self.failures += 1
                if self.error is None:
                    age = "never loaded" if self.checked_at is None else \
                        f"loaded {time.monotonic() - self.checked_at:.1f} s ago"
                    log.warning("config index: cannot read the database (%s: %s); lookups answer from the "
                                "index in memory (%s) until it is back", type(exc).__name__,
                                str(exc).splitlines()[0][:300] if str(exc) else "", age)
                self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            self._stop.wait(self._refresh_s)

    @staticmethod
    def version(s) -> tuple:
        """(rows, latest updated_at, highest id, GPU rows) of the database: a change of
        best_configs changes it (but for a row rewritten with an older updated_at: a full scan
        every _FULL_SCAN_EVERY_S catches that). One prebuilt statement: a publish reads it twice."""
        return tuple(s.execute(_VERSION).one())

    def refresh(self) -> bool:
        """Bring the snapshot up to the database now (in the calling thread); True when it changed.
        Raises what the database raises (the snapshot then stays as it was)."""
        with self._write_lock, self._sessionmaker() as s:
            if s.get_bind().dialect.name == "postgresql":
                # a table lock or a stalled server holds this thread, not the lookups; give up and
                # say so after a while (SET LOCAL: this transaction only, not the pooled connection)
                s.execute(sa.text(f"SET LOCAL statement_timeout = {int(max(5.0, 4 * self._refresh_s) * 1000)}"))
            version = self.version(s)
            if version == self._db_version and time.monotonic() - self._scanned_at < _FULL_SCAN_EVERY_S:
                self._checked()
                return False
            scanned_at = time.monotonic()
            # the driver's own values (no SQLAlchemy result processing: this runs over every row)
            stamps = {i: (u, m) for i, u, m in s.connection().exec_driver_sql(
                "SELECT id, updated_at, median_ms FROM best_configs")}
            have = self._index.by_id
            stale = [i for i, st in stamps.items() if i not in have or have[i].stamp != st]
            cols = BestConfig.__table__.c
            raw_updated_at = sa.type_coerce(cols.updated_at, sa.String).label("raw_updated_at")
            fetched: dict[int, Entry | None] = {}
            for at in range(0, len(stale), _FETCH_CHUNK):
                for row in s.execute(sa.select(cols, raw_updated_at).where(cols.id.in_(stale[at:at + _FETCH_CHUNK]))):
                    fetched[row.id] = _entry(row, (row.raw_updated_at, row.median_ms))
            gpus = tuple(tuple(r) for r in s.execute(sa.select(Gpu.model, Gpu.compute_capability).order_by(Gpu.id)))
            by_id = {}
            for i in stamps:
                e = fetched[i] if i in fetched else have.get(i)   # (absent: deleted since the scan)
                if e is not None:      # None: a row whose key is not a JSON object
                    by_id[i] = e
            changed = by_id != have or gpus != self._index.gpus
            if changed:
                self._index = self._index.build(by_id, gpus)
            self._db_version = version
            self._scanned_at = scanned_at
            self._checked()
            return changed

    def _checked(self) -> None:
        if self.error is not None:
            log.warning("config index: the database answers again; index refreshed")
        self.checked_at = time.monotonic()
        self.error = None
        self._loaded.set()

    @contextmanager
    def writing(self):
        """Hold around a write of best_configs through this process and its apply(): refreshes
        wait meanwhile. In a thread that may wait on the database, never on the event loop."""
        with self._write_lock:
            yield

    def in_step(self, db_version: tuple | None) -> bool:
        """Whether the index holds the database state of this version() (read inside `writing()`)."""
        return db_version is not None and db_version == self._db_version

    def apply(self, row, before: bool = False, after: tuple | None = None) -> None:
        """Put a best_configs row just written through this process (as the database returned it,
        inside `writing()`) into the snapshot, so that the next lookup here sees it. Pure memory.

        `before`: in_step() just before the write; `after`: version() just after its commit. When
        the index was in step and `after` is that state plus this row, nobody else wrote in
        between (short of a row rewritten with an older updated_at, which the periodic full scan
        catches), and the refresh thread need not read the table again for this write."""
        assert self._write_lock.locked(), "apply() belongs inside writing()"
        e = _entry(row, None)
        if e is None:
            return
        self._index = idx = self._index.with_entry(e)
        was = self._db_version
        if before and after is not None:
            expected = (len(idx.by_id), max(was[1], row.updated_at) if was[1] is not None else row.updated_at,
                        max(was[2] or 0, row.id), was[3])
            if after == expected:
                self._db_version = after

    def health(self) -> dict:
        idx = self._index
        age = None if self.checked_at is None else round(time.monotonic() - self.checked_at, 3)
        return {"rows": len(idx.by_id), "checked_seconds_ago": age, "refresh_seconds": self._refresh_s,
                "stale": age is None or self.error is not None or age > max(2.0, 4 * self._refresh_s),
                "error": self.error}

    # -- answering (pure memory) -----------------------------------------------------------------
    def answer(self, kernel: str, key: dict, gpu_model: str, compute_capability: str | None,
               key_str: str | None = None) -> tuple[int, bytes]:
        """(HTTP status, JSON body) of a lookup, memoized by the normalized question (kernel, key
        as canonical JSON, GPU model, compute capability) in an LRU bounded by bytes. A memoized
        answer holds while its kernel's entries (and the GPU models' compute capabilities) are
        unchanged: a publish recomputes the answers about one kernel, not all. Call it on the
        event loop only (the memo is not locked). `key_str`: canonical_key(key), when the caller
        has it already."""
        idx = self._index
        if key_str is None:
            key_str = canonical_key(key)
        question = (kernel, key_str, gpu_model, compute_capability)
        valid = (idx.kernel_gen.get(kernel, 0), idx.base_gen)
        memo = self._memo
        hit = memo.get(question) if memo is not None else None
        if hit is None or hit[3] != valid:
            found = _lookup(idx, kernel, key, key_str, gpu_model, compute_capability)
            if found is None:
                status, body = 404, json.dumps({"detail": f"no tuned config for kernel {kernel!r} on {gpu_model!r}"}).encode()
            else:
                status, body = 200, json.dumps(found).encode()
            hit = (status, body, len(kernel) + len(key_str) + len(gpu_model) + len(compute_capability or "")
                   + len(body) + _MEMO_OVERHEAD_BYTES, valid)
            if memo is not None and hit[2] <= memo.maxsize:
                memo[question] = hit
        return hit[0], hit[1]

    @property
    def memo_bytes(self) -> int:
        return int(self._memo.currsize) if self._memo is not None else 0
