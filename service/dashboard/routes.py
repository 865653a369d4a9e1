"""The dashboard: server-rendered HTML (Jinja2) with server-rendered SVG charts; no CDN, no
JavaScript library (one small vendored script keeps the pages live: service/static/dashboard.js)."""
from __future__ import annotations

import json
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path as PathParam, Query, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session, joinedload, selectinload

from db.models import JOB_STATES, BestConfig, Gpu, Job, Kernel, Trial, Worker
from service.api.deps import SessionDep, SettingsDep
from service.api.routes.gpus import alive_worker_ids
from service.dashboard import actions, highlight, story
from service.dashboard.charts import param_charts, trials_chart
from service.dashboard.login import PageAuth
from service.dashboard.speedup import MEANINGFUL_SPEEDUP, compare
from service.dashboard.study import read_study
from service.dashboard.templates import TEMPLATES
from service.waiting import waiting_reasons

router = APIRouter(include_in_schema=False)

JOBS_PER_PAGE = 50
Filter = Annotated[str | None, Query(max_length=200)]


def _filters(session: Session, state: str | None, kernel: str | None, gpu_model: str | None) -> dict[str, Any]:
    """The jobs page's filters, each kept only when it names something that exists (so that the
    page and dashboard.js's polls of /api/v1/jobs ask the same)."""
    kernels = sorted(set(session.scalars(sa.select(Kernel.name))))
    gpus = sorted(set(session.scalars(sa.select(Job.gpu_model).where(Job.gpu_model.is_not(None)).distinct()))
                  | set(session.scalars(sa.select(Gpu.model))))
    return {"state": state if state in JOB_STATES else None, "kernel": kernel if kernel in kernels else None,
            "gpu_model": gpu_model if gpu_model in gpus else None, "kernels": kernels, "gpu_models": gpus}


@router.get("/", response_class=HTMLResponse)
def jobs_page(request: Request, session: SessionDep, _: PageAuth, state: Filter = None, kernel: Filter = None,
              gpu_model: Filter = None, page: Annotated[int, Query(ge=1, le=100000)] = 1) -> HTMLResponse:
    f = _filters(session, state, kernel, gpu_model)
    q = sa.select(Job)
    if f["kernel"]:
        q = q.join(Kernel).where(Kernel.name == f["kernel"])
    if f["gpu_model"]:
        q = q.where(Job.gpu_model == f["gpu_model"])
    filtered = q.subquery()
    counts = dict(session.execute(sa.select(filtered.c.state, sa.func.count()).group_by(filtered.c.state)).all())
    if f["state"]:
        q = q.where(Job.state == f["state"])
    total = session.scalar(sa.select(sa.func.count()).select_from(q.subquery())) or 0
    jobs = list(session.scalars(q.options(joinedload(Job.kernel)).order_by(Job.id.desc())
                                .limit(JOBS_PER_PAGE).offset((page - 1) * JOBS_PER_PAGE)))
    query = {k: f[k] for k in ("state", "kernel", "gpu_model") if f[k]}
    return TEMPLATES.TemplateResponse(request, "jobs.html", {
        "jobs": jobs, **f, "states": JOB_STATES, "counts": counts, "page": page, "per_page": JOBS_PER_PAGE,
        "pages": max(1, (total + JOBS_PER_PAGE - 1) // JOBS_PER_PAGE), "total": total, "query": query,
        "nav": "jobs"})


def _job_or_404(session: Session, job_id: int) -> Job:
    job = session.scalar(sa.select(Job).options(joinedload(Job.kernel)).where(Job.id == job_id))
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    return job


def _live_context(session: Session, job: Job) -> dict[str, Any]:
    """What the job page shows of its trials, rendered again while the job runs (`/jobs/N/live`)."""
    trials = list(session.scalars(sa.select(Trial).where(Trial.job_id == job.id).order_by(Trial.number)))
    ok = [t for t in trials if t.status == "ok" and t.median_ms is not None]
    best = min(ok, key=lambda t: t.median_ms) if ok else None
    study = read_study(session, job.study_name)
    return {"job": job, "trials": trials, "best": best, "n_ok": len(ok),
            "trials_svg": Markup(trials_chart(trials)),
            "param_svgs": [(p, Markup(svg)) for p, svg in param_charts(trials)],
            "gaps": story.gaps([t.number for t in trials], study), "statuses": story.status_counts(trials),
            "ending": story.ending(job, study), "study_found": study is not None}


def _job_speedup(session: Session, job: Job):
    row = session.scalar(sa.select(BestConfig).where(BestConfig.job_id == job.id).limit(1))
    return compare(row.median_ms, row.default_ms) if row is not None else None


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: Annotated[int, PathParam(ge=1, le=2**31 - 1)], session: SessionDep,
             settings: SettingsDep, _: PageAuth,
             notice: Annotated[str | None, Query(max_length=32)] = None) -> HTMLResponse:
    job = _job_or_404(session, job_id)
    return TEMPLATES.TemplateResponse(request, "job.html", {
        **_live_context(session, job), "spec": highlight.spec_parts(job.spec), "speedup": _job_speedup(session, job),
        "waiting_reason": waiting_reasons(session, settings.worker_alive_seconds, [job]).get(job.id),
        "rights": actions.rights(request, session), "notice": actions.NOTICES.get(notice or ""), "nav": "jobs"})


@router.get("/jobs/{job_id}/live", response_class=HTMLResponse)
def job_live(request: Request, job_id: Annotated[int, PathParam(ge=1, le=2**31 - 1)], session: SessionDep,
             _: PageAuth) -> HTMLResponse:
    """The job page's trial sections alone: dashboard.js swaps them in while the job runs."""
    job = _job_or_404(session, job_id)
    response = TEMPLATES.TemplateResponse(request, "_job_live.html", _live_context(session, job))
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/kernels", response_class=HTMLResponse)
def kernels_page(request: Request, session: SessionDep, _: PageAuth) -> HTMLResponse:
    kernels = list(session.scalars(sa.select(Kernel).order_by(Kernel.name, Kernel.id)))
    states: dict[int, dict[str, int]] = {}
    for kid, state, n in session.execute(sa.select(Job.kernel_id, Job.state, sa.func.count())
                                         .group_by(Job.kernel_id, Job.state)):
        states.setdefault(kid, {})[state] = n
    latest = dict(session.execute(sa.select(Job.kernel_id, sa.func.max(Job.id)).group_by(Job.kernel_id)).all())
    tuned: dict[str, set[str]] = {}
    for fp, gpu in session.execute(sa.select(BestConfig.kernel_fingerprint, BestConfig.gpu_model)):
        tuned.setdefault(fp, set()).add(gpu)
    rows = [{"kernel": k, "states": states.get(k.id, {}), "jobs": sum(states.get(k.id, {}).values()),
             "latest": latest.get(k.id), "gpus": sorted(tuned.get(k.fingerprint, ()))} for k in kernels]
    return TEMPLATES.TemplateResponse(request, "kernels.html", {"rows": rows, "nav": "kernels"})


@router.get("/kernels/{kernel_id}", response_class=HTMLResponse)
def kernel_page(request: Request, kernel_id: Annotated[int, PathParam(ge=1, le=2**31 - 1)], session: SessionDep,
                _: PageAuth) -> HTMLResponse:
    k = session.get(Kernel, kernel_id)
    if k is None:
        raise HTTPException(404, f"no kernel {kernel_id}")
    jobs = list(session.scalars(sa.select(Job).where(Job.kernel_id == kernel_id).order_by(Job.id.desc()).limit(100)))
    winners = [(b, _key_text(b.problem_key), compare(b.median_ms, b.default_ms)) for b in session.scalars(
        sa.select(BestConfig).where(BestConfig.kernel_fingerprint == k.fingerprint)
        .order_by(BestConfig.problem_key, BestConfig.gpu_model))]
    return TEMPLATES.TemplateResponse(request, "kernel.html", {
        "kernel": k, "jobs": jobs, "winners": winners, "source": highlight.python(k.source), "nav": "kernels"})


def _key_text(key: str) -> str:
    try:
        return ", ".join(f"{k}={v}" for k, v in json.loads(key).items()) or "(no key)"
    except (ValueError, AttributeError):
        return key


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
        lines.append({"name": name, "fingerprint": fp, "kernel_id": kernel_ids.get(fp), "key": _key_text(key),
                      "cells": [(c, compare(c.median_ms, c.default_ms)) if c else None
                                for c in (cells.get(g) for g in gpus)]})
    return TEMPLATES.TemplateResponse(request, "winners.html", {
        "lines": lines, "gpus": gpus, "noise_pct": round(100 * (MEANINGFUL_SPEEDUP - 1)), "nav": "winners"})


@router.get("/gpus", response_class=HTMLResponse)
def gpus_page(request: Request, session: SessionDep, settings: SettingsDep, _: PageAuth) -> HTMLResponse:
    alive = alive_worker_ids(session, settings)
    gpus = list(session.scalars(sa.select(Gpu).options(selectinload(Gpu.workers)).order_by(Gpu.id)))
    workers = list(session.scalars(sa.select(Worker).options(joinedload(Worker.gpu)).order_by(Worker.id)))
    busy = dict(session.execute(sa.select(Job.claimed_by, Job.id).where(Job.state == "running")).all())
    return TEMPLATES.TemplateResponse(request, "gpus.html", {"gpus": gpus, "workers": workers, "alive": alive,
                                                             "busy": busy, "nav": "gpus"})


@router.get("/highlight.css")
def highlight_css() -> Response:
    """Pygments' colours for the highlighted sources (made from the installed Pygments)."""
    return Response(highlight.stylesheet(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})
