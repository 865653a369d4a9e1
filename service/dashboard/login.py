"""Dashboard login for servers whose reads need a token (`read_requires_token`).

GET /login shows a form to paste an API token; POST /login checks it (tokens are stored hashed) and
that it has the `read` scope, then opens a server-side session (service.core.security.start_session):
the `blocktune_session` cookie holds the session's random id, never the token — HttpOnly (page
scripts never see it), SameSite=Strict (other sites' pages never send it), Secure when served over
https —, and the database keeps only its sha256, its expiry (the `session_seconds` setting) and the
token it was opened with. Then the browser goes back to the page that asked for it. POST /logout
deletes the session; revoking the token deletes its sessions; an expired one counts no more.

Dashboard pages depend on `PageAuth`: when a token is required and the request carries no session
(or header token), or an ended session, an unknown or revoked token or one without `read`, they
answer 303 to /login with the reason (no page is rendered). The JSON API answers 401/403 as before;
its reads take the session too (the dashboard's live job states), its writes never
(service.api.deps).

Plain HTML forms: no JavaScript, nothing from a CDN.
"""
from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from db.models import ApiToken
from service.api.deps import SESSION_COOKIE, authenticate_read, check_scope, session_from_request, token_from_request
from service.core.security import end_session, find_token, start_session
from service.core.token_cache import TokenSnapshot
from service.dashboard.templates import TEMPLATES

# before sessions, the login cookie held the raw token: dropped wherever a browser still sends it
LEGACY_TOKEN_COOKIE = "blocktune_token"
MAX_FORM_BYTES = 8192

# why the login page is shown: a fixed set, so that no text of the URL reaches the page
REASONS = {
    "missing": "This dashboard needs an API token. Paste one below (create one with "
               "`blocktune token create NAME --scope read`).",
    "invalid": "Your API token is unknown or was revoked. Paste a valid one.",
    "ended": "Your session has ended (it expired, or its token was revoked). Log in again.",
    "scope": "Your API token lacks the read scope the dashboard needs. Paste one that has it "
             "(`blocktune token create NAME --scope read`).",
    "logged_out": "You are logged out.",
    "submit": "Cancelling or re-running a job needs a login with a token that has the submit scope "
              "(`blocktune token create NAME --scope read --scope submit`).",
}

router = APIRouter(include_in_schema=False)


class LoginRequired(Exception):
    """Raised by PageAuth; answered with a 303 to the login page (see `login_redirect`)."""

    def __init__(self, request: Request, reason: str):
        self.next = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        self.reason = reason


def _safe_next(target: str | None) -> str:
    """A path on this site to go back to after logging in; "/" for anything else (an absolute or
    scheme-relative URL would make the login page an open redirect)."""
    if not target or len(target) > 2000 or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    if any(ord(c) < 0x20 or c == "\\" for c in target) or target.split("?")[0] in ("/login", "/logout"):
        return "/"
    return target


def _secure(request: Request) -> bool:
    forced = request.app.state.settings.secure_cookies
    return forced if forced is not None else request.url.scheme == "https"


def _clear_cookies(response: Response, request: Request, names=(SESSION_COOKIE, LEGACY_TOKEN_COOKIE)) -> None:
    """Drop the session cookie, and a token cookie of the days before sessions."""
    for name in names:
        if name in request.cookies:
            response.delete_cookie(name, path="/", secure=_secure(request), httponly=True, samesite="strict")


async def page_access(request: Request) -> TokenSnapshot | None:
    """ReadAuth for HTML pages: a redirect to the login page instead of a 401/403."""
    if not request.app.state.settings.read_requires_token:
        return None
    header = token_from_request(request) is not None
    if not header and not session_from_request(request):
        raise LoginRequired(request, "missing")
    try:
        token = await run_in_threadpool(authenticate_read, request)
        check_scope(token, "read")
    except HTTPException as exc:
        reason = "scope" if exc.status_code == status.HTTP_403_FORBIDDEN else "invalid" if header else "ended"
        raise LoginRequired(request, reason) from None
    return token


PageAuth = Annotated[TokenSnapshot | None, Depends(page_access)]


async def login_redirect(request: Request, exc: LoginRequired) -> RedirectResponse:
    response = RedirectResponse("/login?" + urlencode({"next": exc.next, "reason": exc.reason}),
                                status_code=status.HTTP_303_SEE_OTHER)
    if exc.reason in ("missing", "ended"):
        _clear_cookies(response, request)     # an ended session's cookie (or a legacy one) is of no use
    return response


def cross_site(request: Request) -> bool:
    """A form posted from another site's page (login CSRF): the browser says so in Sec-Fetch-Site,
    older ones through Origin."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if origin and origin != "null":
        return origin.split("://", 1)[-1] != request.url.netloc
    return False


def _page(request: Request, *, next_: str, message: str | None, error: str | None,
          status_code: int = 200) -> HTMLResponse:
    response = TEMPLATES.TemplateResponse(request, "login.html", {
        "next": next_, "message": message, "error": error, "nav": "login",
        "reads_open": not request.app.state.settings.read_requires_token}, status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str | None = None, reason: str | None = None) -> HTMLResponse:  # noqa: A002
    return _page(request, next_=_safe_next(next), message=REASONS.get(reason or ""), error=None)


class _Refused(Exception):
    def __init__(self, status_code: int, message: str):
        self.status_code, self.message = status_code, message


def _open_session(request: Request, token: str) -> str:
    """A new session id for a live token with the `read` scope (the browser's previous session, if
    any, ends); raises _Refused."""
    with request.app.state.sessionmaker() as session:
        row = find_token(session, token)
        if row is None:
            raise _Refused(status.HTTP_401_UNAUTHORIZED, "That token is not valid: it is unknown or was revoked.")
        if "read" not in row.scopes:
            raise _Refused(status.HTTP_403_FORBIDDEN, "That token lacks the read scope the dashboard needs (a token "
                           "only for publishing or submitting cannot open it). Paste one that has it.")
        previous = session_from_request(request)
        if previous:
            end_session(session, previous)
        sid = start_session(session, row, request.app.state.settings.session_seconds)
        session.commit()
        return sid


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    if cross_site(request):
        return Response("cross-site login refused", status_code=status.HTTP_403_FORBIDDEN)
    body = await request.body()
    try:
        form = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", "replace"), max_num_fields=4)
    except ValueError:
        form = {}
    token = (form.get("token") or [""])[0].strip()
    next_ = _safe_next((form.get("next") or ["/"])[0])
    if not token:
        return _page(request, next_=next_, message=None, error="Paste an API token.", status_code=400)
    try:
        sid = await run_in_threadpool(_open_session, request, token)
    except _Refused as exc:
        return _page(request, next_=next_, message=None, error=exc.message, status_code=exc.status_code)
    response = RedirectResponse(next_, status_code=status.HTTP_303_SEE_OTHER)
    _clear_cookies(response, request, names=(LEGACY_TOKEN_COOKIE,))
    response.set_cookie(SESSION_COOKIE, sid, max_age=int(request.app.state.settings.session_seconds), path="/",
                        secure=_secure(request), httponly=True, samesite="strict")
    return response


def _end_session(request: Request, sid: str) -> None:
    with request.app.state.sessionmaker() as session:
        end_session(session, sid)
        session.commit()


@router.post("/logout")
async def logout(request: Request) -> Response:
    if cross_site(request):
        return Response("cross-site logout refused", status_code=status.HTTP_403_FORBIDDEN)
    sid = session_from_request(request)
    if sid:
        await run_in_threadpool(_end_session, request, sid)
    response = RedirectResponse("/login?reason=logged_out", status_code=status.HTTP_303_SEE_OTHER)
    _clear_cookies(response, request)
    return response
