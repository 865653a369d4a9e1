"""A throw-away PostgreSQL cluster for the benchmarks (bench/service.py, bench/fleet.py).

Uses the newest /usr/lib/postgresql/<v>/bin (Debian's package, or scripts/postgres-bundle.sh on a
GPU host without one); as root it runs the server as the `postgres` user, since initdb refuses root.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    def __init__(self):
        initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not initdb:
            raise RuntimeError("PostgreSQL is not installed")
        self.bindir = str(Path(initdb[-1]).parent)
        self.root = tempfile.mkdtemp(prefix="bench-pg-")
        self.data = os.path.join(self.root, "data")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        self._run([f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self.start()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self):
        self._run([f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-o",
                   f"-h 127.0.0.1 -p {self.port} -k {self.root} -F", "start"])

    def pause(self):
        """Stop the server, keeping its data (start() again)."""
        self._run([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])

    def _run(self, cmd):
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, capture_output=True)

    def stop(self):
        self._run([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)
