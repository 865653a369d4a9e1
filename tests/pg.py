"""A throw-away database on the tests' PostgreSQL server (see the `postgres_server` fixture)."""
from __future__ import annotations

import contextlib
import time


@contextlib.contextmanager
def scratch_database(server_url: str, template: str | None = None, prefix: str = "t"):
    """Create a database (empty, or a copy of `template`), yield its URL, drop it afterwards."""
    import sqlalchemy as sa

    name = f"{prefix}{time.time_ns()}"
    admin = sa.create_engine(f"{server_url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    try:
        yield f"{server_url}/{name}"
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
