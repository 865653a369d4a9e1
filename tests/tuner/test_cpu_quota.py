"""A container's CPU limit caps the CPUs the tuner sizes its pools for (tuner/cpu_quota.py), read
from fake cgroup trees: v2, v1, nested limits, none."""
from __future__ import annotations

from pathlib import Path

import pytest

from tuner import cpu_quota
from tuner.cpu_quota import cgroup_cpu_limit


def tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (tmp_path / "proc-cgroup").write_text(proc)
    return str(root), str(tmp_path / "proc-cgroup")


def test_cgroup_v2_in_a_container(tmp_path):
    root, proc = tree(tmp_path, "0::/\n", {"cpu.max": "400000 100000\n"})      # docker run --cpus=4
    assert cgroup_cpu_limit(root, proc) == 4.0


def test_cgroup_v2_no_limit(tmp_path):
    root, proc = tree(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cgroup_cpu_limit(root, proc) is None


def test_cgroup_v2_the_tightest_ancestor_counts(tmp_path):
    root, proc = tree(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "cpu.max": "max 100000\n",
        "kubepods/pod1/cpu.max": "150000 100000\n",        # the pod: 1.5 CPUs
        "kubepods/pod1/ctr/cpu.max": "300000 100000\n",
    })
    assert cgroup_cpu_limit(root, proc) == 1.5


def test_cgroup_v1_quota_and_none(tmp_path):
    root, proc = tree(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n", {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
    })
    assert cgroup_cpu_limit(root, proc) == 2.0
    root, proc = tree(tmp_path / "none", "3:cpu,cpuacct:/\n", {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpu_limit(root, proc) is None


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_cpu_limit(str(tmp_path / "missing"), str(tmp_path / "missing-proc")) is None
    root, proc = tree(tmp_path, "garbage\n0::/\n", {"cpu.max": "not numbers\n"})
    assert cgroup_cpu_limit(root, proc) is None


@pytest.mark.parametrize("limit, affinity, expected", [(None, 32, 32), (4.0, 32, 4), (1.5, 32, 1), (0.5, 32, 1),
                                                        (64.0, 16, 16)])
def test_the_pools_are_sized_to_the_quota(monkeypatch, limit, affinity, expected):
    monkeypatch.setattr(cpu_quota, "cgroup_cpu_limit", lambda: limit)
    assert cpu_quota.cpus_allowed(affinity) == expected
