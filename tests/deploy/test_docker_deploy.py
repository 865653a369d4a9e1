"""The deploy files, for real: the Dockerfile builds (classic builder and BuildKit), the compose
stack runs (PostgreSQL, migrate, the API, a CPU worker from docker-compose.cpu.yml), a job
submitted over HTTP finishes, and everything is still there after the API container restarts.
The GPU workers' reservations are checked with `compose config` for hosts of 1 and 2 GPUs."""
from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import time

import httpx
import pytest
import yaml

from docker_engine import EngineUnavailable, build_blocktune, buildkit_cli, postgres_image, run

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

INTERP = "blocktune interpreter (CPU)"
FILES = ["-f", "docker-compose.yml", "-f", "docker-compose.cpu.yml"]

# the README's vector add, small enough for the interpreter: a few trials of a 4096-element add
SPEC = {
    "kernel": {"name": "add_kernel", "source": (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n"
        "    pid = tl.program_id(axis=0)\n"
        "    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
        "    mask = offsets < n_elements\n"
        "    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),"
        " mask=mask)\n")},
    "sizes": {"N": 4096},
    "args": [{"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
             {"name": "y_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
             {"name": "output_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "zeros"}},
             {"name": "n_elements", "value": "numel(x_ptr)"}],
    "key": ["n_elements"],
    "grid": ["cdiv(n_elements, BLOCK_SIZE)"],
    "space": {"BLOCK_SIZE": [512, 1024, 2048], "num_warps": [2, 4]},
    "check": {"outputs": ["output_ptr"]},
    "default_config": {"BLOCK_SIZE": 1024, "num_warps": 4},
    "budget": {"trials": 4, "seconds": 240},
}


def enabled_services(config: dict, profiles: set[str]) -> dict[str, dict]:
    """The services `up` starts under these profiles."""
    return {name: svc for name, svc in config["services"].items()
            if not svc.get("profiles") or profiles & set(svc["profiles"])}


@pytest.mark.parametrize("gpus", [1, 2])
def test_compose_config_gives_each_gpu_its_own_worker(compose_cli, gpus):
    profiles = {f"gpu{i}" for i in range(gpus)}
    env = {"COMPOSE_PROFILES": ",".join(sorted(profiles)), "BLOCKTUNE_NODE": "rack1-node7",
           "COMPOSE_PROJECT_NAME": "blocktune-config-check"}
    out = run([*compose_cli, *FILES, "config"], env=env, timeout=120).stdout
    services = enabled_services(yaml.safe_load(out), profiles)
    workers = {n: s for n, s in services.items() if n.startswith("worker-gpu")}
    assert sorted(workers) == [f"worker-gpu{i}" for i in range(gpus)]
    assert {"postgres", "migrate", "api", "worker-cpu"} <= set(services)
    names = set()
    for i in range(gpus):
        svc = workers[f"worker-gpu{i}"]
        assert svc["deploy"]["resources"]["reservations"]["devices"] == [
            {"driver": "nvidia", "device_ids": [str(i)], "capabilities": ["gpu"]}]
        # the container sees only its GPU, as device 0
        assert svc["command"][:3] == ["worker", "--device", "0"]
        env_of = svc["environment"]
        env_of = dict(e.split("=", 1) for e in env_of) if isinstance(env_of, list) else env_of
        names.add(env_of["BLOCKTUNE_WORKER_NAME"])
        assert env_of["BLOCKTUNE_DATABASE_URL"].startswith("postgresql+psycopg://blocktune:")
    assert names == {f"rack1-node7-gpu{i}" for i in range(gpus)}


def test_dockerfile_builds_with_buildkit(docker_engine):
    try:
        buildkit_cli()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    build_blocktune("blocktune:test-buildkit", buildkit=True)
    out = run(["docker", "run", "--rm", "--entrypoint", "python", "blocktune:test-buildkit", "-c",
               "import importlib.util, service.worker, tuner.engine, compiler; "
               "print(importlib.util.find_spec('torch') is None)"], timeout=300).stdout
    assert out.strip() == "True"      # no torch in the image


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, timeout: float = 180) -> None:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"{url}/healthz", timeout=5)
            if r.status_code == 200 and r.json().get("database") == "ok":
                return
            last = r.text
        time.sleep(1)
    raise AssertionError(f"{url}/healthz not ok within {timeout} s (last answer: {last})")


class Stack:
    """A compose project of its own (its own name, volume and port); `down -v` removes it all."""

    def __init__(self, compose: list[str], image: str):
        self.compose = compose
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {"COMPOSE_PROJECT_NAME": f"blocktune-test-{os.getpid()}", "BLOCKTUNE_IMAGE": image,
                    "BLOCKTUNE_POSTGRES_IMAGE": postgres_image(), "POSTGRES_PASSWORD": secrets.token_hex(8),
                    "BLOCKTUNE_API_PORT": str(self.port), "BLOCKTUNE_NODE": "ci-node", "COMPOSE_PROFILES": ""}

    def __call__(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.compose, *FILES, *args], env=self.env, timeout=timeout, check=check)

    def inspect(self, service: str, fmt: str) -> str:
        """`docker inspect -f fmt` of the service's one container, found by compose's labels (the
        same with compose v1 and v2)."""
        project = self.env["COMPOSE_PROJECT_NAME"]
        ids = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}",
                   "--filter", f"label=com.docker.compose.service={service}"]).stdout.split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return run(["docker", "inspect", "-f", fmt, ids[0]]).stdout.strip()

    def logs(self) -> str:
        p = self("logs", "--no-color", "--tail", "60", check=False, timeout=120)
        return p.stdout + p.stderr


@pytest.fixture
def stack(docker_engine, blocktune_image):
    s = Stack(docker_engine, blocktune_image)
    s("down", "-v", "--remove-orphans", check=False)
    try:
        yield s      # the test's assertions carry the containers' logs
    finally:
        s("down", "-v", "--remove-orphans", "--timeout", "20", check=False, timeout=300)


def _api(stack: Stack, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"{stack.url}/api/v1", headers=headers, timeout=30)


def test_compose_stack_runs_a_job_and_keeps_it_across_an_api_restart(stack):
    stack("up", "-d", "--no-build", timeout=600)
    try:
        _wait_healthy(stack.url)
    except AssertionError:
        raise AssertionError(stack.logs())
    assert stack.inspect("migrate", "{{.State.Status}} {{.State.ExitCode}}") == "exited 0"

    token = stack("exec", "-T", "api", "blocktune", "token", "create", "ci", "--scope", "read,submit",
                  timeout=120).stdout.strip().splitlines()[-1]
    with _api(stack, token) as api:
        r = api.post("/jobs", json=SPEC, params={"gpu_model": INTERP})
        assert r.status_code in (200, 201), r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + 300
        while (job := api.get(f"/jobs/{job_id}").json())["state"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"job still {job['state']} after 300 s:\n{stack.logs()}"
            time.sleep(2)
        assert job["state"] == "succeeded", f"{job}\n{stack.logs()}"
        trials = api.get(f"/jobs/{job_id}/trials").json()
        workers = {w["name"]: w for w in api.get("/workers").json()}
    assert job["trials_done"] == len(trials) and any(t["status"] == "ok" for t in trials), trials
    assert job["best_config"]["BLOCK_SIZE"] in (512, 1024, 2048)
    assert workers["ci-node-cpu0"]["alive"] and workers["ci-node-cpu0"]["gpu_model"] == INTERP, workers

    started = stack.inspect("api", "{{.State.StartedAt}}")
    stack("restart", "api", timeout=300)
    assert stack.inspect("api", "{{.State.StartedAt}}") != started
    _wait_healthy(stack.url)
    with _api(stack, token) as api:
        again = api.get(f"/jobs/{job_id}").json()
        assert api.get(f"/jobs/{job_id}/trials").json() == trials
        best = api.get("/configs/best", params={"kernel": job["kernel_fingerprint"], "gpu_model": INTERP,
                                                "key": '{"n_elements": 4096}'})
    for field in ("state", "trials_done", "best_config", "best_time_ms", "finished_at"):
        assert again[field] == job[field], field
    assert best.status_code == 200, best.text
    assert best.json()["config"]["BLOCK_SIZE"] == job["best_config"]["BLOCK_SIZE"]
