"""The launch-time config lookup used by `compiler.autotune` when BLOCKTUNE_SERVICE_URL is set.

    get_best_config(kernel_fingerprint, kernel_name, key, gpu_model) -> dict | None

asks the service once per (kernel, key values, GPU model) and process: the answer (a hit or a miss)
is kept in memory, and hits are also kept on disk (BLOCKTUNE_CACHE_DIR, default the user cache dir)
so that a new process starts without asking while the entry is younger than BLOCKTUNE_LOOKUP_TTL
seconds (default one day; a stale entry still serves when the service is unreachable).

When the service is down or slower than BLOCKTUNE_LOOKUP_TIMEOUT (default 0.5 s), the lookup returns
None at once (the caller tunes locally, as Triton does), warns a single time, and does not try the
service again for BLOCKTUNE_LOOKUP_RETRY_AFTER seconds (default 60).

Environment (client/settings.py): BLOCKTUNE_SERVICE_URL, BLOCKTUNE_TOKEN, BLOCKTUNE_PUBLISH=1,
BLOCKTUNE_SUBMIT_ON_MISS=1, BLOCKTUNE_SUBMIT_TIMEOUT. Give BLOCKTUNE_TOKEN only the scopes this process uses: `publish` for
BLOCKTUNE_PUBLISH=1, `submit` for BLOCKTUNE_SUBMIT_ON_MISS=1, `read` when the service's reads need a
token (`blocktune token create NAME --scope publish`); never `admin`. When the token lacks a scope
the service answers 403 and the warning says which. Of ours, this module imports only its settings
and the problem key's format (jobspec.problem_key, which does not load pydantic).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import httpx

from client.settings import settings
from jobspec.problem_key import canonical_key

API = "/api/v1"

_lock = threading.RLock()
_memory: dict[tuple[str, str, str, str], dict | None] = {}
_disk: dict[str, dict] | None = None
_disk_path: Path | None = None
_http: httpx.Client | None = None
_http_key: tuple | None = None
_down_until = 0.0
_warned = False
_submitted: set[str] = set()
stats = {"requests": 0, "hits": 0, "misses": 0, "errors": 0, "memory_hits": 0, "disk_hits": 0}


class LookupWarning(UserWarning):
    pass


def service_url() -> str | None:
    return settings.service_url


def publish_enabled() -> bool:
    return settings.publish


def submit_on_miss_enabled() -> bool:
    return settings.submit_on_miss


def _token() -> str | None:
    return settings.token


def has_token() -> bool:
    """Whether an API token is configured (publishing and submitting need one)."""
    return _token() is not None


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (tuple, set)):
        return list(obj)
    return str(obj)


def reset() -> None:
    """Forget the in-memory cache and the service-down state, as a new process starts (after
    BLOCKTUNE_SERVICE_URL or the token changed, say)."""
    global _disk, _disk_path, _down_until, _warned, _http, _http_key
    with _lock:
        _memory.clear()
        _submitted.clear()
        _disk, _disk_path = None, None
        _down_until, _warned = 0.0, False
        if _http is not None:
            _http.close()
        _http, _http_key = None, None
        for k in stats:
            stats[k] = 0


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, LookupWarning, stacklevel=3)


def _why(r: httpx.Response) -> str:
    """The service's message of an error answer (it names a missing token scope, for example)."""
    try:
        detail = r.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return f"HTTP {r.status_code}: {detail if isinstance(detail, str) else r.text[:200]}"


def _client(url: str) -> httpx.Client:
    global _http, _http_key
    timeout = settings.lookup_timeout_s
    token = _token()
    k = (url, timeout, token)
    if _http is None or _http_key != k:
        if _http is not None:
            _http.close()
        headers = {"User-Agent": "blocktune-lookup"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        _http = httpx.Client(base_url=url, timeout=httpx.Timeout(timeout), headers=headers)
        _http_key = k
    return _http


# -- disk cache ------------------------------------------------------------------------------------
def _cache_file(url: str) -> Path:
    base = settings.cache_dir
    if not base:
        try:
            import platformdirs

            base = platformdirs.user_cache_dir("blocktune", appauthor=False)
        except Exception:
            base = os.path.join(tempfile.gettempdir(), "blocktune-cache")
    h = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(base) / "lookup" / f"{h}.json"


def _load_disk(url: str) -> dict[str, dict]:
    global _disk, _disk_path
    path = _cache_file(url)
    if _disk is None or _disk_path != path:
        _disk_path = path
        try:
            data = json.loads(path.read_text())
            _disk = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            _disk = {}
    return _disk


def _save_disk(url: str, ck: str, result: dict) -> None:
    disk = _load_disk(url)
    disk[ck] = {"at": time.time(), "result": result}
    path = _cache_file(url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".lookup-")
        with os.fdopen(fd, "w") as f:
            json.dump(disk, f)
        os.replace(tmp, path)   # atomic: concurrent processes never see half a file
    except OSError:
        pass


# -- the lookup ----------------------------------------------------------------------------------
def get_best_config(kernel_fingerprint: str, kernel_name: str, key: Mapping[str, Any], gpu_model: str,
                    compute_capability: str | None = None) -> dict | None:
    """The service's best config for this kernel, key values and GPU model, or None.

    The dict is the service's answer: config (constexprs + num_warps + num_stages), median_ms,
    default_ms, match ("exact" | "compute_capability" | "nearest_key"), … Never raises.
    """
    global _down_until
    url = service_url()
    if not url:
        return None
    if not gpu_model:
        return None           # no GPU and not interpreting: nothing to ask for
    ck = canonical_key(key)
    mk = (url, kernel_fingerprint, ck, gpu_model)
    with _lock:
        if mk in _memory:
            stats["memory_hits"] += 1
            return _memory[mk]
        disk_key = f"{kernel_fingerprint}|{ck}|{gpu_model}"
        entry = _load_disk(url).get(disk_key)
        ttl = settings.lookup_ttl_s
        if entry and time.time() - entry.get("at", 0) < ttl:
            stats["disk_hits"] += 1
            _memory[mk] = entry["result"]
            return entry["result"]
        if time.monotonic() < _down_until:
            return entry["result"] if entry else None   # service known down: no waiting
        params = {"kernel": kernel_fingerprint, "key": ck, "gpu_model": gpu_model}
        if compute_capability:
            params["compute_capability"] = compute_capability
        stats["requests"] += 1
        try:
            r = _client(url).get(f"{API}/configs/best", params=params)
        except (httpx.HTTPError, OSError) as exc:
            stats["errors"] += 1
            _down_until = time.monotonic() + settings.lookup_retry_after_s
            _warn_once(f"blocktune: config service at {url} unreachable or slow ({type(exc).__name__}); "
                       f"tuning {kernel_name} locally")
            return entry["result"] if entry else None
        if r.status_code == 404:
            stats["misses"] += 1
            _memory[mk] = None
            return None
        if r.status_code != 200:
            stats["errors"] += 1
            _warn_once(f"blocktune: config service at {url} answered {_why(r)}; tuning {kernel_name} locally")
            _memory[mk] = None
            return None
        try:
            result = r.json()
            if not isinstance(result, dict) or not isinstance(result.get("config"), dict):
                raise ValueError("no config in the answer")
        except ValueError as exc:
            stats["errors"] += 1
            _warn_once(f"blocktune: bad answer from the config service at {url}: {exc}")
            _memory[mk] = None
            return None
        stats["hits"] += 1
        _memory[mk] = result
        _save_disk(url, disk_key, result)
        return result


def publish(kernel_fingerprint: str, kernel_name: str, key: Mapping[str, Any], gpu_model: str,
            compute_capability: str, config: Mapping[str, Any], median_ms: float,
            default_ms: float | None = None) -> bool:
    """Send a locally tuned best config to the service (POST /api/v1/configs; needs BLOCKTUNE_TOKEN
    with the `publish` scope).
    Returns whether the service recorded it. Never raises."""
    url = service_url()
    if not url:
        return False
    body = {"kernel_fingerprint": kernel_fingerprint, "kernel_name": kernel_name,
            "problem_key": json.loads(canonical_key(key)), "gpu_model": gpu_model,
            "compute_capability": str(compute_capability),
            "config": json.loads(json.dumps(dict(config), default=_json_default)),
            "median_ms": float(median_ms)}
    if default_ms is not None:
        body["default_ms"] = float(default_ms)
    with _lock:
        if time.monotonic() < _down_until:
            return False
        try:
            r = _client(url).post(f"{API}/configs", json=body)
        except (httpx.HTTPError, OSError) as exc:
            _warn_once(f"blocktune: could not publish {kernel_name}'s config to {url}: {type(exc).__name__}")
            return False
        if r.status_code != 200:
            _warn_once(f"blocktune: publishing {kernel_name}'s config to {url} failed: {_why(r)}")
            return False
        _memory[(url, kernel_fingerprint, canonical_key(key), gpu_model)] = r.json() | {"match": "exact"}
        return True


def submit_on_miss(spec: Mapping[str, Any], gpu_model: str | None = None,
                   idempotency_key: str | None = None) -> int | None:
    """Submit a tuning job (a tuner job spec) after a lookup miss; at most once per spec and GPU
    model per process, and idempotent across processes (the key is derived from the spec).
    Returns the job id, or None. Never raises.

    The request has its own timeout (BLOCKTUNE_SUBMIT_TIMEOUT, default 10 s: the service parses
    and front-end-compiles the kernel before answering) and does not hold the lookups' lock, so a
    submission running in a background thread never delays another kernel's lookup."""
    url = service_url()
    if not url:
        return None
    spec = json.loads(json.dumps(dict(spec), default=_json_default))
    idem = idempotency_key or "miss-" + hashlib.sha256(
        (json.dumps(spec, sort_keys=True) + "|" + (gpu_model or "")).encode()).hexdigest()[:40]
    with _lock:
        if idem in _submitted or time.monotonic() < _down_until:
            return None
        _submitted.add(idem)
    headers = {"User-Agent": "blocktune-lookup", "Idempotency-Key": idem}
    token = _token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        r = httpx.post(f"{url}{API}/jobs", json=spec, params={"gpu_model": gpu_model} if gpu_model else None,
                       headers=headers, timeout=settings.submit_timeout_s)
    except (httpx.HTTPError, OSError) as exc:
        with _lock:
            _warn_once(f"blocktune: could not submit a tuning job to {url}: {type(exc).__name__}")
        return None
    if r.status_code not in (200, 201):
        with _lock:
            _warn_once(f"blocktune: submitting a tuning job to {url} failed: {_why(r)}")
        return None
    try:
        return int(r.json()["id"])
    except (ValueError, KeyError, TypeError):
        with _lock:
            _warn_once(f"blocktune: bad answer from {url} to a job submission")
        return None
