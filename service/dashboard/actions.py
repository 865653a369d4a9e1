"""The job page's Cancel and Re-run buttons.

They are plain HTML forms posted to the dashboard (not to the JSON API, whose writes never take the
login cookie: a browser attaches cookies by itself). Each post needs all of:
- the dashboard session of the login (`blocktune_session`), whose token has the `submit` scope;
- a form field derived from that session id (`csrf`), which another site's page cannot know;
- no sign of coming from another site (Sec-Fetch-Site / Origin), on top of the cookie's
  SameSite=Strict.
The outcome is shown on the job page from a fixed set of notices (no text of the URL reaches it)."""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Path as PathParam, Request, status
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service import job_actions
from service.api.deps import SessionDep, session_from_request
from service.core.security import find_session_token
from service.core.token_cache import TokenSnapshot
from service.dashboard.login import cross_site

SCOPE = "submit"
MAX_FORM_BYTES = 1024

NOTICES = {
    "cancelled": "Job cancelled. A worker running it stops after its current trial.",
    "not-cancellable": "This job had already finished: there was nothing to cancel.",
    "rerun": "This job was submitted again from the job below: the same spec, kernel and GPU model.",
    "no-scope": "Your session's token lacks the submit scope that cancelling and re-running need. Log in with "
                "a token that has it (`blocktune token create NAME --scope read --scope submit`).",
    "stale-form": "That button's page was older than your current login: reload the page and try again.",
}

router = APIRouter(include_in_schema=False)


def form_key(sid: str) -> str:
    """The `csrf` field of a session's forms."""
    return hashlib.sha256(b"blocktune-dashboard-form:" + sid.encode()).hexdigest()


@dataclass
class Rights:
    """What the job page offers: the buttons (with their form key) or why not."""
    form_key: str | None = None
    why_not: str | None = None


def rights(request: Request, session: Session) -> Rights:
    sid = session_from_request(request)
    row = find_session_token(session, sid) if sid else None
    if row is None:
        return Rights(why_not="login")
    if not TokenSnapshot.of(row).allows(SCOPE):
        return Rights(why_not="scope")
    return Rights(form_key=form_key(sid))


def _back(job_id: int, notice: str) -> RedirectResponse:
    return RedirectResponse(f"/jobs/{job_id}?" + urlencode({"notice": notice}), status_code=status.HTTP_303_SEE_OTHER)


def _act(request: Request, session: Session, job_id: int, sent_key: str, action: str) -> Response:
    """In the thread pool (it queries the database): check the session, its form key and scope,
    then cancel or re-run."""
    sid = session_from_request(request)
    row = find_session_token(session, sid) if sid else None
    if row is None:
        return RedirectResponse("/login?" + urlencode({"next": f"/jobs/{job_id}", "reason": "submit"}),
                                status_code=status.HTTP_303_SEE_OTHER)
    if not hmac.compare_digest(sent_key, form_key(sid)):
        return _back(job_id, "stale-form")
    if not TokenSnapshot.of(row).allows(SCOPE):
        return _back(job_id, "no-scope")
    job = job_actions.find_job(session, job_id)
    if job is None:
        return Response(f"no job {job_id}", status_code=status.HTTP_404_NOT_FOUND)
    if action == "rerun":
        return _back(job_actions.rerun_job(session, job).id, "rerun")
    _job, cancelled = job_actions.cancel_job(session, job_id)
    return _back(job_id, "cancelled" if cancelled else "not-cancellable")


async def _post(request: Request, session: Session, job_id: int, action: str) -> Response:
    if cross_site(request):
        return Response("cross-site form refused", status_code=status.HTTP_403_FORBIDDEN)
    body = (await request.body())[:MAX_FORM_BYTES].decode("utf-8", "replace")
    try:
        sent = (parse_qs(body, max_num_fields=4).get("csrf") or [""])[0]
    except ValueError:
        sent = ""
    return await run_in_threadpool(_act, request, session, job_id, sent, action)


JobId = Annotated[int, PathParam(ge=1, le=2**31 - 1)]


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: JobId, session: SessionDep) -> Response:
    return await _post(request, session, job_id, "cancel")


@router.post("/jobs/{job_id}/rerun")
async def rerun(request: Request, job_id: JobId, session: SessionDep) -> Response:
    return await _post(request, session, job_id, "rerun")
