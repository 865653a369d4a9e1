"""Engine and session factory.

SQLite (the embedded default) is opened with WAL, a busy timeout and foreign keys on; PostgreSQL
(the deployment database, `postgresql+psycopg://…`) with pre-ping.
"""
from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

ENV_VAR = "BLOCKTUNE_DATABASE_URL"
SQLITE_BUSY_TIMEOUT_S = 30.0


def default_sqlite_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("blocktune", appauthor=False)) / "blocktune.db"


def default_url() -> str:
    """`BLOCKTUNE_DATABASE_URL` if set, else a SQLite file in the user's data directory."""
    url = os.environ.get(ENV_VAR, "").strip()
    if url:
        return normalize_url(url)
    return f"sqlite:///{default_sqlite_path()}"


def normalize_url(url: str) -> str:
    """Make plain `postgresql://` / `postgres://` URLs use psycopg 3 (the driver we ship)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def is_sqlite(url: str | URL) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_file(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def sqlite_connect_args() -> dict:
    return {"timeout": SQLITE_BUSY_TIMEOUT_S}


def install_sqlite_pragmas(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # pragma: no branch
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()


def make_engine(url: str | None = None, **kwargs) -> Engine:
    url = normalize_url(url or default_url())
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        path = _sqlite_file(u)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connect_args = {**sqlite_connect_args(), **kwargs.pop("connect_args", {})}
        engine = sa.create_engine(u, connect_args=connect_args, **kwargs)
        install_sqlite_pragmas(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(u, **kwargs)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
