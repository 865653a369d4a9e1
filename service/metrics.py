"""Prometheus metrics: HTTP requests and latencies (ASGI middleware), jobs by state and trials
per second (read from the database at scrape time). One registry per app."""
from __future__ import annotations

import datetime as dt
import time

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from db.models import JOB_STATES, Job, Trial, Worker, utcnow


class DatabaseCollector:
    """Jobs by state, trials recorded (total and per second over the last minute), live workers."""

    def __init__(self, sessionmaker, settings):
        self._sessionmaker = sessionmaker
        self._settings = settings

    def collect(self):
        jobs = GaugeMetricFamily("blocktune_jobs", "Jobs by state", labels=["state"])
        trials_total = CounterMetricFamily("blocktune_trials", "Trials recorded")
        tps = GaugeMetricFamily("blocktune_trials_per_second", "Trials recorded per second over the last 60 s")
        workers = GaugeMetricFamily("blocktune_workers_alive", "Workers with a recent heartbeat")
        try:
            with self._sessionmaker() as s:
                counts = dict(s.execute(sa.select(Job.state, sa.func.count()).group_by(Job.state)).all())
                total = s.scalar(sa.select(sa.func.count()).select_from(Trial)) or 0
                since = utcnow() - dt.timedelta(seconds=60)
                recent = s.scalar(sa.select(sa.func.count()).select_from(Trial).where(Trial.created_at >= since)) or 0
                alive_since = utcnow() - dt.timedelta(seconds=self._settings.worker_alive_seconds)
                alive = s.scalar(sa.select(sa.func.count()).select_from(Worker).where(
                    Worker.last_heartbeat_at >= alive_since, Worker.state != "stopped")) or 0
        except Exception:  # the database being away must not break /metrics
            return
        for state in JOB_STATES:
            jobs.add_metric([state], counts.get(state, 0))
        trials_total.add_metric([], total)
        tps.add_metric([], recent / 60.0)
        workers.add_metric([], alive)
        yield jobs
        yield trials_total
        yield tps
        yield workers


class ConfigIndexCollector:
    """The lookup's in-memory index: its size, how long since it was last checked against the
    database (growing while the database is away: lookups are then answered from an older
    state), failed refreshes, and the bytes held by the answer memo."""

    def __init__(self, index):
        self._index = index

    def collect(self):
        h = self._index.health()
        rows = GaugeMetricFamily("blocktune_config_index_rows", "Best configs held in memory for lookups")
        rows.add_metric([], h["rows"])
        age = GaugeMetricFamily("blocktune_config_index_age_seconds",
                                "Seconds since the config index was last checked against the database")
        age.add_metric([], h["checked_seconds_ago"] if h["checked_seconds_ago"] is not None else float("inf"))
        failures = CounterMetricFamily("blocktune_config_index_refresh_failures",
                                       "Refreshes of the config index that failed (database unavailable)")
        failures.add_metric([], self._index.failures)
        memo = GaugeMetricFamily("blocktune_lookup_memo_bytes", "Bytes held by the lookup answer memo")
        memo.add_metric([], self._index.memo_bytes)
        yield rows
        yield age
        yield failures
        yield memo


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("blocktune_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("blocktune_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route"], registry=self.registry,
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))

    def add_database(self, sessionmaker, settings) -> None:
        self.registry.register(DatabaseCollector(sessionmaker, settings))

    def add_config_index(self, index) -> None:
        self.registry.register(ConfigIndexCollector(index))

    def render(self) -> bytes:
        return generate_latest(self.registry)


_METERED = "blocktune.metered"


class MetricsMiddleware:
    """Pure ASGI middleware (no per-request task overhead): counts and times each request by its
    route template (so /api/v1/jobs/{job_id} is one series, not one per id)."""

    # any other method is counted as "OTHER": a label value per method a client invents would
    # be a new series each, kept forever
    METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics
        self._series: dict[tuple, tuple] = {}   # (method, route, status) → its counter and histogram

    def _record(self, method: str, path: str, status: int, seconds: float) -> None:
        if method not in self.METHODS:
            method = "OTHER"
        series = self._series.get((method, path, status))
        if series is None:   # labels() validates and locks: once per series, not per request
            series = (self.metrics.requests.labels(method, path, str(status)), self.metrics.latency.labels(method, path))
            self._series[(method, path, status)] = series
        series[0].inc()
        series[1].observe(seconds)

    async def __call__(self, scope, receive, send):
        # counted once, by the outermost of these (the lookup's fast path has one of its own in
        # front of the app's, service/app.py)
        if scope["type"] != "http" or _METERED in scope:
            return await self.app(scope, receive, send)
        scope[_METERED] = True
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None)
            if path is None:
                path = "/static" if scope["path"].startswith("/static/") else "unmatched"
            elif scope["path"].startswith("/api/") and not path.startswith("/api/"):
                path = "/api/v1" + path   # routes of an included router carry their own path only
            self._record(scope["method"], path, status[0], time.perf_counter() - start)
