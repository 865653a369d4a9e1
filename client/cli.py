"""`blocktune submit SPEC --service URL [--token T] [--wait]`: a job spec file sent to a tuning service.

The spec (YAML, or JSON for a .json file) is validated here with the model the service itself uses
(jobspec.JobSpec), so that a mistake is shown with its place before anything is sent; the service
then checks the kernel (its compiler's front end) and answers 422 with the place of what it refuses.
"""
from __future__ import annotations

import json
import sys
import uuid

EXIT_INVALID = 2      # the spec or the command line is wrong
EXIT_SERVICE = 3      # the service refused the job or could not be reached
EXIT_FAILED = 1       # --wait: the job ended failed or cancelled


def register(subparsers) -> None:
    from client.settings import settings

    p = subparsers.add_parser("submit", help="submit a job spec (YAML or JSON) to a tuning service",
                              description="Validate a job spec file and submit it to a blocktune service; print "
                                          "the job's id and its dashboard page. The token needs the `submit` scope.")
    p.add_argument("spec", help="job spec file (.yaml, .yml or .json)")
    p.add_argument("--service", default=settings.service_url, required=settings.service_url is None,
                   help="the service's URL, e.g. http://gpu-host:8000 (default: $BLOCKTUNE_SERVICE_URL)")
    p.add_argument("--token", default=None, help="API token with the submit scope (default: $BLOCKTUNE_TOKEN)")
    p.add_argument("--gpu-model", default=None, help="tune on this GPU model only (default: the first worker's)")
    p.add_argument("--idempotency-key", default=None,
                   help="submitting again with the same key returns the same job (default: a fresh one)")
    p.add_argument("--wait", action="store_true", help="follow the job to its end with a progress bar")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between status reads with --wait")
    p.add_argument("--json", action="store_true", help="print the job (and with --wait the finished job) as JSON")
    p.set_defaults(func=cmd_submit)


def cmd_submit(args) -> int:
    import pydantic
    from rich.console import Console

    from client.client import Client, ServiceError, ServiceUnavailable
    from client.settings import settings
    from jobspec.model import load_spec

    err = Console(stderr=True)
    try:
        spec = load_spec(args.spec)
    except pydantic.ValidationError as exc:
        err.print(f"[bold red]invalid job spec[/] {args.spec}:")
        for e in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
            err.print(f"  {loc}: {e['msg']}", markup=False)
        return EXIT_INVALID
    except (OSError, ValueError) as exc:     # unreadable, not YAML/JSON, not a mapping
        err.print(f"[bold red]cannot read[/] {args.spec}: {exc}")
        return EXIT_INVALID
    url = args.service.rstrip("/")
    with Client(url, args.token or settings.token) as client:
        try:
            job = client.submit_job(spec, gpu_model=args.gpu_model,
                                    idempotency_key=args.idempotency_key or f"cli-{uuid.uuid4().hex}")
        except ServiceUnavailable as exc:
            err.print(f"[bold red]cannot reach the service[/]: {exc}", markup=False)
            return EXIT_SERVICE
        except ServiceError as exc:
            err.print(f"[bold red]the service refused the job[/] (HTTP {exc.status_code}):")
            for line in _reasons(exc.detail):
                err.print(f"  {line}", markup=False)
            return EXIT_SERVICE
        page = f"{url}/jobs/{job.id}"
        if args.json and not args.wait:
            print(json.dumps({**job.model_dump(mode="json"), "url": page}))
        elif not args.json:
            print(f"job {job.id} ({spec.kernel.name}) {job.state}: {page}")
        if not args.wait:
            return 0
        try:
            final = client.wait(job.id, poll=args.poll, progress=True)
        except KeyboardInterrupt:
            err.print(f"stopped following job {job.id}; it goes on (cancel it with POST "
                      f"{url}/api/v1/jobs/{job.id}/cancel)", markup=False)
            return 130
        except (ServiceError, ServiceUnavailable) as exc:
            err.print(f"[bold red]lost the service while waiting[/]: {exc}", markup=False)
            return EXIT_SERVICE
    if args.json:
        print(json.dumps({**final.model_dump(mode="json"), "url": page}))
    return _summary(final, err)


def _reasons(detail) -> list[str]:
    """The service's error detail as lines: each invalid field with its reason (a 422), or the text."""
    if isinstance(detail, list):
        return [f"{d.get('field') or '.'.join(map(str, d.get('loc', [])))}: {d.get('reason') or d.get('msg')}"
                for d in detail if isinstance(d, dict)]
    return [str(detail)]


def _summary(job, err) -> int:
    if job.state == "succeeded":
        config = " ".join(f"{k}={v}" for k, v in (job.best_config or {}).items())
        best = f"{job.best_time_ms:.4g} ms" if job.best_time_ms is not None else "—"
        err.print(f"[bold green]succeeded[/]: best {config} ({best}) on {job.gpu_model}")
        return 0
    reason = (job.error or "").splitlines()[0] if job.error else ""
    err.print(f"[bold red]{job.state}[/]{': ' + reason if reason else ''}")
    return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(prog="blocktune")
    register(parser.add_subparsers(dest="command", required=True))
    a = parser.parse_args()
    sys.exit(int(a.func(a) or 0))
