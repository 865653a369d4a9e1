"""The dashboard: server-rendered HTML (Jinja2) with server-rendered SVG charts; no CDN, no
JavaScript library (one small vendored script refreshes job states)."""
from __future__ import annotations

import json
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path as PathParam, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sqlalchemy.orm import joinedload, selectinload

from db.models import JOB_STATES, BestConfig, Gpu, Job, Kernel, Trial, Worker
from service.api.deps import SessionDep, SettingsDep
from service.api.routes.gpus import alive_worker_ids
from service.dashboard.charts import param_charts, trials_chart
from service.dashboard.login import PageAuth
from service.dashboard.templates import TEMPLATES
from service.waiting import waiting_reasons

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def jobs_page(request: Request, session: SessionDep, _: PageAuth,
              state: Annotated[str | None, Query(max_length=16)] = None,
              page: Annotated[int, Query(ge=1, le=100000)] = 1) -> HTMLResponse:
    per = 50
    q = sa.select(Job).options(joinedload(Job.kernel))
    if state in JOB_STATES:
        q = q.where(Job.state == state)
    else:
        state = None
    total = session.scalar(sa.select(sa.func.count()).select_from(q.subquery())) or 0
    jobs = list(session.scalars(q.order_by(Job.id.desc()).limit(per).offset((page - 1) * per)))
    counts = dict(session.execute(sa.select(Job.state, sa.func.count()).group_by(Job.state)).all())
    return TEMPLATES.TemplateResponse(request, "jobs.html", {
        "jobs": jobs, "state": state, "states": JOB_STATES, "counts": counts, "page": page,
        "pages": max(1, (total + per - 1) // per), "total": total, "nav": "jobs"})


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: Annotated[int, PathParam(ge=1, le=2**31 - 1)], session: SessionDep,
             settings: SettingsDep, _: PageAuth) -> HTMLResponse:
    job = session.scalar(sa.select(Job).options(joinedload(Job.kernel)).where(Job.id == job_id))
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    trials = list(session.scalars(sa.select(Trial).where(Trial.job_id == job_id).order_by(Trial.number)))
    ok = [t for t in trials if t.status == "ok" and t.median_ms is not None]
    best = min(ok, key=lambda t: t.median_ms) if ok else None
    return TEMPLATES.TemplateResponse(request, "job.html", {
        "job": job, "trials": trials, "best": best, "n_ok": len(ok),
        "waiting_reason": waiting_reasons(session, settings.worker_alive_seconds, [job]).get(job.id),
        "trials_svg": Markup(trials_chart(trials)),
        "param_svgs": [(p, Markup(svg)) for p, svg in param_charts(trials)],
        "spec_json": json.dumps(job.spec, indent=2, sort_keys=True), "nav": "jobs"})


@router.get("/kernels/{kernel_id}", response_class=HTMLResponse)
def kernel_page(request: Request, kernel_id: Annotated[int, PathParam(ge=1, le=2**31 - 1)], session: SessionDep,
                _: PageAuth) -> HTMLResponse:
    k = session.get(Kernel, kernel_id)
    if k is None:
        raise HTTPException(404, f"no kernel {kernel_id}")
    jobs = list(session.scalars(sa.select(Job).where(Job.kernel_id == kernel_id).order_by(Job.id.desc()).limit(100)))
    return TEMPLATES.TemplateResponse(request, "kernel.html", {"kernel": k, "jobs": jobs, "nav": "winners"})


@router.get("/winners", response_class=HTMLResponse)
def winners_page(request: Request, session: SessionDep, _: PageAuth) -> HTMLResponse:
    """Kernels × problem keys (rows) × GPU models (columns): best config, its time, speed-up."""
    rows = list(session.scalars(sa.select(BestConfig).order_by(BestConfig.kernel_name, BestConfig.problem_key)))
    gpus = sorted({b.gpu_model for b in rows})
    matrix: dict[tuple[str, str, str], dict[str, BestConfig]] = {}
    for b in rows:
        matrix.setdefault((b.kernel_name, b.kernel_fingerprint, b.problem_key), {})[b.gpu_model] = b
    kernel_ids = dict(session.execute(sa.select(Kernel.fingerprint, Kernel.id)).all())
    lines = []
    for (name, fp, key), cells in matrix.items():
        try:
            key_text = ", ".join(f"{k}={v}" for k, v in json.loads(key).items())
        except ValueError:
            key_text = key
        lines.append({"name": name, "fingerprint": fp, "kernel_id": kernel_ids.get(fp), "key": key_text or "(no key)",
                      "cells": [cells.get(g) for g in gpus]})
    return TEMPLATES.TemplateResponse(request, "winners.html", {"lines": lines, "gpus": gpus, "nav": "winners"})


@router.get("/gpus", response_class=HTMLResponse)
def gpus_page(request: Request, session: SessionDep, settings: SettingsDep, _: PageAuth) -> HTMLResponse:
    alive = alive_worker_ids(session, settings)
    gpus = list(session.scalars(sa.select(Gpu).options(selectinload(Gpu.workers)).order_by(Gpu.id)))
    workers = list(session.scalars(sa.select(Worker).options(joinedload(Worker.gpu)).order_by(Worker.id)))
    busy = dict(session.execute(sa.select(Job.claimed_by, Job.id).where(Job.state == "running")).all())
    return TEMPLATES.TemplateResponse(request, "gpus.html", {"gpus": gpus, "workers": workers, "alive": alive,
                                                             "busy": busy, "nav": "gpus"})
