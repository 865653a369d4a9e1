"""Alembic migrations, driven programmatically (no alembic.ini needed at run time).

Our version table is `blocktune_alembic_version`: Optuna's RDBStorage keeps its own Alembic history in
the default `alembic_version` table of the same database, and the two must not collide.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from db.engine import make_engine, normalize_url

VERSION_TABLE = "blocktune_alembic_version"


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    """Autogenerate filter: the database also holds Optuna's tables (and its `alembic_version`)."""
    if type_ == "table" and reflected and compare_to is None:
        from db.models import Base

        return name in Base.metadata.tables
    return True


def schema_differences(url: str | None = None) -> list:
    """What Alembic's autogenerate finds between the models and the migrated database ([] = none)."""
    from alembic.autogenerate import compare_metadata

    from db.models import Base

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={
                "compare_type": True, "version_table": VERSION_TABLE, "include_object": include_object})
            return compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()


def migrations_dir() -> Path:
    import migrations

    return Path(migrations.__file__).resolve().parent


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if url:
        cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def _run(url: str | None, fn, *args, **kwargs) -> None:
    """Run an Alembic command on one connection (serialized on PostgreSQL by an advisory lock)."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7262331)")
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            fn(cfg, *args, **kwargs)
    finally:
        engine.dispose()


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the database to `revision` (head by default). Idempotent."""
    _run(url, command.upgrade, revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    _run(url, command.downgrade, revision)


def current_revision(url: str | None = None) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def is_up_to_date(url: str | None = None) -> bool:
    return current_revision(url) == head_revision()
