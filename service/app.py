"""The FastAPI application: REST API under /api/v1, /healthz, /metrics, the dashboard at /."""
from __future__ import annotations

import functools
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles

from service.api import errors, openapi
from service.api.routing import one_value_per_query_parameter
from service.core.config import Settings, get_settings
from service.core.limits import BodySizeLimitMiddleware
from service.fastpath import PATH as LOOKUP_PATH
from service.metrics import Metrics, MetricsMiddleware

API_PREFIX = "/api/v1"
HERE = Path(__file__).resolve().parent


# how long startup waits for the config index's first load before serving anyway (from an empty
# index, filled by the refresh thread once the database answers)
INDEX_FIRST_LOAD_WAIT_S = 10.0


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Starts the config index's refresh thread (and waits, off the event loop, for its first
    load) and the in-process worker (`blocktune serve` with a GPU); stops them on shutdown, and
    the kernel checker processes (started now with `kernel_check_prewarm`, else by the first
    submission)."""
    import asyncio

    import anyio

    app.state.event_loop = type(asyncio.get_running_loop()).__module__.split(".")[0]   # "uvloop" under serve
    index = app.state.config_index
    index.start()
    await anyio.to_thread.run_sync(index.wait_loaded, INDEX_FIRST_LOAD_WAIT_S)
    worker = app.state.worker
    if worker is not None:
        worker.start_thread()
    if app.state.settings.kernel_check_prewarm:
        app.state.kernel_checker.start()
    try:
        yield
    finally:
        app.state.kernel_checker.close()
        if worker is not None:
            worker.stop()
            worker.join(timeout=60)
        index.stop()
        app.state.engine.dispose()


def create_app(settings: Settings | None = None, *, database_url: str | None = None, worker=None) -> FastAPI:
    """`worker`: a service.worker.Worker run in a thread while the app is up (or None)."""
    from db.engine import make_engine, session_factory
    from service.core.token_cache import VerifiedTokens
    from service.kernel_check import KernelChecker
    from service.lookup import ConfigIndex

    settings = settings or get_settings()
    url = database_url or settings.resolved_database_url()
    app = _BlocktuneAPI(title="blocktune", version=_version(),
                  description="Tuning jobs, best configs per GPU model, and the launch-time config lookup.",
                  docs_url=None, openapi_url=f"{API_PREFIX}/openapi.json", lifespan=_lifespan,
                  **_without_opentelemetry())
    engine = make_engine(url)
    app.state.settings = settings
    app.state.database_url = url
    app.state.engine = engine
    app.state.sessionmaker = session_factory(engine)
    app.state.version = _version()
    app.state.verified_tokens = VerifiedTokens(settings.token_cache_ttl_s, settings.token_cache_bytes)
    app.state.config_index = ConfigIndex(app.state.sessionmaker, refresh_s=settings.lookup_refresh_s,
                                         memo_bytes=settings.lookup_cache_bytes)
    app.state.worker = worker
    app.state.kernel_checker = KernelChecker.from_settings(settings)
    app.state.event_loop = None
    app.state.metrics = Metrics()
    app.state.metrics.add_database(app.state.sessionmaker, settings)
    app.state.metrics.add_config_index(app.state.config_index)
    app.state.metrics.registry.register(app.state.kernel_checker)

    from service.api.routes import configs, gpus, health, jobs, kernels, tokens

    app.state.database_probe = health.DatabaseProbe(engine)
    from service.dashboard import actions, apidocs, login
    from service.dashboard import routes as dashboard

    for r in (jobs.router, configs.router, kernels.router, gpus.router, tokens.router):
        app.include_router(r, prefix=API_PREFIX, dependencies=[Depends(one_value_per_query_parameter)])
    app.include_router(health.router)
    app.include_router(dashboard.router)
    app.include_router(login.router)
    app.include_router(actions.router)
    apidocs.install(app, f"{API_PREFIX}/openapi.json")   # /docs without a CDN
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    openapi.install(app, API_PREFIX)
    app.add_exception_handler(RequestValidationError, errors.validation_error)
    app.add_exception_handler(405, errors.method_not_allowed)
    app.add_exception_handler(login.LoginRequired, login.login_redirect)   # pages: 303 to /login

    # added last = outermost: metrics see everything (a 500 too); a failure anywhere inside is
    # answered by InternalErrorMiddleware; the body size limit runs before routing
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(errors.InternalErrorMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    # the lookup's fast path, in front of FastAPI's own layers, with metrics and error answers of
    # its own; what it does not answer goes through the whole app like any request
    from service.fastpath import LookupFastPath

    app.lookup_front = MetricsMiddleware(errors.InternalErrorMiddleware(
        LookupFastPath(functools.partial(FastAPI.__call__, app), state=app.state)), metrics=app.state.metrics)
    return app


class _BlocktuneAPI(FastAPI):
    """FastAPI with the config lookup's fast path (service/fastpath.py) ahead of FastAPI's own
    layers — its error, telemetry and body-limit middlewares, which an app cannot turn off and
    which cost ~3.5 µs of a lookup's ~15 µs in the app."""

    lookup_front = None   # set by create_app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == LOOKUP_PATH and self.lookup_front is not None:
            return await self.lookup_front(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _without_opentelemetry() -> dict:
    """FastAPI's native OpenTelemetry (newer FastAPI) asks for the global providers on every
    request, ~10 µs of the lookup's ~40; blocktune exports Prometheus metrics instead."""
    import inspect

    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    return {}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("blocktune")
    except Exception:
        return "0.1.0"
