"""Alembic environment for blocktune.

Used by db/migrate.py (which passes an open connection in `config.attributes["connection"]`) and by
`alembic` run by hand with the repository's alembic.ini (URL from BLOCKTUNE_DATABASE_URL, else
sqlalchemy.url, else the default SQLite file).
"""
from __future__ import annotations

from alembic import context

from db.engine import default_url, make_engine
from db.migrate import include_object
from db.models import Base

config = context.config
target_metadata = Base.metadata
VERSION_TABLE = config.get_main_option("version_table") or "blocktune_alembic_version"




def _url() -> str:
    import os

    if os.environ.get("BLOCKTUNE_DATABASE_URL"):
        return default_url()
    return config.get_main_option("sqlalchemy.url") or default_url()


def _configure(**kw) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        compare_type=True,
        **kw,
    )


def run_migrations_offline() -> None:
    url = _url()
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"),
               dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection) -> None:
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.begin() as conn:
            _run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
