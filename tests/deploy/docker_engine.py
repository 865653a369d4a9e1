"""A Docker engine for the deploy tests, on a machine where image registries may be unreachable.

- the engine: Debian's docker.io, docker-compose and debootstrap (scripts/setup.sh installs them
  as root; so does `ensure_engine` when they are missing), and `dockerd` started in the
  background when it is not running;
- images: an image is used when it is here or can be pulled; otherwise a stand-in of the same
  name is built from Debian's packages (docker/standins/) on a base image made locally with
  debootstrap (docker/build-base-image.sh). Images stay cached between runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "blocktune-debian:bookworm"
APT_PACKAGES = {"docker": "docker.io", "docker-compose": "docker-compose", "debootstrap": "debootstrap"}


class EngineUnavailable(Exception):
    """Why the Docker tests cannot run here (the test skips with it)."""


def run(cmd: list[str], *, timeout: float = 600, env: dict | None = None, check: bool = True,
        cwd: Path = REPO) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\n--- stdout\n{p.stdout[-6000:]}"
                             f"\n--- stderr\n{p.stderr[-6000:]}")
    return p


def _is_root() -> bool:
    return os.geteuid() == 0


def install_packages() -> None:
    missing = [pkg for tool, pkg in APT_PACKAGES.items()
               if shutil.which(tool) is None and not (tool == "debootstrap" and Path("/usr/sbin/debootstrap").exists())]
    if not missing:
        return
    if not _is_root() or shutil.which("apt-get") is None or os.environ.get("BLOCKTUNE_SKIP_APT") == "1":
        raise EngineUnavailable(f"needs {', '.join(missing)} (Debian packages; scripts/setup.sh installs them "
                                "when run as root)")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], timeout=600)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env, timeout=1200)


def _engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


def ensure_engine(log_dir: Path) -> subprocess.Popen | None:
    """Make `docker` work; returns the dockerd process when this call started it (else None)."""
    install_packages()
    if _engine_answers():
        return None
    if not _is_root():
        raise EngineUnavailable("the Docker engine is not running and only root can start dockerd here")
    log = open(log_dir / "dockerd.log", "w")
    daemon = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise EngineUnavailable(f"dockerd exited {daemon.returncode}: "
                                    f"{(log_dir / 'dockerd.log').read_text()[-2000:]}")
        if _engine_answers():
            return daemon
        time.sleep(0.5)
    stop_engine(daemon)
    raise EngineUnavailable("dockerd did not answer within 60 s (see dockerd.log)")


def stop_engine(daemon: subprocess.Popen | None) -> None:
    """Stop a dockerd that ensure_engine started, and reap it: it is a child of the test process."""
    if daemon is None:
        return
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
    daemon.wait()


def compose_command() -> list[str]:
    """`docker compose` (the v2 plugin) where it is installed, else Debian's `docker-compose`."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise EngineUnavailable("neither `docker compose` nor `docker-compose` is installed")


def buildkit_cli() -> str:
    """A docker CLI that builds with BuildKit under DOCKER_BUILDKIT=1: one with the buildx plugin,
    or one from before 23.0 (Debian bookworm's docker.io, 20.10), whose BuildKit client is built
    in. A newer CLI without buildx refuses ("the buildx component is missing")."""
    seen = set()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        cli = Path(d) / "docker"
        if not os.access(cli, os.X_OK) or cli.resolve() in seen:
            continue
        seen.add(cli.resolve())
        if subprocess.run([cli, "buildx", "version"], capture_output=True).returncode == 0:
            return str(cli)
        version = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                                 text=True).stdout.strip()
        if version and int(version.split(".")[0]) < 23:
            return str(cli)
    raise EngineUnavailable("no docker CLI here builds with BuildKit (install the buildx plugin)")


def have_image(name: str) -> bool:
    return run(["docker", "image", "inspect", name], check=False, timeout=60).returncode == 0


def _is_standin(name: str) -> bool:
    label = run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "org.blocktune.standin"}}', name],
                check=False, timeout=60).stdout.strip()
    return label not in ("", "<no value>")


def _pulled(name: str) -> bool:
    try:
        return run(["docker", "pull", "-q", name], check=False, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def base_image() -> str:
    """The locally made Debian base (debootstrap), built once and reused."""
    if not have_image(BASE_IMAGE):
        if not _is_root():
            raise EngineUnavailable(f"{BASE_IMAGE} is missing and debootstrap needs root to make it")
        run(["bash", str(REPO / "docker/build-base-image.sh"), BASE_IMAGE], timeout=1200)
    return BASE_IMAGE


def official_or_standin(name: str, standin: str) -> str:
    """`name` when it is here or can be pulled; else the stand-in docker/standins/<standin>.Dockerfile
    built from Debian's packages and tagged `name`. Returns how it was obtained."""
    if have_image(name) and not _is_standin(name):
        return "present"
    if not have_image(name) and _pulled(name):
        return "pulled"
    # a stand-in is built again each time: from the layer cache in seconds, and current with its
    # Dockerfile
    run(["docker", "build", "--network", "host", "--build-arg", f"BASE_IMAGE={base_image()}", "-t", name,
         "-f", f"{standin}.Dockerfile", "."], cwd=REPO / "docker/standins", timeout=1200)
    return "stand-in"


def postgres_image() -> str:
    """The compose file's postgres:16 when it is here or can be pulled; else the stand-in built from
    Debian bookworm's PostgreSQL, named after its version (postgres:15)."""
    if have_image("postgres:16") or _pulled("postgres:16"):
        return "postgres:16"
    official_or_standin("postgres:15", "postgres")
    return "postgres:15"


def build_blocktune(tag: str, *, buildkit: bool) -> float:
    """Build the repository's Dockerfile on the python:3.11-slim image (official or stand-in) with
    the classic builder or BuildKit; returns the seconds it took."""
    official_or_standin("python:3.11-slim", "python")
    started = time.monotonic()
    cli = buildkit_cli() if buildkit else "docker"
    run([cli, "build", "--network", "host", "--build-arg", "BASE_IMAGE=python:3.11-slim", "-t", tag, "."],
        env={"DOCKER_BUILDKIT": "1" if buildkit else "0"}, timeout=1500)
    return time.monotonic() - started
