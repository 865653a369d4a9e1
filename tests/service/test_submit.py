"""Submitting jobs: validation, idempotency, and hostile input that must be refused without effect."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from db.engine import make_engine
from db.models import Job, Kernel

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "add.yaml").read_text())


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def _count(url, model):
    eng = make_engine(url)
    with eng.connect() as c:
        n = c.scalar(sa.select(sa.func.count()).select_from(model))
    eng.dispose()
    return n


def test_submit_and_idempotency(api, db_url, token):
    h = {**auth(token), "Idempotency-Key": "retry-me-1"}
    r = api.post("/api/v1/jobs", json=SPEC, headers=h)
    assert r.status_code == 201
    job = r.json()
    assert job["state"] == "queued" and job["trials_total"] == 6 and job["kernel_name"] == "add_kernel"
    assert job["study_name"] == f"job-{job['id']}" and len(job["kernel_fingerprint"]) == 64
    again = api.post("/api/v1/jobs", json=SPEC, headers=h)
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    other = copy.deepcopy(SPEC)
    other["budget"]["trials"] = 9
    r = api.post("/api/v1/jobs", json=other, headers=h)
    assert r.status_code == 409 and "different" in r.json()["detail"]
    # without a key, a second submission is a second job; the kernel is registered once
    r = api.post("/api/v1/jobs", json=SPEC, headers=auth(token), params={"gpu_model": "NVIDIA H100 80GB HBM3"})
    assert r.status_code == 201 and r.json()["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert _count(db_url, Job) == 2 and _count(db_url, Kernel) == 1
    assert api.post("/api/v1/jobs", json=SPEC).status_code == 401


def test_the_api_documents_the_spec_as_the_typed_model(api):
    """POST /api/v1/jobs takes jobspec.JobSpec as its body: OpenAPI shows the model, field by
    field (no free-form object), with the bounds the model itself checks."""
    from jobspec.model import JobSpec

    doc = api.get("/api/v1/openapi.json").json()
    body = doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/JobSpec"}
    schemas = doc["components"]["schemas"]
    spec = schemas["JobSpec"]
    assert set(spec["properties"]) == set(JobSpec.model_fields) and spec["additionalProperties"] is False
    assert set(spec["required"]) == {"kernel", "args", "grid", "space"}
    assert spec["properties"]["args"]["maxItems"] == 512 and spec["properties"]["key"]["maxItems"] == 8
    assert schemas["ArgSpec"]["properties"]["name"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$"


def test_spec_errors_are_422_with_the_field(api, token):
    bad = copy.deepcopy(SPEC)
    bad["space"]["num_warps"] = [3]
    r = api.post("/api/v1/jobs", json=bad, headers=auth(token))
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["field"] == "body.space" and "num_warps must be powers of two" in d["reason"]
    bad = copy.deepcopy(SPEC)
    bad["args"][1]["name"] = "not_an_arg"
    r = api.post("/api/v1/jobs", json=bad, headers=auth(token))
    assert r.status_code == 422 and "not_an_arg" in r.text
    bad = copy.deepcopy(SPEC)
    bad["kernel"]["name"] = "missing_kernel"
    r = api.post("/api/v1/jobs", json=bad, headers=auth(token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.kernel.source"


MARKER = "/tmp/blocktune-hostile-marker"

KERNEL = '''import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
{body}
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
'''

HOSTILE_SOURCES = {
    "import os": ("import os\nos.system('touch " + MARKER + "')\n" + KERNEL.format(body=""), "import of 'os'"),
    "from import": ("from os import system\n" + KERNEL.format(body=""), "not allowed"),
    "os.system in kernel": (KERNEL.format(body=f"    os.system('touch {MARKER}')"), "os"),
    "__import__": ("__import__('os').system('touch " + MARKER + "')\n" + KERNEL.format(body=""), "not allowed"),
    "dunder access": (KERNEL.format(body="    c = offsets.__class__.__bases__[0].__subclasses__()"), "__"),
    "exec": (KERNEL.format(body=f"    exec(\"open('{MARKER}', 'w')\")"), "exec"),
    "eval": (KERNEL.format(body=f"    eval(\"open('{MARKER}', 'w')\")"), "eval"),
    "open": (KERNEL.format(body=f"    open('{MARKER}', 'w')"), "open"),
    "module-level call": (f"open('{MARKER}', 'w').write('x')\n" + KERNEL.format(body=""), "not allowed"),
    "huge loop": (KERNEL.format(body="    for i in range(10**12):\n        mask = mask & mask"), "iterations"),
    "huge static loop": (KERNEL.format(body="    for i in tl.static_range(2**40):\n        mask = mask & mask"),
                         "iterations"),
    "endless while": (KERNEL.format(body="    while True:\n        mask = mask & mask"), "never ends"),
    "syntax error": (KERNEL.format(body="    def (:"), "rror"),
    "NUL byte": (KERNEL.format(body="    x = 1\x00"), "NUL"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SOURCES))
def test_hostile_kernel_source_is_refused_without_effect(sqlite_api, sqlite_db, case):
    api, db_url, token = sqlite_api, sqlite_db, sqlite_api.token
    import os

    if os.path.exists(MARKER):
        os.remove(MARKER)
    source, expected = HOSTILE_SOURCES[case]
    spec = copy.deepcopy(SPEC)
    spec["kernel"]["source"] = source
    r = api.post("/api/v1/jobs", json=spec, headers=auth(token))
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["field"] == "body.kernel.source" and expected in d["reason"], d
    assert not os.path.exists(MARKER)
    assert _count(db_url, Job) == 0 and _count(db_url, Kernel) == 0


HOSTILE_EXPRESSIONS = {
    "grid import": (("grid",), ["__import__('os').system('touch " + MARKER + "')"]),
    "grid dunder": (("grid",), ["n_elements.__class__"]),
    "grid exec": (("grid",), ["exec('x')"]),
    "grid lambda": (("grid",), ["(lambda: 1)()"]),
    "huge power": (("grid",), ["9**9**9"]),
    "constraint attribute": (("constraints",), ["BLOCK_SIZE.bit_length() > 1"]),
    "scalar arg": (("args", 3, "value"), "open('" + MARKER + "', 'w')"),
    "huge tensor": (("sizes", "N"), 2**40),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_EXPRESSIONS))
def test_hostile_expressions_are_refused(sqlite_api, sqlite_db, case):
    api, db_url, token = sqlite_api, sqlite_db, sqlite_api.token
    import os

    path, value = HOSTILE_EXPRESSIONS[case]
    spec = copy.deepcopy(SPEC)
    target = spec
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    r = api.post("/api/v1/jobs", json=spec, headers=auth(token))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["reason"]
    assert not os.path.exists(MARKER)
    assert _count(db_url, Job) == 0
