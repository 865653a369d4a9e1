#!/usr/bin/env bash
# Set up everything blocktune needs on a fresh Debian/Ubuntu machine: system packages for the
# tests (PostgreSQL, Chromium, the Docker engine), a virtual environment in .venv with blocktune installed editable.
# Idempotent: a second run only checks. Set BLOCKTUNE_SKIP_APT=1 to skip the system packages.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# the deploy tests (tests/deploy): the Docker engine, compose, and debootstrap for a local base image
[ -x /usr/sbin/dockerd ] || command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need_apt+=(docker-compose)
[ -x /usr/sbin/debootstrap ] || need_apt+=(debootstrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ] && [ "${BLOCKTUNE_SKIP_APT:-0}" != 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need_apt[*]} (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install ${need_apt[*]} (the tests need them)" >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
# torch: blocktune runs without it (interpret mode and the GPU path take numpy arrays); some tests
# compare against it and skip, saying so, where it is missing. It is installed only where that is
# cheap and safe, never the several GB of CUDA wheels that PyPI's Linux torch depends on:
#  1. already importable in .venv (a GPU machine's own build included): kept;
#  2. a local wheel of the pinned version (pip's find-links, e.g. PIP_FIND_LINKS=/opt/wheels):
#     installed from there without its dependencies (the probe: no index is asked), kept if it
#     needs no nvidia-* wheels (a CPU build), then its small dependencies come from the index;
#  3. else pip resolves it on the configured index without downloading it (`--dry-run --report`
#     reads only the wheel's metadata) and installs it if that wheel needs no nvidia-* wheels
#     (e.g. a pip config whose index is PyTorch's CPU index). Otherwise it is left out; the
#     decision is remembered in .venv (a second run does not ask again; delete the file to).
# BLOCKTUNE_TORCH=skip never installs it; BLOCKTUNE_TORCH_VERSION changes the pinned version.
pip_q() { .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
needs_cuda_wheels() {   # reads a requirement list on stdin: true if it names an nvidia-* wheel
  .venv/bin/python -c 'import sys; sys.exit(0 if any(r.lower().startswith("nvidia-") for r in sys.stdin.read().split("\n")) else 1)'
}
torch_pin="torch==${BLOCKTUNE_TORCH_VERSION:-2.13.0}"
torch_skipped=".venv/blocktune-torch-skipped"
if [ "${BLOCKTUNE_TORCH:-}" != skip ] && ! .venv/bin/python -c "import torch" 2>/dev/null \
   && ! grep -qxF "$torch_pin" "$torch_skipped" 2>/dev/null; then
  pip_q install --no-index --no-deps "$torch_pin" >/dev/null 2>&1      # no local wheel: pip says so; quiet
  if .venv/bin/python -c "import importlib.metadata as m; m.version('torch')" 2>/dev/null; then
    if .venv/bin/python -c "import importlib.metadata as m; print('\n'.join(m.requires('torch') or []))" | needs_cuda_wheels; then
      echo "setup: the local $torch_pin wheel is a CUDA build; not using it"
      pip_q uninstall -y torch
    else
      pip_q install "$torch_pin"           # its dependencies (torch itself is there)
    fi
  fi
  if ! .venv/bin/python -c "import importlib.metadata as m; m.version('torch')" 2>/dev/null; then
    report=$(mktemp)
    pip_q install --dry-run --ignore-installed --no-deps --report "$report" "$torch_pin" >/dev/null 2>&1
    if [ ! -s "$report" ]; then
      echo "setup: not installing torch: pip could not resolve $torch_pin (no package index reachable?);" \
           "blocktune runs without it, the tests that need it skip"
    elif .venv/bin/python -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["install"][0]["metadata"].get("requires_dist") or []))' "$report" \
         | needs_cuda_wheels; then
      echo "setup: not installing torch: $torch_pin from the package index needs the CUDA wheels (several GB);" \
           "blocktune runs without it, the tests that need it skip. For them, install the CPU build of" \
           "$torch_pin from PyTorch's CPU wheel index into .venv (see PyTorch's install instructions)"
      echo "$torch_pin" > "$torch_skipped"
    else
      pip_q install "$torch_pin"
    fi
    rm -f "$report"
  fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import compiler, llvmlite, fastapi, sqlalchemy, optuna" 
echo "setup: ok ($(.venv/bin/python --version), .venv ready)"
