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
# torch is optional for blocktune; the tests compare against it. The pinned CPU build keeps a
# CPU-only machine from downloading several GB of CUDA wheels (a GPU machine keeps its own torch).
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==${BLOCKTUNE_TORCH_VERSION:-2.13.0}" 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import compiler, llvmlite, fastapi, sqlalchemy, optuna" 
echo "setup: ok ($(.venv/bin/python --version), .venv ready)"
