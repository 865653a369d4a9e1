# blocktune: one image for the API (`blocktune serve`), the migration (`blocktune migrate`) and the
# GPU workers (`blocktune worker`). The CUDA driver (libcuda) comes from the host through the NVIDIA
# container toolkit; PTX is produced by LLVM (llvmlite) and loaded by the driver, so no CUDA toolkit
# is needed in the image, and no torch (the worker hands the GPU its own buffers; the CPU worker
# interprets on numpy). BASE_IMAGE: any Debian-like image with Python >= 3.11 and pip on PATH.
# Builds with the classic builder and with BuildKit (no heredocs, no RUN --mount).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    BLOCKTUNE_HOST=0.0.0.0 \
    BLOCKTUNE_CACHE_DIR=/var/cache/blocktune \
    XDG_DATA_HOME=/var/lib/blocktune \
    XDG_CACHE_HOME=/var/cache/blocktune

WORKDIR /app
# dependencies first (a layer that survives source edits)
COPY pyproject.toml README.md ./
COPY docker/requirements.py /tmp/requirements.py
# CUDA_BINDINGS narrows the driver bindings pyproject.toml allows (cuda-bindings 13: NVIDIA driver
# >= 580.65.06), e.g. 'cuda-bindings>=12.6,<13' for drivers from 550 on (docs/deploy.md)
ARG CUDA_BINDINGS=""
RUN python /tmp/requirements.py pyproject.toml > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt ${CUDA_BINDINGS}

COPY compiler ./compiler
COPY jobspec ./jobspec
COPY tuner ./tuner
COPY db ./db
COPY migrations ./migrations
COPY service ./service
COPY client ./client
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home /var/lib/blocktune blocktune \
    && mkdir -p /var/lib/blocktune /var/cache/blocktune \
    && chown -R blocktune /var/lib/blocktune /var/cache/blocktune

USER blocktune
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ.get(\"BLOCKTUNE_PORT\", \"8000\")}/healthz', timeout=2)" || exit 1
ENTRYPOINT ["blocktune"]
CMD ["serve", "--no-worker"]
