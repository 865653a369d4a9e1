"""Migrations from empty to head and back, on SQLite and on a real PostgreSQL."""
from __future__ import annotations

import datetime as dt

import optuna
import pytest
import sqlalchemy as sa

from db import migrate
from db.engine import default_url, make_engine, session_factory
from db.models import Base, Job, Kernel, Trial

OUR_TABLES = set(Base.metadata.tables)


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_to_head_and_back_down(database_url):
    assert migrate.current_revision(database_url) is None
    migrate.upgrade(database_url)
    assert OUR_TABLES <= _tables(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert migrate.is_up_to_date(database_url)
    migrate.upgrade(database_url)  # idempotent
    migrate.downgrade(database_url, "base")
    assert not (OUR_TABLES & _tables(database_url))
    assert migrate.current_revision(database_url) is None
    migrate.upgrade(database_url)  # and up again
    assert OUR_TABLES <= _tables(database_url)


def test_autogenerate_finds_no_difference(database_url):
    migrate.upgrade(database_url)
    assert migrate.schema_differences(database_url) == []


def test_autogenerate_would_see_a_model_change(database_url):
    """The comparison is real: a column the migrations lack shows up as a difference."""
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    with engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE kernels ADD COLUMN extra INTEGER")
    engine.dispose()
    diffs = migrate.schema_differences(database_url)
    assert any(d[0] == "remove_column" and d[3].name == "extra" for d in diffs), diffs


def test_optuna_tables_live_beside_ours(database_url):
    """Optuna keeps its own tables (`studies`, `trials`, …) and `alembic_version` beside ours."""
    migrate.upgrade(database_url)
    storage = optuna.storages.RDBStorage(database_url)
    study = optuna.create_study(storage=storage, study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    storage.engine.dispose()
    tables = _tables(database_url)
    assert {"studies", "trials", "tuning_trials", "alembic_version", "blocktune_alembic_version"} <= tables
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert migrate.schema_differences(database_url) == []  # Optuna's tables are not ours to diff
    migrate.upgrade(database_url)


def test_sqlite_is_opened_with_wal_and_busy_timeout(sqlite_url):
    engine = make_engine(sqlite_url)
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_default_url(monkeypatch, tmp_path):
    monkeypatch.delenv("BLOCKTUNE_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    url = default_url()
    assert url.startswith("sqlite:///") and url.endswith("blocktune.db") and str(tmp_path) in url
    monkeypatch.setenv("BLOCKTUNE_DATABASE_URL", "postgresql://u@h/db")
    assert default_url() == "postgresql+psycopg://u@h/db"


def test_datetimes_are_timezone_aware_utc(database_url):
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    Session = session_factory(engine)
    plus2 = dt.timezone(dt.timedelta(hours=2))
    with Session.begin() as s:
        k = Kernel(fingerprint="f", name="k", source="src", compiler_version="0")
        s.add(k)
        s.flush()
        s.add(Job(kernel_id=k.id, spec={"a": 1}, study_name="job-1",
                  started_at=dt.datetime(2026, 1, 1, 12, 0, tzinfo=plus2)))
    with Session() as s:
        job = s.scalars(sa.select(Job)).one()
        assert job.created_at.tzinfo is not None and job.created_at.utcoffset() == dt.timedelta(0)
        assert job.started_at == dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.timezone.utc)
        assert job.state == "queued" and job.progress == 0.0 and job.spec == {"a": 1}
    with pytest.raises(sa.exc.StatementError):
        with Session.begin() as s:
            s.add(Job(kernel_id=1, spec={}, study_name="x", started_at=dt.datetime(2026, 1, 1)))
    engine.dispose()


def test_constraints_are_enforced(database_url):
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    Session = session_factory(engine)
    with Session.begin() as s:
        k = Kernel(fingerprint="f", name="k", source="src", compiler_version="0")
        s.add(k)
        s.flush()
        s.add(Job(kernel_id=k.id, spec={}, study_name="job-1"))
    with pytest.raises(sa.exc.IntegrityError):  # state outside the enumeration
        with Session.begin() as s:
            s.add(Job(kernel_id=1, spec={}, study_name="job-2", state="paused"))
    with pytest.raises(sa.exc.IntegrityError):  # trial status outside the enumeration
        with Session.begin() as s:
            s.add(Trial(job_id=1, number=0, config={}, status="great"))
    with pytest.raises(sa.exc.IntegrityError):  # duplicate fingerprint
        with Session.begin() as s:
            s.add(Kernel(fingerprint="f", name="k2", source="", compiler_version="0"))
    with pytest.raises(sa.exc.IntegrityError):  # foreign key (SQLite too: foreign_keys=ON)
        with Session.begin() as s:
            s.add(Job(kernel_id=999, spec={}, study_name="job-3"))
    engine.dispose()


def test_concurrent_upgrades_on_postgres_are_serialized(postgres_url):
    """Several processes (API, workers) may start at once on a fresh database: the advisory lock
    makes all but one find the schema already there."""
    import threading

    errors = []

    def up():
        try:
            migrate.upgrade(postgres_url)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert migrate.is_up_to_date(postgres_url)
