"""The config lookup under hostile parameters (issue 9, item 2): answers memoized by the normalized
question in a byte-bounded LRU, an over-long query string refused with 414 on the fast path and the
FastAPI route alike, and a real server's memory bounded under 90 KB junk parameters."""
from __future__ import annotations

import json
import re
import socket
from urllib.parse import urlencode

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.core.config import Settings
from svc_helpers import LiveServer, make_token, seed

H100 = "NVIDIA H100 80GB HBM3"
FP = "f" * 64


def _client(url: str, **settings) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, **settings), database_url=url))


def test_memo_is_keyed_by_the_normalized_question(sqlite_db):
    seed(sqlite_db, key={"n_elements": 4096, "m": 8})
    with _client(sqlite_db) as c:
        index = c.app.state.config_index
        spellings = [
            {"kernel": FP, "gpu_model": H100, "key": '{"n_elements": 4096, "m": 8}'},
            {"gpu_model": H100, "key": '{"m":8,"n_elements":4096}', "kernel": FP},              # order, spacing
            {"kernel": FP, "gpu_model": H100, "key": '{"m": 8, "n_elements": 4096}', "junk": "x" * 9000},
            {"kernel": FP, "gpu_model": H100, "key": '{ "n_elements" : 4096 , "m" : 8 }', "other": "y"},
        ]
        answers = [c.get("/api/v1/configs/best", params=q) for q in spellings]
        assert {a.status_code for a in answers} == {200} and len({a.content for a in answers}) == 1
        assert answers[0].json()["match"] == "exact"
        one = index.memo_bytes
        assert 0 < one < 2000, one            # one entry, not one per spelling (the junk is not in it)
        c.get("/api/v1/configs/best", params={**spellings[0], "key": '{"n_elements": 4096, "m": 9}'})
        assert index.memo_bytes > one          # another question is another entry


def _largest_key(i: int, **fixed) -> dict:
    """A distinct problem key for each i, at the API's limits (8 names, 32-character strings)."""
    key = dict(fixed)
    for j in range(8 - len(fixed)):
        key[f"pad{j}"] = f"{i:08d}" + "p" * 24
    return key


def test_memo_is_bounded_by_bytes(sqlite_db):
    seed(sqlite_db, key={"n": 4096, "pad": "a"})
    budget = 64 * 1024
    with _client(sqlite_db, lookup_cache_bytes=budget) as c:
        index = c.app.state.config_index
        for i in range(600):                   # the largest valid questions (~0.5 KB): 300 KB through a 64 KB memo
            q = {"kernel": FP, "gpu_model": H100, "key": json.dumps(_largest_key(i, n=4096))}
            r = c.get("/api/v1/configs/best", params=q)
            assert r.status_code == 404
            assert index.memo_bytes <= budget
        assert index.memo_bytes > budget // 2  # it is used, up to its budget
        hit = c.get("/api/v1/configs/best", params={"kernel": FP, "gpu_model": H100,
                                                   "key": json.dumps({"n": 4096, "pad": "a"})})
        assert hit.status_code == 200 and hit.json()["match"] == "exact"


def test_over_long_query_string_is_414_on_the_fast_path_and_the_route(sqlite_db):
    """With reads behind a token, the first request with a token goes through the FastAPI route
    (the token is checked in the thread pool and then remembered), the next one through the fast
    path: both refuse the query string the same way, before looking at its parameters."""
    token = make_token(sqlite_db)
    limit = 4096
    with _client(sqlite_db, read_requires_token=True, lookup_max_query_bytes=limit) as c:
        auth = {"Authorization": f"Bearer {token}"}
        long_q = {"kernel": FP, "gpu_model": H100, "key": "{}", "junk": "j" * limit}
        routed = c.get("/api/v1/configs/best", params=long_q, headers=auth)
        fast = c.get("/api/v1/configs/best", params=long_q, headers=auth)
        assert routed.status_code == fast.status_code == 414
        assert routed.json() == fast.json()
        assert re.fullmatch(r"the query string is \d+ bytes, over the limit of 4096 bytes for a config lookup",
                            fast.json()["detail"])
        # also when the over-long parameter is one the route would reject (422) on its own
        bad = {"kernel": "k" * 5000, "gpu_model": H100}
        assert c.get("/api/v1/configs/best", params=bad, headers=auth).status_code == 414
        # a token is checked first: without one the answer is 401, not 414
        assert c.get("/api/v1/configs/best", params=long_q).status_code == 401
        # under the limit: answered
        assert c.get("/api/v1/configs/best", params={"kernel": FP, "gpu_model": H100},
                     headers=auth).status_code == 404
        assert "414" in c.get("/api/v1/openapi.json").json()["paths"]["/api/v1/configs/best"]["get"]["responses"]


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


class _RawClient:
    """GETs on one keep-alive connection, written by hand: httpx refuses URLs over 64 KB."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def get(self, target: str) -> int:
        self.sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))
        while len(self.buf) < length:
            self.buf += self._recv()
        self.buf = self.buf[length:]
        return int(head[9:12])

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.mark.timeout(300)
def test_junk_lookups_do_not_grow_the_server(sqlite_db):
    """The issue's attack: 10,000 lookups with 90 KB junk parameters took a server from 331 MB to
    1.2 GB. Here 3000 with 60 KB junk (each a different value; httptools itself refuses a request
    line over ~80 KB with 400) and 3000 with a different key each, as large as a key may be (8 names,
    32-character values: every one a new question for the memo), against a real uvicorn with a 4 MB memo: the server's
    resident memory must stay within a bound."""
    seed(sqlite_db, key={"n_elements": 4096})
    server = LiveServer(sqlite_db, env={"BLOCKTUNE_LOOKUP_CACHE_BYTES": str(4 * 2**20)})
    c = _RawClient(server.port)
    try:
        path = "/api/v1/configs/best?"
        good = {"kernel": FP, "gpu_model": H100, "key": '{"n_elements": 4096}'}
        for _ in range(300):            # warm up: allocator pools, the route, the memo
            assert c.get(path + urlencode(good)) == 200
        before = _rss_kb(server.proc.pid)
        statuses: dict[int, int] = {}
        for i in range(3000):
            code = c.get(path + urlencode({**good, "junk": f"{i:08d}" + "z" * (60 * 1024)}))
            statuses[code] = statuses.get(code, 0) + 1
        for i in range(3000):
            code = c.get(path + urlencode({**good, "key": json.dumps(_largest_key(i, n_elements=4096))}))
            statuses[code] = statuses.get(code, 0) + 1
        after = _rss_kb(server.proc.pid)
        assert statuses == {414: 3000, 404: 3000}, statuses
        assert httpx.get(server.base + path + urlencode(good)).json()["match"] == "exact"
        metrics = httpx.get(server.base + "/metrics").text
        memo = float(re.search(r"^blocktune_lookup_memo_bytes ([0-9.e+]+)$", metrics, re.M).group(1))
    finally:
        c.close()
        server.stop()
    assert memo <= 4 * 2**20
    # 3000 x 60 KB would be 180 MB if kept, 3000 x 10 KB another 30 MB; allow the 4 MB memo plus slack
    print(f"server RSS {before} kB -> {after} kB, memo {memo:.0f} bytes")
    assert after - before < 40 * 1024, f"RSS grew from {before} kB to {after} kB"


@pytest.mark.parametrize("key", ['{"n_elements": 4096}', '{"n_elements":4096}', '{"n_elements": 3000}',
                                 '{"n_elements": 4096, "mode": "a b+c/é"}', '{}', '{"n_elements": 4096.0}'])
def test_fast_path_parses_as_the_route_does(sqlite_db, key):
    """The fast path's own query parser against FastAPI's: same answers ('+' and '%20' for spaces,
    UTF-8, blank values); a repeated parameter sends a request through the route."""
    seed(sqlite_db, key={"n_elements": 4096})
    with _client(sqlite_db) as c:
        for q in (urlencode({"kernel": FP, "gpu_model": H100, "key": key}),
                  urlencode({"kernel": FP, "gpu_model": H100, "key": key}).replace("+", "%20"),
                  urlencode({"kernel": FP, "gpu_model": H100, "key": key, "compute_capability": ""})):
            fast = c.get("/api/v1/configs/best?" + q)
            routed = c.get("/api/v1/configs/best?" + q + "&kernel=" + FP)
            assert (fast.status_code, fast.json()) == (routed.status_code, routed.json()), q


def test_invented_methods_do_not_grow_the_metrics(sqlite_db):
    with _client(sqlite_db) as c:
        for i in range(50):
            c.request(f"M{i:03d}", "/api/v1/jobs")
        text = c.get("/metrics").text
        assert 'method="OTHER"' in text and 'method="M007"' not in text
