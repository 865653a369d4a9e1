"""HTTP client of the blocktune service (httpx): jobs, trials, configs.

Stands alone: it imports nothing of compiler/tuner/db/service.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Mapping

import httpx

from client.models import BestConfig, Gpu, Job, JobPage, Kernel, Trial

API = "/api/v1"
log = logging.getLogger("blocktune.client")


class ServiceError(Exception):
    """The service answered with an error status."""

    def __init__(self, status_code: int, detail: Any):
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"HTTP {status_code}: {detail}")


class ServiceUnavailable(ServiceError):
    """The service could not be reached after all retries."""

    def __init__(self, message: str):
        super().__init__(0, message)


def _spec_to_dict(spec: Any) -> dict:
    if hasattr(spec, "model_dump"):
        return spec.model_dump(mode="json", exclude_none=True)
    if isinstance(spec, Mapping):
        return dict(spec)
    raise TypeError(f"a job spec must be a dict or a pydantic model, not {type(spec).__name__}")


class Client:
    """`Client(url, token)`.

    The token needs the scopes of the calls made: `submit` for submit_job and cancel, `publish` for
    publish, `read` for the reads when the service requires a token for them. A call the token has
    no scope for raises ServiceError 403 whose detail names the scope.

    Connection errors and timeouts are retried `retries` times with exponential backoff
    (`backoff`, doubled each time); 5xx answers to reads are retried the same way.
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.25, transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self.token = token
        self.retries = retries
        self.backoff = backoff
        headers = {"User-Agent": "blocktune-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    # -- plumbing -----------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, *, retry_5xx: bool = True, **kw) -> httpx.Response:
        delay = self.backoff
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                r = self._http.request(method, path, **kw)
            except (httpx.TransportError,) as exc:  # connect errors, timeouts, broken connections
                last = exc
            else:
                if r.status_code >= 500 and retry_5xx and attempt < self.retries:
                    last = ServiceError(r.status_code, r.text)
                else:
                    if r.status_code >= 400:
                        try:
                            detail = r.json().get("detail", r.text)
                        except ValueError:
                            detail = r.text
                        raise ServiceError(r.status_code, detail)
                    return r
            if attempt < self.retries:
                time.sleep(delay)
                delay *= 2
        raise ServiceUnavailable(f"{method} {self.url}{path} failed after {self.retries + 1} attempts: {last}")

    # -- jobs ---------------------------------------------------------------------------------
    def submit_job(self, spec: Any, *, gpu_model: str | None = None, idempotency_key: str | None = None) -> Job:
        """Submit a job spec (a dict, or a jobspec.JobSpec). A retried submission with the same
        idempotency key returns the same job; one is generated when none is given, so the
        client's own retries never make two jobs."""
        key = idempotency_key or uuid.uuid4().hex
        params = {"gpu_model": gpu_model} if gpu_model else None
        r = self._request("POST", f"{API}/jobs", json=_spec_to_dict(spec), params=params,
                          headers={"Idempotency-Key": key})
        return Job.model_validate(r.json())

    def get_job(self, job_id: int) -> Job:
        return Job.model_validate(self._request("GET", f"{API}/jobs/{int(job_id)}").json())

    def list_jobs(self, *, state: str | None = None, kernel: str | None = None, gpu_model: str | None = None,
                  limit: int = 50, offset: int = 0) -> JobPage:
        params = {k: v for k, v in {"state": state, "kernel": kernel, "gpu_model": gpu_model,
                                     "limit": limit, "offset": offset}.items() if v is not None}
        return JobPage.model_validate(self._request("GET", f"{API}/jobs", params=params).json())

    def cancel(self, job_id: int) -> Job:
        return Job.model_validate(self._request("POST", f"{API}/jobs/{int(job_id)}/cancel").json())

    def trials(self, job_id: int) -> list[Trial]:
        return [Trial.model_validate(t) for t in self._request("GET", f"{API}/jobs/{int(job_id)}/trials").json()]

    def wait(self, job_id: int, *, poll: float = 1.0, timeout: float | None = None, progress: bool = True) -> Job:
        """Follow a job until it ends, with a rich progress bar; returns the final job.

        While no live worker can take the job, the service says why (`Job.waiting_reason`, e.g.
        "waiting for a worker with GPU model X; 1 worker alive: …"): the progress bar shows it, and
        without one it is logged (logger "blocktune.client") each time it changes. A TimeoutError
        carries it too."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self.get_job(job_id)

        def raise_if_late() -> None:
            if deadline is None or time.monotonic() <= deadline:
                return
            why = f": {job.waiting_reason}" if job.waiting_reason else ""
            raise TimeoutError(f"job {job_id} still {job.state} after {timeout}s{why}")

        if not progress:
            said = None
            while not job.done:
                if job.waiting_reason and job.waiting_reason != said:
                    log.warning("job %d: %s", job_id, job.waiting_reason)
                said = job.waiting_reason
                raise_if_late()
                time.sleep(poll)
                job = self.get_job(job_id)
            return job
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]job {task.fields[job]}[/] {task.fields[state]}"), BarColumn(),
                      MofNCompleteColumn(), TextColumn("best {task.fields[best]}"), TimeElapsedColumn(),
                      TextColumn("{task.fields[waiting]}", style="yellow"), transient=False) as bar:
            task = bar.add_task("job", total=job.trials_total or None, job=job_id, state=job.state, best="-",
                                waiting="")
            while True:
                best = f"{job.best_time_ms:.4f} ms" if job.best_time_ms is not None else "-"
                bar.update(task, completed=job.trials_done, total=job.trials_total or None, state=job.state, best=best,
                           waiting=job.waiting_reason or "")
                if job.done:
                    return job
                raise_if_late()
                time.sleep(poll)
                job = self.get_job(job_id)

    # -- configs, kernels, gpus ---------------------------------------------------------------
    def best_config(self, kernel: str, key: Mapping[str, Any], gpu_model: str, *,
                    compute_capability: str | None = None) -> BestConfig | None:
        """The launch-time lookup; None when the service has nothing that fits (404)."""
        import json

        params = {"kernel": kernel, "key": json.dumps(dict(key), sort_keys=True), "gpu_model": gpu_model}
        if compute_capability:
            params["compute_capability"] = compute_capability
        try:
            r = self._request("GET", f"{API}/configs/best", params=params)
        except ServiceError as exc:
            if exc.status_code == 404:
                return None
            raise
        return BestConfig.model_validate(r.json())

    def publish(self, result: Mapping[str, Any]) -> BestConfig:
        """Send a locally tuned best config (POST /configs); needs a token with the `publish` scope."""
        return BestConfig.model_validate(self._request("POST", f"{API}/configs", json=dict(result)).json())

    def kernels(self) -> list[Kernel]:
        return [Kernel.model_validate(k) for k in self._request("GET", f"{API}/kernels").json()]

    def gpus(self) -> list[Gpu]:
        return [Gpu.model_validate(g) for g in self._request("GET", f"{API}/gpus").json()]

    def health(self) -> dict:
        return self._request("GET", "/healthz").json()
