"""Migrations from empty to head and back, on SQLite and on a real PostgreSQL."""
from __future__ import annotations

import datetime as dt

import optuna
import pytest
import sqlalchemy as sa

from db import migrate
from db.engine import default_url, make_engine, session_factory
from db.models import ApiToken, Base, Job, Kernel, Trial

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


def test_0002_gives_existing_tokens_every_scope_but_admin(database_url):
    """A database with tokens made before scopes existed: upgraded, they keep reading, publishing and
    submitting, stop managing tokens, stay revoked if they were, and the schema matches the models."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.core.config import Settings
    from service.core.security import hash_token

    migrate.upgrade(database_url, "0001")
    engine = make_engine(database_url)
    with engine.begin() as c:        # rows as the code before 0002 wrote them
        for name, clear, revoked in (("laptop", "bt_old-publishing-token", None),
                                     ("gone", "bt_old-revoked-token", dt.datetime(2026, 1, 2))):
            c.execute(sa.text("INSERT INTO api_tokens (name, token_hash, prefix, created_at, revoked_at) "
                              "VALUES (:n, :h, :p, :t, :r)"),
                      {"n": name, "h": hash_token(clear), "p": clear[:10], "t": dt.datetime(2026, 1, 1),
                       "r": revoked})
    engine.dispose()

    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert migrate.schema_differences(database_url) == []
    engine = make_engine(database_url)
    with session_factory(engine)() as s:
        tokens = {t.name: t for t in s.scalars(sa.select(ApiToken))}
    engine.dispose()
    assert {n: t.scopes for n, t in tokens.items()} == {"laptop": {"read", "publish", "submit"},
                                                        "gone": {"read", "publish", "submit"}}
    assert tokens["gone"].revoked_at is not None and tokens["laptop"].revoked_at is None

    app = create_app(Settings(database_url=database_url, read_requires_token=True), database_url=database_url)
    with TestClient(app) as c:
        old = {"Authorization": "Bearer bt_old-publishing-token"}
        body = {"kernel_fingerprint": "f" * 64, "kernel_name": "k", "problem_key": {"n": 1}, "gpu_model": "g",
                "compute_capability": "9.0", "config": {"BLOCK": 64}, "median_ms": 1.0}
        assert c.post("/api/v1/configs", json=body, headers=old).status_code == 200
        assert c.get("/api/v1/configs", headers=old).status_code == 200
        r = c.get("/api/v1/tokens", headers=old)
        assert r.status_code == 403 and "'admin'" in r.json()["detail"]
        assert c.post("/api/v1/tokens", json={"name": "x"}, headers=old).status_code == 403
        assert c.get("/api/v1/configs", headers={"Authorization": "Bearer bt_old-revoked-token"}).status_code == 401

    migrate.downgrade(database_url, "0001")      # and back: the tokens stay, without scopes
    engine = make_engine(database_url)
    with engine.connect() as c:
        assert sorted(c.execute(sa.text("SELECT name FROM api_tokens")).scalars()) == ["gone", "laptop"]
        assert "scopes" not in {col["name"] for col in sa.inspect(c).get_columns("api_tokens")}
        assert "dashboard_sessions" not in sa.inspect(c).get_table_names()
    engine.dispose()
