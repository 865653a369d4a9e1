"""`blocktune serve | worker | token | migrate`."""
from __future__ import annotations

import argparse
import logging
import signal
import sys


def _db_url(args) -> str:
    from db.engine import default_url, normalize_url

    return normalize_url(getattr(args, "database_url", None) or default_url())


def _ensure_migrated(url: str, *, quiet: bool = False) -> None:
    from db.migrate import current_revision, head_revision, upgrade

    cur = current_revision(url)
    if cur == head_revision():
        return
    if not quiet:
        print(f"blocktune: {'empty database' if cur is None else f'database at revision {cur}'}: applying migrations",
              file=sys.stderr)
    upgrade(url)


def _logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("alembic").setLevel(logging.WARNING)


def _has_gpu() -> bool:
    try:
        from compiler.runtime import driver

        return driver.has_gpu()
    except Exception:
        return False


# -- serve ---------------------------------------------------------------------------------------
def cmd_serve(args) -> int:
    import uvicorn

    from service.app import create_app
    from service.core.config import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port, "database_url": args.database_url,
                                   "read_requires_token": args.read_requires_token}.items() if v is not None}
    settings = Settings(**overrides)
    if "kernel_check_prewarm" not in settings.model_fields_set:
        # the checkers start in the background with the server, so the first submission finds them
        # warm (otherwise it waits for a checker to import the compiler)
        settings = settings.model_copy(update={"kernel_check_prewarm": True})
    url = _db_url(argparse.Namespace(database_url=settings.database_url or None))
    _ensure_migrated(url)
    worker = _serve_worker(args, settings, url)
    app = create_app(settings, database_url=url, worker=worker)
    config = server_config(app, settings, log_level=args.log_level, access_log=args.access_log)
    print(f"blocktune: serving on http://{settings.host}:{settings.port} (dashboard at /, API at /api/v1, docs at /docs;"
          f" {server_implementation(config)})", file=sys.stderr)
    uvicorn.Server(config).run()
    return 0


def _serve_worker(args, settings, url: str):
    """The worker `blocktune serve` runs in its process: on the GPU when there is one, else a CPU
    worker (the interpreter), so that jobs run on any machine; none with --no-worker."""
    with_worker = args.with_worker if args.with_worker is not None else settings.with_worker
    if with_worker is False:
        print("blocktune: no worker in this process (--no-worker): jobs wait for a worker "
              "(`blocktune worker --device N --server-db URL`, or `--interpret` on the CPU)", file=sys.stderr)
        return None
    from service.devices import CPU_LABEL, INTERPRETER_MODEL
    from service.worker import Worker

    interpret = args.interpret or settings.interpret
    if not interpret and not _has_gpu():
        interpret = True
        print(f"blocktune: no CUDA GPU found: running a {CPU_LABEL} worker. It takes the jobs for GPU model "
              f"\"{INTERPRETER_MODEL}\" and, while no GPU worker is alive, jobs that name no GPU model; its "
              "timings say nothing about a GPU. `--no-worker` turns it off.", file=sys.stderr)
    else:
        print(f"blocktune: running a {CPU_LABEL + ' worker' if interpret else f'worker on GPU {args.device}'} "
              "in this process (`--no-worker` turns it off)", file=sys.stderr)
    return Worker(url, args.device, interpret=interpret, lease_seconds=settings.lease_seconds,
                  heartbeat_seconds=settings.heartbeat_seconds, poll_seconds=settings.poll_seconds)


def server_config(app, settings, *, log_level: str = "info", access_log: bool = False):
    """The loaded uvicorn config `blocktune serve` runs: uvloop and httptools (uvicorn[standard],
    a dependency) where they are installed, which uvicorn's "auto" picks."""
    import uvicorn

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=log_level, access_log=access_log,
                            loop="auto", http="auto")
    config.load()
    return config


def server_implementation(config) -> str:
    """"<event loop>, <HTTP parser>" of a loaded uvicorn config, e.g. "uvloop, httptools"."""
    factory = config.get_loop_factory()
    loop = getattr(factory, "__module__", None) or "asyncio"
    http = {"HttpToolsProtocol": "httptools", "H11Protocol": "h11"}.get(config.http_protocol_class.__name__,
                                                                        config.http_protocol_class.__name__)
    return f"{loop.split('.')[0]}, {http}"


# -- worker --------------------------------------------------------------------------------------
def cmd_worker(args) -> int:
    from service.core.config import Settings
    from service.worker import Worker, WorkerNameInUse

    _logging(args.verbose)
    settings = Settings()
    url = _db_url(argparse.Namespace(database_url=args.server_db))
    interpret = args.interpret or settings.interpret
    if not interpret and not _has_gpu():
        print("blocktune worker: no CUDA GPU found (use --interpret to tune on the CPU interpreter)", file=sys.stderr)
        return 2
    if args.migrate:
        # a worker started while the database is away waits for it, as a running worker does
        from db.retry import retry

        retry(lambda: _ensure_migrated(url), "checking the database's migrations",
              log=logging.getLogger("blocktune.worker"))
    w = Worker(url, args.device if args.device is not None else settings.device, interpret=interpret,
               name=args.name or settings.worker_name,
               lease_seconds=args.lease if args.lease is not None else settings.lease_seconds,
               heartbeat_seconds=args.heartbeat if args.heartbeat is not None else settings.heartbeat_seconds,
               poll_seconds=args.poll if args.poll is not None else settings.poll_seconds,
               join=args.join, exit_when_idle=args.exit_when_idle)

    def _on_signal(signum, _frame):
        logging.getLogger("blocktune.worker").info("signal %d: stopping after the current trial", signum)
        w.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        w.run()
    except WorkerNameInUse as exc:
        print(f"blocktune worker: {exc}", file=sys.stderr)
        return 2
    return 0


# -- token ---------------------------------------------------------------------------------------
def _scope_arg(value: str) -> str:
    """argparse type of --scope: checked here so that a typo is a usage error (exit 2)."""
    from service.core.security import parse_scopes

    try:
        parse_scopes([value])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def cmd_token(args) -> int:
    import sqlalchemy as sa

    from db.engine import make_engine, session_factory
    from db.models import ApiToken
    from db.repo import revoke_token
    from service.core.security import DEFAULT_SCOPES, create_token, parse_scopes, scopes_text

    if args.token_command == "create":
        if args.name and args.name_option and args.name != args.name_option:
            print(f"blocktune token create: two names given ({args.name!r} and --name {args.name_option!r})",
                  file=sys.stderr)
            return 2
        name = args.name or args.name_option or "default"
        scopes = parse_scopes(args.scopes) if args.scopes else DEFAULT_SCOPES
    url = _db_url(args)
    _ensure_migrated(url, quiet=True)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            if args.token_command == "create":
                row, clear = create_token(s, name, scopes)
                s.commit()
                print(clear)
                print(f"token {row.id} ({row.name}, prefix {row.prefix}, scopes {scopes_text(row.scopes)}) created; "
                      "it is shown only once", file=sys.stderr)
            elif args.token_command == "list":
                for t in s.scalars(sa.select(ApiToken).order_by(ApiToken.id)):
                    state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
                    used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
                    print(f"{t.id}\t{t.prefix}\t{t.name}\t{state}\t{scopes_text(t.scopes)}\tlast used {used}")
            elif args.token_command == "revoke":
                row = revoke_token(s, args.ident)
                if row is None:
                    print(f"no token {args.ident!r}", file=sys.stderr)
                    return 1
                s.commit()
                print(f"token {row.id} ({row.name}) revoked; its dashboard sessions are ended", file=sys.stderr)
    finally:
        engine.dispose()
    return 0


# -- migrate -------------------------------------------------------------------------------------
def cmd_migrate(args) -> int:
    from db.migrate import current_revision, upgrade

    url = _db_url(args)
    upgrade(url)
    try:  # Optuna's own tables too, so that workers starting together do not race to create them
        from service.worker import init_optuna_storage

        init_optuna_storage(url)
    except ImportError:
        pass
    print(f"database at revision {current_revision(url)}", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    env_db = "database URL (default: $BLOCKTUNE_DATABASE_URL, else SQLite in the user data dir)"

    p = subparsers.add_parser("serve", help="run the API, the dashboard and a worker (on the GPU, or without one "
                                            "the CPU interpreter)")
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1; $BLOCKTUNE_HOST)")
    p.add_argument("--port", type=int, default=None, help="port (default 8000; $BLOCKTUNE_PORT)")
    p.add_argument("--database-url", "--db", dest="database_url", default=None, help=env_db)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--with-worker", dest="with_worker", action="store_true", default=None,
                   help="also run a worker in this process (the default): on the GPU, or without a CUDA GPU a CPU "
                        "worker (the interpreter)")
    g.add_argument("--no-worker", dest="with_worker", action="store_false",
                   help="run no worker here, not even the CPU one ($BLOCKTUNE_WITH_WORKER=false)")
    p.add_argument("--device", type=int, default=0, help="GPU of the in-process worker")
    p.add_argument("--interpret", action="store_true",
                   help="the in-process worker runs the CPU interpreter even when a GPU is present")
    p.add_argument("--read-requires-token", action="store_true", default=None,
                   help="reads need an API token too ($BLOCKTUNE_READ_REQUIRES_TOKEN)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=False)
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser("worker", help="attach to one GPU and run tuning jobs for its model")
    p.add_argument("--device", type=int, default=None, help="GPU index ($BLOCKTUNE_DEVICE; default 0)")
    p.add_argument("--server-db", "--database-url", dest="server_db", default=None, help=env_db)
    p.add_argument("--name", default=None,
                   help="worker name, unique ($BLOCKTUNE_WORKER_NAME; default <$BLOCKTUNE_NODE or host name>-gpuN)")
    p.add_argument("--interpret", action="store_true", help="tune on the CPU interpreter (no GPU)")
    p.add_argument("--lease", type=float, default=None, help="job lease in seconds ($BLOCKTUNE_LEASE_SECONDS)")
    p.add_argument("--heartbeat", type=float, default=None, help="heartbeat period ($BLOCKTUNE_HEARTBEAT_SECONDS)")
    p.add_argument("--poll", type=float, default=None,
                   help="fallback: seconds an idle worker waits for a wake-up before it looks for a job anyway "
                        "(a submitted, released or claimed job wakes it at once; $BLOCKTUNE_POLL_SECONDS)")
    p.add_argument("--join", action=argparse.BooleanOptionalAction, default=True,
                   help="join running jobs of this GPU model when none is queued (shared study)")
    p.add_argument("--exit-when-idle", action="store_true", help="exit when no job is left to claim")
    p.add_argument("--migrate", action=argparse.BooleanOptionalAction, default=True,
                   help="apply migrations to an empty/outdated database first")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("token", help="API tokens: create, list, revoke")
    p.add_argument("--database-url", "--db", dest="database_url", default=None, help=env_db)
    ts = p.add_subparsers(dest="token_command", metavar="ACTION")
    ts.required = True
    c = ts.add_parser("create", help="create a token and print it (once)",
                      description="Create an API token and print it (only this once; the database keeps its "
                                  "sha256). Give it only the scopes its user needs: read (GET endpoints and the "
                                  "dashboard, when reads need a token), publish (POST /configs: "
                                  "BLOCKTUNE_PUBLISH=1), submit (submit and cancel jobs: BLOCKTUNE_SUBMIT_ON_MISS=1), "
                                  "admin (list, create and revoke tokens).")
    c.add_argument("name", nargs="?", metavar="NAME", help="what the token is for (default: 'default')")
    c.add_argument("--name", dest="name_option", default=None, help=argparse.SUPPRESS)   # the older spelling
    c.add_argument("--scope", dest="scopes", action="append", type=_scope_arg, metavar="SCOPE",
                   help="read, publish, submit or admin; repeat it or separate with commas "
                        "(--scope read,publish). Default: read,publish,submit (everything but admin)")
    c.add_argument("--database-url", "--db", dest="database_url", default=argparse.SUPPRESS, help=env_db)
    c = ts.add_parser("list", help="list tokens with their scopes (never the tokens themselves)")
    c.add_argument("--database-url", "--db", dest="database_url", default=argparse.SUPPRESS, help=env_db)
    c = ts.add_parser("revoke", help="revoke a token by id or prefix (its dashboard sessions end too)")
    c.add_argument("ident")
    c.add_argument("--database-url", "--db", dest="database_url", default=argparse.SUPPRESS, help=env_db)
    p.set_defaults(func=cmd_token)

    p = subparsers.add_parser("migrate", help="apply the database migrations (Alembic upgrade to head)")
    p.add_argument("--database-url", "--db", dest="database_url", default=None, help=env_db)
    p.set_defaults(func=cmd_migrate)
