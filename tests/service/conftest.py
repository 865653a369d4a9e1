from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from db.engine import make_engine, session_factory
from db.migrate import upgrade
from service.app import create_app
from service.core.config import Settings
from service.core.security import create_token


@pytest.fixture
def db_url(database_url):
    """A migrated, empty database: SQLite and PostgreSQL."""
    upgrade(database_url)
    return database_url


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
