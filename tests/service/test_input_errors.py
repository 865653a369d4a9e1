"""Input that made the API answer 500 or store what it could not send back (issue 9, item 4), on
SQLite and on PostgreSQL: each is refused with a 422 naming the field, nothing is stored, and rows
stored before still read. And when something does fail, the answer is a JSON 500 (or 503 while the
database is away) on a connection that stays open."""
from __future__ import annotations

import json
import secrets
import socket

import pytest
import sqlalchemy as sa

from db.engine import make_engine, session_factory
from db.models import BestConfig, Job
from svc_helpers import LiveServer, seed

BEST = "/api/v1/configs/best"
H100 = "NVIDIA H100 80GB HBM3"


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def json_headers(tok):
    return {**auth(tok), "content-type": "application/json"}


def publish_body(**changes):
    body = {"kernel_fingerprint": "c" * 64, "kernel_name": "softmax", "problem_key": {"n": 1024},
            "gpu_model": "NVIDIA L4", "compute_capability": "8.9", "config": {"BLOCK": 128, "num_warps": 4},
            "median_ms": 0.5}
    body.update(changes)
    return body


def fields(r) -> set[str]:
    return {d["field"] for d in r.json()["detail"]}


def stored_configs(db_url) -> int:
    engine = make_engine(db_url)
    try:
        with engine.connect() as c:
            return c.scalar(sa.select(sa.func.count()).select_from(BestConfig))
    finally:
        engine.dispose()


# -- the lookup's key ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", [
    '{"n_elements": -1' + "0" * 309 + "}",       # -10**309: overflowed the nearest-key distance
    '{"n_elements": -1e309}',                    # parses to -inf
    '{"n_elements": 1e309}',
    '{"n_elements": NaN}',
    '{"n_elements": -Infinity}',
    '{"n_elements": ' + "9" * 400 + "}",
])
def test_lookup_refuses_keys_that_are_not_finite_64_bit_numbers(api, db_url, key):
    seed(db_url, key={"n_elements": 4096})
    api.app.state.config_index.refresh()    # seeded behind the server's back: load it now
    q = {"kernel": "f" * 64, "gpu_model": H100, "key": key}
    fast = api.get(BEST, params=q)
    # a repeated parameter is not for the fast path: FastAPI's route answers it
    routed = api.get(BEST, params=list(q.items()) + [("gpu_model", H100)])
    for r in (fast, routed):
        assert r.status_code == 422, r.text
        assert fields(r) == {"query.key"} or all(f.startswith("query.key.") for f in fields(r)), r.text
    assert api.get(BEST, params={**q, "key": '{"n_elements": 3000}'}).json()["match"] == "nearest_key"


def test_lookup_key_limits_are_the_publish_limits(api, db_url):
    seed(db_url, key={"n_elements": 4096})
    api.app.state.config_index.refresh()    # seeded behind the server's back: load it now
    too_many = json.dumps({f"k{i}": i for i in range(9)})
    not_a_name = json.dumps({"n elements": 1})
    long_text = json.dumps({"dtype": "x" * 33})
    beyond_exact = json.dumps({"n_elements": 2**53})      # a double cannot tell it from 2**53 + 1
    a_number_as_text = json.dumps({"n_elements": "0" * 33})
    for key in (too_many, not_a_name, long_text, beyond_exact, a_number_as_text):
        r = api.get(BEST, params={"kernel": "f" * 64, "gpu_model": H100, "key": key})
        assert r.status_code == 422 and all(f.startswith("query.key") for f in fields(r)), r.text
    r = api.get(BEST, params={"kernel": "f" * 64, "gpu_model": H100, "key": json.dumps({"n_elements": 2**53 - 1})})
    assert r.status_code == 200 and r.json()["match"] == "nearest_key"


def test_a_query_parameter_given_twice_with_different_values_is_refused(api, db_url):
    seed(db_url, key={"n_elements": 4096})
    api.app.state.config_index.refresh()    # seeded behind the server's back: load it now
    r = api.get("/api/v1/jobs", params=[("kernel", "add_kernel"), ("kernel", "other")])
    assert r.status_code == 422 and fields(r) == {"query.kernel"}, r.text      # was: the last one, silently
    q = [("kernel", "f" * 64), ("gpu_model", H100), ("key", '{"n_elements": 4096}')]
    r = api.get(BEST, params=q + [("gpu_model", "NVIDIA A100")])
    assert r.status_code == 422 and fields(r) == {"query.gpu_model"}, r.text
    assert api.get(BEST, params=q + [("gpu_model", H100)]).json()["match"] == "exact"   # the same twice is no doubt
    assert api.get("/api/v1/jobs", params=[("limit", "5"), ("limit", "5")]).json()["limit"] == 5


def test_publish_keeps_the_json_types(api, db_url, token):
    """Values were converted on the way in: a 33-character "000…0" key value was stored as the
    integer 0, an integer below -2**63 as a float, "0.5" was a number."""
    for change, field in (({"problem_key": {"n": "0" * 33}}, "body.problem_key.n"),
                          ({"problem_key": {"n": -(2**63) - 1}}, "body.problem_key.n"),
                          ({"median_ms": "0.5"}, "body.median_ms"),
                          ({"config": {"BLOCK": 128}, "compute_capability": 8.9}, "body.compute_capability")):
        r = api.post("/api/v1/configs", json=publish_body(**change), headers=auth(token))
        assert r.status_code == 422 and any(f.startswith(field) for f in fields(r)), (change, r.text)
    assert stored_configs(db_url) == 0


# -- lone surrogates -----------------------------------------------------------------------------

SURROGATES = [
    ("/api/v1/configs", publish_body(config={"BLOCK": "\ud800"}), "body.config.BLOCK"),
    ("/api/v1/configs", publish_body(config={"BLOCK\udc00": 1}), "body.config"),
    ("/api/v1/configs", publish_body(problem_key={"n": "\udfff"}), "body.problem_key.n"),
    ("/api/v1/configs", publish_body(kernel_name="soft\ud800max"), "body.kernel_name"),
    ("/api/v1/tokens", {"name": "ci \ud83d"}, "body.name"),
    ("/api/v1/jobs", {"kernel": {"name": "k", "source": "x"}, "configs": [{"BLOCK": "\udbff"}]},
     "body.configs.0.BLOCK"),
]


@pytest.mark.parametrize("path,body,field", SURROGATES)
def test_a_lone_surrogate_anywhere_in_a_body_is_refused(api, db_url, token, path, body, field):
    text = json.dumps(body)            # ASCII, with the surrogate as a \\udXXX escape
    assert "\\ud" in text
    r = api.post(path, content=text.encode(), headers=json_headers(token))
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in fields(r)), r.text
    assert stored_configs(db_url) == 0
    assert api.get("/api/v1/configs").status_code == 200


def test_reads_survive_a_lone_surrogate_stored_before(api, db_url):
    """Rows written by an older server, which accepted lone surrogates: every read of them 500'd."""
    a = seed(db_url)
    engine = make_engine(db_url)
    with session_factory(engine)() as s:
        s.add(BestConfig(kernel_fingerprint="e" * 64, kernel_name="bad", problem_key=json.dumps({"n": "\ud800"}),
                         gpu_model=H100, compute_capability="9.0", config={"BLOCK": "x\udc00"}, median_ms=1.0))
        s.get(Job, a["job_id"]).spec = {"kernel": {"name": "add_kernel"}, "note": "\ud800"}
        s.commit()
    engine.dispose()
    r = api.get("/api/v1/configs", params={"kernel": "bad"})
    assert r.status_code == 200, r.text
    assert r.json()[0]["config"] == {"BLOCK": "x\ufffd"} and r.json()[0]["problem_key"] == {"n": "\ufffd"}
    assert api.get("/api/v1/configs").status_code == 200
    r = api.get(f"/api/v1/jobs/{a['job_id']}")
    assert r.status_code == 200 and r.json()["spec"]["note"] == "\ufffd"
    page = api.get("/winners")
    assert page.status_code == 200 and "x\ufffd" in page.text and "bad" in page.text


# -- NaN, Infinity, out-of-range numbers ----------------------------------------------------------

def _with(text_body: dict, raw_field: str, raw_value: str) -> str:
    """`text_body` as JSON with one field's value replaced by raw JSON text (NaN is no Python JSON)."""
    return json.dumps({**text_body, raw_field: "@@"}).replace('"@@"', raw_value)


NON_STANDARD = [
    ("/api/v1/configs", _with(publish_body(), "median_ms", "NaN"), "body.median_ms"),
    ("/api/v1/configs", _with(publish_body(), "config", '{"BLOCK": Infinity}'), "body.config.BLOCK"),
    ("/api/v1/configs", _with(publish_body(), "problem_key", '{"n": -Infinity}'), "body.problem_key.n"),
    ("/api/v1/configs", _with(publish_body(), "default_ms", "1e999"), "body.default_ms"),
    ("/api/v1/configs", _with(publish_body(), "problem_key", '{"n": 1' + "0" * 30 + "}"), "body.problem_key.n"),
    ("/api/v1/configs", _with(publish_body(), "config", '{"BLOCK": 1' + "0" * 5000 + "}"), "body"),
    ("/api/v1/jobs", _with({"kernel": {"name": "k", "source": "x"}}, "seed", "NaN"), "body.seed"),
    ("/api/v1/tokens", _with({"name": "ci"}, "n", "-1e400"), "body.n"),
    ("/api/v1/jobs", "[" * 100 + "]" * 100, "body"),
    ("/api/v1/jobs", '{"kernel": "\xff"}'.encode("latin-1"), "body"),   # not UTF-8: was an undocumented 400
]


@pytest.mark.parametrize("path,text,field", NON_STANDARD)
def test_non_standard_json_is_refused(api, db_url, token, path, text, field):
    content = text if isinstance(text, bytes) else text.encode()
    r = api.post(path, content=content, headers=json_headers(token))
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in fields(r)), r.text
    assert stored_configs(db_url) == 0


# -- column and index limits ---------------------------------------------------------------------

LIMITS = [
    ({"kernel_fingerprint": "a" * 129}, "body.kernel_fingerprint"),
    ({"kernel_fingerprint": "a" * 200}, "body.kernel_fingerprint"),
    # random text does not compress below PostgreSQL's btree row limit (2704 bytes)
    ({"problem_key": {f"k{i}": secrets.token_hex(16) for i in range(200)}}, "body.problem_key"),
    ({"problem_key": {"n": secrets.token_hex(3000)}}, "body.problem_key.n"),
    ({"problem_key": {"not a name": 1}}, "body.problem_key"),
]


@pytest.mark.parametrize("change,field", LIMITS)
def test_column_and_index_limits_are_enforced_at_the_api(api, db_url, token, change, field):
    r = api.post("/api/v1/configs", json=publish_body(**change), headers=auth(token))
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in fields(r)), r.text
    assert stored_configs(db_url) == 0
    ok = api.post("/api/v1/configs", json=publish_body(kernel_fingerprint="a" * 128,
                                                       problem_key={f"k{i}": "x" * 32 for i in range(8)}),
                  headers=auth(token))
    assert ok.status_code == 200, ok.text


# -- when something fails anyway ------------------------------------------------------------------

def _http(sock: socket.socket, path: str) -> tuple[int, dict, bytes]:
    """One GET on an open keep-alive connection; (status, headers, body)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection (after {data!r})"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_a_failure_is_a_json_500_with_a_request_id_on_a_connection_that_stays_open(sqlite_db):
    server = LiveServer(sqlite_db)
    try:
        # the database schema is behind the code (a table gone): a fault no request can fix
        engine = make_engine(sqlite_db)
        with engine.begin() as c:
            c.execute(sa.text("DROP TABLE best_configs"))
        engine.dispose()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            status, headers, body = _http(sock, "/api/v1/configs")
            assert status == 500 and headers["content-type"] == "application/json"
            answer = json.loads(body)
            request_id = answer["request_id"]
            assert headers["x-request-id"] == request_id and request_id in answer["detail"]
            status, _, body = _http(sock, "/healthz")          # the same connection answers on
            assert status == 200 and json.loads(body)["status"] == "ok"
    finally:
        log = server.stop()
    assert request_id in log and "best_configs" in log     # the server log has what went wrong


def test_database_unavailable_is_a_503_with_retry_after(postgres_server, pg_template):
    from tests.pg import scratch_database

    admin = sa.create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
    with scratch_database(postgres_server, pg_template, prefix="down") as url:
        name = sa.engine.make_url(url).database
        server = LiveServer(url)
        try:
            import httpx

            assert httpx.get(server.base + "/api/v1/jobs").status_code == 200
            with admin.connect() as c:
                c.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
                c.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                          {"d": name})
            try:
                r = httpx.get(server.base + "/api/v1/jobs")
                assert r.status_code == 503, r.text
                assert "database is unavailable" in r.json()["detail"] and int(r.headers["retry-after"]) > 0
                assert httpx.get(server.base + "/healthz").status_code == 503
            finally:
                with admin.connect() as c:
                    c.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            assert httpx.get(server.base + "/api/v1/jobs").status_code == 200   # back without a restart
        finally:
            server.stop()
    admin.dispose()
