# A stand-in for the official python:3.11-slim image, built from Debian bookworm's packages for
# machines that cannot pull from a registry (tests/deploy builds it only then). Debian's Python is
# 3.11; as in the official image, `python` and `pip` are on PATH and pip installs system-wide.
ARG BASE_IMAGE=blocktune-debian:bookworm
FROM ${BASE_IMAGE}
LABEL org.blocktune.standin="python:3.11-slim from Debian bookworm's python3"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3 python3-pip python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED \
    && ln -sf /usr/bin/python3 /usr/local/bin/python \
    && ln -sf /usr/bin/pip3 /usr/local/bin/pip \
    && python --version && pip --version
ENV LANG=C.UTF-8
CMD ["python3"]
