"""The FastAPI application: REST API under /api/v1, /healthz, /metrics, the dashboard at /."""
from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles

from service.api import errors, openapi
from service.api.routing import one_value_per_query_parameter
from service.core.config import Settings, get_settings
from service.core.limits import BodySizeLimitMiddleware
from service.metrics import Metrics, MetricsMiddleware

API_PREFIX = "/api/v1"
HERE = Path(__file__).resolve().parent


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Starts the in-process worker (`blocktune serve` with a GPU) and stops it on shutdown."""
    worker = app.state.worker
    if worker is not None:
        worker.start_thread()
    try:
        yield
    finally:
        if worker is not None:
            worker.stop()
            worker.join(timeout=60)
        app.state.engine.dispose()


def create_app(settings: Settings | None = None, *, database_url: str | None = None, worker=None) -> FastAPI:
    """`worker`: a service.worker.Worker run in a thread while the app is up (or None)."""
    from db.engine import make_engine, session_factory
    from service.lookup import ConfigIndex

    settings = settings or get_settings()
    url = database_url or settings.resolved_database_url()
    app = FastAPI(title="blocktune", version=_version(),
                  description="Tuning jobs, best configs per GPU model, and the launch-time config lookup.",
                  docs_url="/docs", openapi_url=f"{API_PREFIX}/openapi.json", lifespan=_lifespan)
    engine = make_engine(url)
    app.state.settings = settings
    app.state.database_url = url
    app.state.engine = engine
    app.state.sessionmaker = session_factory(engine)
    app.state.version = _version()
    app.state.token_last_used = {}
    app.state.config_index = ConfigIndex(app.state.sessionmaker)
    app.state.worker = worker
    app.state.metrics = Metrics()
    app.state.metrics.add_database(app.state.sessionmaker, settings)

    from service.api.routes import configs, gpus, health, jobs, kernels, tokens
    from service.dashboard import login
    from service.dashboard import routes as dashboard

    for r in (jobs.router, configs.router, kernels.router, gpus.router, tokens.router):
        app.include_router(r, prefix=API_PREFIX, dependencies=[Depends(one_value_per_query_parameter)])
    app.include_router(health.router)
    app.include_router(dashboard.router)
    app.include_router(login.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    from tuner.spec import JobSpec

    openapi.install(app, API_PREFIX, models=(JobSpec,))   # the body of POST /jobs
    app.add_exception_handler(RequestValidationError, errors.validation_error)
    app.add_exception_handler(405, errors.method_not_allowed)
    app.add_exception_handler(login.LoginRequired, login.login_redirect)   # pages: 303 to /login

    # added last = outermost: metrics see everything (a 500 too); a failure anywhere inside is
    # answered by InternalErrorMiddleware; the lookup's fast path and the body size limit run
    # before routing
    from service.fastpath import LookupFastPath

    app.add_middleware(LookupFastPath, state=app.state)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(errors.InternalErrorMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)

    return app


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("blocktune")
    except Exception:
        return "0.1.0"
