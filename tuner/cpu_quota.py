"""The CPU time this process's cgroup allows: a container's CPU limit (Docker's `--cpus`, compose's
`cpus:`, Kubernetes' `limits.cpu`), which the CPU affinity does not show — a container limited to 4
CPUs on a 64-core host sees 64 CPUs it may run on, and a compile pool sized for 64 is throttled.

cgroup v2: `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none) in the process's cgroup and in each
ancestor (the tightest counts). cgroup v1: `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none) of the
`cpu` controller, likewise. Inside a container the cgroup namespace usually makes the process's
cgroup the mount's root; outside one the path from /proc/self/cgroup is followed.
"""
from __future__ import annotations

from pathlib import Path


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """How many CPUs' worth of time this process may use, or None when no cgroup limits it."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":                                    # the v2 hierarchy
            for base in (Path(root), Path(root) / "unified"):
                for d in _up_from(base, path):
                    limits += _v2_limit(d / "cpu.max")
        elif "cpu" in controllers.split(","):
            for base in dict.fromkeys((Path(root) / controllers, Path(root) / "cpu", Path(root) / "cpu,cpuacct")):
                for d in _up_from(base, path):
                    limits += _v1_limit(d)
    return min(limits) if limits else None


def _up_from(base: Path, path: str) -> list[Path]:
    """`base`/`path` and its ancestors up to `base`, those that exist."""
    out, rel = [], Path(path.strip("/")) if path.strip("/") else Path()
    while True:
        d = base / rel
        if d.is_dir():
            out.append(d)
        if rel == Path():
            return out
        rel = rel.parent


def _v2_limit(f: Path) -> list[float]:
    try:
        quota, period = f.read_text().split()[:2]
    except (OSError, ValueError):
        return []
    if quota == "max":
        return []
    try:
        return [int(quota) / int(period)] if int(period) > 0 and int(quota) > 0 else []
    except ValueError:
        return []


def _v1_limit(d: Path) -> list[float]:
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return []
    return [quota / period] if quota > 0 and period > 0 else []


def cpus_allowed(affinity: int) -> int:
    """The CPUs this process can keep busy: its affinity, capped by its cgroup's quota (rounded
    down, at least 1: a pool sized to a fraction over the quota is throttled)."""
    limit = cgroup_cpu_limit()
    if limit is None:
        return affinity
    return max(1, min(affinity, int(limit)))

