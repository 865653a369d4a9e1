"""The launch-time lookup (client.lookup) against a live server: one request per key and process,
memory and disk caches, a single warning and no stall when the service is down or silent."""
from __future__ import annotations

import re
import time
import warnings

import httpx
import pytest

from client import lookup
from jobspec.device import INTERPRETER_MODEL

from test_client import _ClosingServer

H100 = "NVIDIA H100 80GB HBM3"


def _lookups_served(base: str) -> float:
    text = httpx.get(base + "/metrics").text
    n = 0.0
    for m in re.finditer(r'blocktune_http_requests_total\{method="GET",route="/api/v1/configs/best",status="\d+"\} ([0-9.e+]+)', text):
        n += float(m.group(1))
    return n


@pytest.fixture
def env(monkeypatch, tmp_path, live):
    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", live["url"])
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BLOCKTUNE_TOKEN", raising=False)
    lookup.reset()
    yield live
    lookup.reset()


def test_one_request_per_key_per_process(env):
    before = _lookups_served(env["url"])
    for _ in range(10_000):
        hit = lookup.get_best_config("f" * 64, "add_kernel", {"n_elements": 98432}, H100)
        miss = lookup.get_best_config("f" * 64, "add_kernel", {"n_elements": 98432}, "Unknown GPU")
    assert hit["config"] == env["best"][1] and hit["match"] == "exact" and miss is None
    assert lookup.stats["requests"] == 2 and lookup.stats["memory_hits"] == 19_998
    assert _lookups_served(env["url"]) - before == 2


def test_disk_cache_serves_a_new_process(env):
    first = lookup.get_best_config("f" * 64, "add_kernel", {"n_elements": 98432}, H100)
    before = _lookups_served(env["url"])
    lookup.reset()                                    # as a new process: memory gone, disk kept
    again = lookup.get_best_config("f" * 64, "add_kernel", {"n_elements": 98432}, H100)
    assert again == first and lookup.stats["disk_hits"] == 1 and lookup.stats["requests"] == 0
    assert _lookups_served(env["url"]) == before


def test_service_down_single_warning_no_stall(monkeypatch, tmp_path):
    srv = _ClosingServer()
    srv.close()                                       # nothing listens there any more
    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", f"http://127.0.0.1:{srv.port}")
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path))
    lookup.reset()
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(1000):
            assert lookup.get_best_config("f" * 64, "k", {"n": i % 10}, H100) is None
    assert time.monotonic() - t0 < 2.0
    assert len([x for x in w if issubclass(x.category, lookup.LookupWarning)]) == 1
    assert lookup.stats["requests"] == 1
    lookup.reset()


def test_slow_service_times_out_once(monkeypatch, tmp_path):
    srv = _ClosingServer(silent=True)                 # accepts, never answers
    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", f"http://127.0.0.1:{srv.port}")
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BLOCKTUNE_LOOKUP_TIMEOUT", "0.2")
    lookup.reset()
    try:
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for i in range(100):
                assert lookup.get_best_config("f" * 64, "k", {"n": i}, H100) is None
        assert time.monotonic() - t0 < 1.5
        assert len(w) == 1 and "unreachable or slow" in str(w[0].message)
        assert srv.accepted == 1
    finally:
        srv.close()
        lookup.reset()


def test_publish_then_lookup(env, monkeypatch):
    key = {"n": 77}
    assert not lookup.publish("p" * 64, "pub_kernel", key, "NVIDIA L4", "8.9", {"BLOCK": 64, "num_warps": 2}, 0.25)
    monkeypatch.setenv("BLOCKTUNE_TOKEN", env["token"])
    lookup.reset()
    assert lookup.publish("p" * 64, "pub_kernel", key, "NVIDIA L4", "8.9", {"BLOCK": 64, "num_warps": 2}, 0.25, 0.5)
    lookup.reset()
    got = lookup.get_best_config("p" * 64, "pub_kernel", key, "NVIDIA L4")
    assert got["config"] == {"BLOCK": 64, "num_warps": 2} and got["speedup"] == pytest.approx(2.0)


def test_a_publish_only_token_publishes_and_a_missing_scope_is_named(env, monkeypatch):
    """BLOCKTUNE_PUBLISH=1 needs a token with `publish` only; a token without the scope a call needs
    is refused, and the single warning says which scope."""
    from pathlib import Path

    import yaml

    from svc_helpers import make_token

    key, cfg = {"n": 78}, {"BLOCK": 32, "num_warps": 1}
    monkeypatch.setenv("BLOCKTUNE_TOKEN", make_token(env["db"], "publisher", {"publish"}))
    lookup.reset()
    assert lookup.publish("q" * 64, "pub_kernel", key, "NVIDIA L4", "8.9", cfg, 0.25)
    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "service" / "data" / "add.yaml").read_text())
    with pytest.warns(lookup.LookupWarning, match="HTTP 403: this API token lacks the 'submit' scope"):
        assert lookup.submit_on_miss(spec, gpu_model="NVIDIA L4") is None
    monkeypatch.setenv("BLOCKTUNE_TOKEN", make_token(env["db"], "submitter", {"submit"}))
    lookup.reset()
    with pytest.warns(lookup.LookupWarning, match="lacks the 'publish' scope"):
        assert not lookup.publish("q" * 64, "pub_kernel", {"n": 79}, "NVIDIA L4", "8.9", cfg, 0.25)


def test_no_service_url_means_no_lookup(monkeypatch):
    monkeypatch.delenv("BLOCKTUNE_SERVICE_URL", raising=False)
    lookup.reset()
    assert lookup.get_best_config("f" * 64, "k", {}, H100) is None and lookup.stats["requests"] == 0


def test_compiler_autotune_lookup_asks_once_per_key(env, monkeypatch):
    """The plug-in's before_tuning listener calls client.compiler_plugin.service_lookup at a launch;
    with a fresh per-kernel cache at every call, only client.lookup's per-process cache stands
    between 1000 launches and the service."""
    import sqlalchemy as sa

    import compiler
    from client.compiler_plugin import service_lookup
    from db.engine import make_engine
    from db.models import BestConfig

    fn = compiler.jit_from_source(
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def scale(x_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)\n", "scale")
    eng = make_engine(env["db"])
    with eng.begin() as c:
        c.execute(sa.insert(BestConfig).values(kernel_fingerprint=fn.fingerprint, kernel_name="scale",
                                               problem_key='{"n":4096}', gpu_model=INTERPRETER_MODEL,
                                               compute_capability="0.0", median_ms=0.1, default_ms=0.3,
                                               config={"BLOCK": 256, "num_warps": 2, "num_stages": 1},
                                               updated_at=__import__("db.models").models.utcnow()))
    eng.dispose()
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    time.sleep(1.1)                                   # the server re-reads best_configs at most once a second
    before = _lookups_served(env["url"])
    got = [service_lookup(fn, {"n": 4096 if i % 2 else 100}, {}) for i in range(1000)]
    assert got[1] == ({"BLOCK": 256}, 2, 1)
    assert _lookups_served(env["url"]) - before == 2


def test_submit_on_miss_is_idempotent_across_processes(env, monkeypatch):
    from pathlib import Path

    import yaml

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "service" / "data" / "add.yaml").read_text())
    monkeypatch.setenv("BLOCKTUNE_TOKEN", env["token"])
    lookup.reset()
    job_id = lookup.submit_on_miss(spec, gpu_model="NVIDIA H100 80GB HBM3")
    assert isinstance(job_id, int)
    assert lookup.submit_on_miss(spec, gpu_model="NVIDIA H100 80GB HBM3") is None   # once per process
    lookup.reset()                                                                 # a new process
    assert lookup.submit_on_miss(spec, gpu_model="NVIDIA H100 80GB HBM3") == job_id  # the same job
    job = httpx.get(f"{env['url']}/api/v1/jobs/{job_id}").json()
    assert job["state"] == "queued" and job["gpu_model"] == "NVIDIA H100 80GB HBM3"


def test_client_package_stands_alone():
    import subprocess
    import sys

    code = ("import sys, client, client.client, client.lookup, client.models\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('compiler', 'tuner', 'db', 'service'))\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert r.returncode == 0, r.stderr


def test_autotuned_kernel_launches_ask_the_service_once_per_key(env, monkeypatch, tmp_path):
    """An @autotune kernel in interpret mode (no GPU here) with BLOCKTUNE_SERVICE_URL set: each key
    is looked up once however often the kernel is launched (10 000 launches, 2 keys), and the
    service's winner is the config that runs, not the first of the list."""
    import numpy as np
    import sqlalchemy as sa

    import compiler
    from db.engine import make_engine
    from db.models import BestConfig, utcnow

    src = tmp_path / "scaled.py"
    src.write_text(
        "import compiler as triton\nimport compiler.language as tl\n\n"
        "@triton.autotune(configs=[triton.Config({'BLOCK': 16}, num_warps=4), triton.Config({'BLOCK': 64}, num_warps=2)],"
        " key=['n'])\n@triton.jit\n"
        "def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location("scaled_kernel_mod", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = mod.scaled
    eng = make_engine(env["db"])
    with eng.begin() as c:
        c.execute(sa.insert(BestConfig).values(kernel_fingerprint=kernel.fingerprint, kernel_name="scaled",
                                               problem_key='{"n":64}', gpu_model=INTERPRETER_MODEL,
                                               compute_capability="0.0", median_ms=0.1, default_ms=0.2,
                                               config={"BLOCK": 64, "num_warps": 2, "num_stages": 3},
                                               updated_at=utcnow()))
    eng.dispose()
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    time.sleep(1.1)                                   # the server re-reads best_configs at most once a second
    before = _lookups_served(env["url"])
    rng = np.random.default_rng()
    for n in (64, 48):
        x = rng.standard_normal(n).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        for _ in range(5000):
            kernel[lambda meta: (compiler.cdiv(n, meta["BLOCK"]),)](x, out, n)
        np.testing.assert_allclose(out, x * 3, rtol=1e-6)
        # n=48 was never tuned: the service answers with the nearest tuned key's winner
        assert kernel.best_config.kwargs == {"BLOCK": 64} and kernel.best_config.num_warps == 2
    assert _lookups_served(env["url"]) - before == 2


def test_a_locally_tuned_winner_is_published_and_a_cache_hit_is_not(env, monkeypatch):
    """BLOCKTUNE_PUBLISH=1: the plug-in's config_chosen listener sends what the autotuner measured
    (winner and first-config times) to the service, and nothing for a winner from its disk cache.
    No GPU here: the device query says an L4."""
    import compiler
    from client.compiler_plugin import hooks

    monkeypatch.setattr(hooks, "_gpu_model", lambda: ("NVIDIA L4", "8.9"))
    monkeypatch.setenv("BLOCKTUNE_TOKEN", env["token"])
    monkeypatch.setenv("BLOCKTUNE_PUBLISH", "1")
    fn = compiler.jit_from_source(
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def published(x_ptr, n, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n", "published")
    configs = [compiler.Config({"BLOCK": 64}, num_warps=2), compiler.Config({"BLOCK": 128}, num_warps=4)]
    timings = {configs[0]: [0.4, 0.3, 0.5], configs[1]: [0.1, 0.1, 0.1]}
    event = dict(fn=fn, key=(4096,), key_args={"n": 4096}, configs=configs, autotuner=None,
                 best_config=configs[1], configs_timings=timings, duration=0.2)
    hooks.config_chosen(**event, cache_hit=True)
    lookup.reset()
    assert lookup.get_best_config(fn.fingerprint, "published", {"n": 4096}, "NVIDIA L4") is None
    hooks.config_chosen(**event, cache_hit=False)
    lookup.reset()
    got = lookup.get_best_config(fn.fingerprint, "published", {"n": 4096}, "NVIDIA L4")
    assert got["config"] == {"BLOCK": 128, "num_warps": 4, "num_stages": 3}
    assert got["median_ms"] == pytest.approx(0.1) and got["speedup"] == pytest.approx(4.0)


def test_the_plugin_is_registered_with_the_compiler():
    """The blocktune distribution declares the plug-in (pyproject.toml); a stale install that lacks
    it would leave BLOCKTUNE_SERVICE_URL silently unused (reinstall: pip install -e .)."""
    import importlib.metadata

    from compiler import plugins

    eps = {e.name: e.value for e in importlib.metadata.entry_points(group=plugins.GROUP)}
    assert eps.get("service") == "client.compiler_plugin:register"
    from client.compiler_plugin import before_tuning, config_chosen, launch_missed
    hooks = plugins.autotuning()
    assert before_tuning in hooks.before_tuning.calls and launch_missed in hooks.launch_missed.calls
    assert config_chosen in hooks.config_chosen.calls
