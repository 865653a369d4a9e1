"""Service settings: pydantic-settings, every field overridable by a `BLOCKTUNE_*` variable."""
from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_database_url() -> str:
    from db.engine import default_url

    return default_url()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BLOCKTUNE_", extra="ignore")

    # BLOCKTUNE_DATABASE_URL; empty means db.engine.default_url() (SQLite in the user data dir)
    database_url: str = ""
    host: str = "127.0.0.1"
    port: int = 8000
    # reads (GET) need a token too when true; writes always do
    read_requires_token: bool = False
    # the dashboard login cookie's Secure flag; None: set when the request came over https (behind a
    # TLS proxy on this host, uvicorn takes the scheme from X-Forwarded-Proto)
    secure_cookies: bool | None = None
    # how long a dashboard login lasts (then the browser is sent back to /login)
    session_seconds: float = Field(default=12 * 3600, ge=60)
    # largest accepted request body, bytes
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    # a worker is "alive" while its last heartbeat is younger than this
    worker_alive_seconds: float = 30.0
    # job lease handed to a worker on claim, renewed by heartbeat
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 10.0
    poll_seconds: float = 2.0
    # run a worker inside `blocktune serve` (None: yes — on the GPU, or a CPU worker without one)
    with_worker: bool | None = None
    # workers tune on the CPU interpreter (the compiler's BLOCKTUNE_INTERPRET, compiler/knobs.py)
    interpret: bool = False
    # `blocktune worker`: its GPU, and its name (unique; None: `<node>-gpuN`, `<node>-cpuN` for a CPU worker)
    device: int = Field(default=0, ge=0)
    worker_name: str | None = None
    # the node's name in default worker names (in containers, whose host name is not the host's);
    # None: the host name
    node: str | None = None
    # submission checks (service/kernel_check.py) run in warm checker processes, never in the API's:
    # at most `kernel_check_workers` checks at once, `kernel_check_queue` more wait (then 503 with
    # Retry-After, as for one that waited `kernel_check_queue_wait_seconds`). Each check is limited in
    # CPU time (RLIMIT_CPU), address space (RLIMIT_AS, MiB) and wall-clock time (then the checker is
    # killed and replaced); one over a limit answers 422 naming it. Checkers run `nice`d, below the API.
    kernel_check_workers: int = Field(default=2, ge=1, le=64)
    kernel_check_queue: int = Field(default=8, ge=0, le=10_000)
    kernel_check_cpu_seconds: int = Field(default=10, ge=1)
    kernel_check_memory_mb: int = Field(default=1024, ge=256)
    kernel_check_timeout_seconds: float = Field(default=20.0, gt=0)
    kernel_check_queue_wait_seconds: float = Field(default=30.0, gt=0)
    kernel_check_nice: int = Field(default=10, ge=0, le=19)
    # start the checkers with the app instead of at the first submission (which then waits ~0.5 s);
    # `blocktune serve` turns it on unless this is set
    kernel_check_prewarm: bool = False
    # the config lookup: its in-memory index is re-read from the database by a background thread
    # this often (lookups never wait on the database); answers are memoized in an LRU of at most
    # this many bytes; a longer query string than this gets 414
    lookup_refresh_s: float = Field(default=0.5, gt=0, le=3600)
    lookup_cache_bytes: int = Field(default=32 * 2**20, ge=0)
    lookup_max_query_bytes: int = Field(default=16 * 1024, ge=1024)
    # a token found valid is trusted without asking the database again for this long, so a
    # revocation takes effect within it; 0 checks the database on every request
    token_cache_ttl_s: float = Field(default=5.0, ge=0, le=300)
    token_cache_bytes: int = Field(default=2**20, ge=0)

    def resolved_database_url(self) -> str:
        return self.database_url or _default_database_url()


@lru_cache
def get_settings() -> Settings:
    return Settings()
