"""The API answers as its OpenAPI document says (issue 9, item 6).

Schemathesis (its pytest integration, `@schema.parametrize()`) generates requests for every
operation of the document — schema-valid and schema-violating ones, boundary values, missing
parameters, other methods — and sends them to a real `blocktune serve` (uvicorn on 127.0.0.1),
on SQLite and on PostgreSQL, with a valid API token and without one, and also to a server whose
reads need a token. Every check runs: no 5xx, every status, content type, header and body as
documented, invalid input refused, valid input accepted, authentication enforced.

Deterministic: a fixed seed, Hypothesis derandomized, no example database. The document is built
from the application here (module level, as the pytest integration wants) with the same settings
as the server, and each server's fixture checks that it serves exactly that document.
"""
from __future__ import annotations

import collections
import os

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from service.app import create_app
from service.core.config import Settings
from svc_helpers import LiveServer, make_token

# Hypothesis examples per operation in the fuzzing phase (the examples and coverage phases add
# their own): about 1,400 requests per server and token variant, about 1.5 min for the six on 2 cores
EXAMPLES = int(os.environ.get("BLOCKTUNE_CONTRACT_EXAMPLES", "40"))
SEED = int(os.environ.get("BLOCKTUNE_CONTRACT_SEED", "20240909"))
MIN_CASES = 1000


def _document(read_requires_token: bool) -> dict:
    url = "sqlite:///:memory:"      # the document does not depend on the database
    return create_app(Settings(database_url=url, read_requires_token=read_requires_token), database_url=url).openapi()


CONFIG = {
    "seed": SEED,
    "generation": {"database": "none", "deterministic": True},
    "output": {"sanitization": {"enabled": False}},   # a failure's curl shows what was sent
    "operations": [{
        # a spec that fits JobSpec's schema can still be refused: its kernel must compile and its
        # arguments be the kernel's (the documented 422); every other check stays as it is
        "include-name": "POST /api/v1/jobs",
        "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "409", "422", "503"]}},
    }],
}
OPEN_READS = schemathesis.openapi.from_dict(_document(False), config=schemathesis.Config.from_dict(CONFIG))
TOKEN_READS = schemathesis.openapi.from_dict(_document(True), config=schemathesis.Config.from_dict(CONFIG))
OPERATIONS = {f"{m.upper()} {p}" for p, ops in _document(False)["paths"].items() for m in ops}

CASES: collections.Counter = collections.Counter()      # (variant, operation) → requests sent
STATUSES: collections.Counter = collections.Counter()   # (variant, status) → responses


def _server(request, tmp_path_factory, db: str, read_requires_token: bool):
    env = {"BLOCKTUNE_READ_REQUIRES_TOKEN": "1" if read_requires_token else "0"}

    def start(url):
        server = LiveServer(url, env=env)
        server.db_url, server.db = url, db
        served = httpx.get(server.base + "/api/v1/openapi.json").json()
        assert served == _document(read_requires_token), "the server serves another document than the one tested"
        return server

    if db == "sqlite":
        server = start(f"sqlite:///{tmp_path_factory.mktemp('contract') / 'blocktune.db'}")
        yield server
        server.stop()
        return
    from tests.pg import scratch_database

    with scratch_database(request.getfixturevalue("postgres_server"), prefix="contract") as url:
        server = start(url)
        yield server
        server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def open_reads_server(request, tmp_path_factory):
    yield from _server(request, tmp_path_factory, request.param, read_requires_token=False)


@pytest.fixture(scope="module")
def token_reads_server(request, tmp_path_factory):
    yield from _server(request, tmp_path_factory, "sqlite", read_requires_token=True)


class Caller:
    """Sends a case on one keep-alive session, as the token holder or anonymously."""

    def __init__(self, server, variant: str, with_token: bool):
        self.server, self.variant, self.with_token = server, variant, with_token
        self.session = requests.Session()
        self.token = make_token(server.db_url, "contract") if with_token else None

    def call(self, case):
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        CASES[(self.variant, case.operation.label)] += 1
        response = case.call_and_validate(base_url=self.server.base, session=self.session, headers=headers)
        STATUSES[(self.variant, response.status_code)] += 1
        if self.with_token and case.method.upper() == "DELETE" and response.status_code == 200 \
                and response.json().get("prefix") == self.token[:10]:
            self.token = make_token(self.server.db_url, "contract")   # it revoked our token: keep one


@pytest.fixture(scope="module", params=["token", "anonymous"])
def open_reads_caller(request, open_reads_server):
    c = Caller(open_reads_server, f"{open_reads_server.db}/{request.param}", request.param == "token")
    yield c
    c.session.close()


@pytest.fixture(scope="module", params=["token", "anonymous"])
def token_reads_caller(request, token_reads_server):
    c = Caller(token_reads_server, f"sqlite+reads-need-token/{request.param}", request.param == "token")
    yield c
    c.session.close()


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


@OPEN_READS.parametrize()
@SETTINGS
def test_responses_match_the_openapi_document(case, open_reads_caller):
    open_reads_caller.call(case)


@TOKEN_READS.parametrize()
@SETTINGS
def test_responses_match_the_openapi_document_when_reads_need_a_token(case, token_reads_caller):
    token_reads_caller.call(case)


def test_every_operation_was_exercised_in_every_variant():
    """Runs after the two tests above (pytest keeps a module's order): the run was not vacuous."""
    if not CASES:
        pytest.skip("run together with the schemathesis tests of this module")
    variants = {v for v, _ in CASES}
    per_variant = {v: sum(n for (w, _), n in CASES.items() if w == v) for v in sorted(variants)}
    print(f"\nschemathesis: {sum(CASES.values())} requests: {per_variant}")
    print("statuses:", dict(sorted(STATUSES.items())))
    for v in variants:
        assert {op for w, op in CASES if w == v} == OPERATIONS, v
        assert any(200 <= s < 300 for w, s in STATUSES if w == v), f"{v}: no request succeeded"
    assert sum(CASES.values()) >= MIN_CASES
