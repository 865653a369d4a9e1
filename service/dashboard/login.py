"""Dashboard login for servers whose reads need a token (`read_requires_token`).

GET /login shows a form to paste an API token; POST /login checks it (tokens are stored hashed:
service.core.security.find_token) and stores it in the `blocktune_token` cookie — HttpOnly (page
scripts never see it), SameSite=Strict (other sites' pages never send it), Secure when served over
https —, then goes back to the page that asked for it. POST /logout clears the cookie.

Dashboard pages depend on `PageAuth`: when a token is required and the request carries none, or
an unknown or revoked one, they answer 303 to /login with the reason (no page is rendered). The
JSON API answers 401 as before; its reads take the cookie too (the dashboard's live job states),
its writes never (service.api.deps).

Plain HTML forms: no JavaScript, nothing from a CDN.
"""
from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from db.models import ApiToken
from service.api.deps import TOKEN_COOKIE, authenticate_read, token_from_request
from service.core.security import find_token
from service.dashboard.templates import TEMPLATES

COOKIE_MAX_AGE_S = 30 * 24 * 3600     # the token is checked on every request; revoking it logs out
MAX_FORM_BYTES = 8192

# why the login page is shown: a fixed set, so that no text of the URL reaches the page
REASONS = {
    "missing": "This dashboard needs an API token. Paste one below (create one with `blocktune token create`).",
    "invalid": "Your API token is unknown or was revoked. Paste a valid one.",
    "logged_out": "You are logged out.",
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


def _clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(TOKEN_COOKIE, path="/", secure=_secure(request), httponly=True, samesite="strict")


async def page_access(request: Request) -> ApiToken | None:
    """ReadAuth for HTML pages: a redirect to the login page instead of a 401."""
    if not request.app.state.settings.read_requires_token:
        return None
    if not token_from_request(request, cookie=True):
        raise LoginRequired(request, "missing")
    try:
        return await run_in_threadpool(authenticate_read, request)
    except HTTPException:
        raise LoginRequired(request, "invalid") from None


PageAuth = Annotated[ApiToken | None, Depends(page_access)]


async def login_redirect(request: Request, exc: LoginRequired) -> RedirectResponse:
    response = RedirectResponse("/login?" + urlencode({"next": exc.next, "reason": exc.reason}),
                                status_code=status.HTTP_303_SEE_OTHER)
    if exc.reason == "invalid" and TOKEN_COOKIE in request.cookies:
        _clear_cookie(response, request)     # a revoked token's cookie is of no use any more
    return response


def _cross_site(request: Request) -> bool:
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


def _check_token(request: Request, token: str) -> bool:
    with request.app.state.sessionmaker() as session:
        return find_token(session, token) is not None


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    if _cross_site(request):
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
    if not await run_in_threadpool(_check_token, request, token):
        return _page(request, next_=next_, message=None, status_code=status.HTTP_401_UNAUTHORIZED,
                     error="That token is not valid: it is unknown or was revoked.")
    response = RedirectResponse(next_, status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(TOKEN_COOKIE, token, max_age=COOKIE_MAX_AGE_S, path="/", secure=_secure(request),
                        httponly=True, samesite="strict")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    if _cross_site(request):
        return Response("cross-site logout refused", status_code=status.HTTP_403_FORBIDDEN)
    response = RedirectResponse("/login?reason=logged_out", status_code=status.HTTP_303_SEE_OTHER)
    _clear_cookie(response, request)
    return response
