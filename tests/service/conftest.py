from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.migrate import upgrade
from service.app import create_app
from service.core.config import Settings
from service.core.security import create_token


@pytest.fixture(scope="session")
def pg_template(postgres_server):
    """A migrated PostgreSQL database to copy (CREATE DATABASE … TEMPLATE) for each test."""
    import sqlalchemy as sa

    name = "blocktune_service_template"
    admin = sa.create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    upgrade(f"{postgres_server}/{name}")
    admin.dispose()
    return name


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """A migrated, empty database: once on SQLite, once on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'blocktune.db'}"
        upgrade(url)
        yield url
        return
    from tests.pg import scratch_database

    server = request.getfixturevalue("postgres_server")
    template = request.getfixturevalue("pg_template")
    with scratch_database(server, template, prefix="s") as url:
        yield url


@pytest.fixture
def sqlite_db(sqlite_url):
    upgrade(sqlite_url)
    return sqlite_url


from svc_helpers import make_token  # noqa: E402


@pytest.fixture
def token(db_url):
    return make_token(db_url)


@pytest.fixture
def api(db_url):
    app = create_app(Settings(database_url=db_url, max_body_bytes=64 * 1024), database_url=db_url)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def sqlite_api(sqlite_db):
    """A TestClient on a migrated SQLite database, with `.token` a valid API token."""
    app = create_app(Settings(database_url=sqlite_db, max_body_bytes=64 * 1024), database_url=sqlite_db)
    with TestClient(app, raise_server_exceptions=False) as c:
        c.token = make_token(sqlite_db)
        yield c
