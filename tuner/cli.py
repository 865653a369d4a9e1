"""`blocktune tune SPEC`, `blocktune best --kernel NAME --key k=v`, `blocktune gpus`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def register(subparsers) -> None:
    p = subparsers.add_parser("tune", help="tune a kernel described by a job spec (JSON or YAML)")
    p.add_argument("spec", nargs="?", help="job spec file (.json, .yaml); not needed with --resume")
    p.add_argument("--db", dest="database_url", default=None, help="database URL (default: BLOCKTUNE_DATABASE_URL "
                                                                    "or the SQLite file in the user data dir)")
    p.add_argument("--interpret", action="store_true", help="run the whole pipeline on the CPU interpreter")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--trials", type=int, default=None, help="override the spec's trial budget")
    p.add_argument("--seconds", type=float, default=None, help="override the spec's time budget")
    p.add_argument("--sampler", choices=["auto", "tpe", "random", "brute"], default=None)
    p.add_argument("--resume", type=int, metavar="JOB_ID", default=None, help="resume an unfinished job instead")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show where the run's time went (child start, compiles, measuring, re-measuring)")
    p.set_defaults(func=cmd_tune)

    p = subparsers.add_parser("best", help="show the best config stored for a kernel and problem key")
    p.add_argument("--kernel", required=True, help="kernel name")
    p.add_argument("--key", action="append", default=[], metavar="NAME=VALUE", help="problem key value (repeat)")
    p.add_argument("--gpu", default=None, help="GPU model (default: all)")
    p.add_argument("--db", dest="database_url", default=None)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_best)

    p = subparsers.add_parser("gpus", help="list this machine's GPUs and the GPU models in the database")
    p.add_argument("--db", dest="database_url", default=None)
    p.set_defaults(func=cmd_gpus)


def _console():
    from rich.console import Console

    return Console()


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1:
        return f"{ms * 1e3:.2f} µs"
    return f"{ms:.4g} ms"


def _fmt_config(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return "—"
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def _has_gpu() -> bool:
    try:
        from compiler.runtime import driver

        return driver.has_gpu()
    except Exception:  # noqa: BLE001
        return False


def cmd_tune(args) -> int:
    import pydantic

    from db.engine import default_url
    from db.migrate import upgrade
    from jobspec.model import load_spec

    console = _console()
    url = args.database_url or default_url()
    if args.interpret:
        os.environ["BLOCKTUNE_INTERPRET"] = "1"
    elif not _has_gpu():
        console.print("[bold red]No CUDA GPU found[/] (no driver or no visible device): `blocktune tune` measures "
                      "kernels on a GPU.\nRun it on a machine with an NVIDIA GPU, or add [bold]--interpret[/] to run "
                      "the whole pipeline on the CPU interpreter (timings then mean nothing).")
        return 2
    upgrade(url)
    if args.resume is not None:
        job_id = args.resume
    elif not args.spec:
        console.print("[red]give a job spec file, or --resume JOB_ID[/]")
        return 2
    else:
        try:
            spec = load_spec(args.spec)
        except pydantic.ValidationError as exc:
            console.print(f"[bold red]invalid job spec[/] {args.spec}:")
            for err in exc.errors():
                loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
                console.print(f"  {loc}: {err['msg']}")
            return 2
        except (OSError, ValueError) as exc:
            console.print(f"[bold red]cannot read[/] {args.spec}: {exc}")
            return 2
        changes: dict[str, Any] = {}
        if args.trials is not None or args.seconds is not None:
            budget = spec.budget.model_copy(update={k: v for k, v in (("trials", args.trials), ("seconds", args.seconds))
                                                    if v is not None})
            changes["budget"] = budget
        if args.sampler:
            changes["sampler"] = args.sampler
        if changes:
            spec = spec.model_copy(update=changes)
        from tuner.submission import SubmissionError, create_job_from_spec

        try:   # the API's checks (the compiler's front end, the sizes, the grid, the problem key)
            job_id = create_job_from_spec(url, spec)
        except SubmissionError as exc:
            where = ".".join(str(x) for x in exc.loc)
            console.print(f"[bold red]job spec rejected[/] {args.spec}:")
            console.print(f"  {where}: {exc.message}", markup=False)
            return 2
    return _run_with_progress(url, job_id, args, console)


def _run_with_progress(url: str, job_id: int, args, console) -> int:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from tuner.engine import run_job

    state: dict[str, Any] = {"task": None, "timeline": None}
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("best {task.fields[best]}"), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn(), console=console, disable=args.quiet, transient=False)

    def on_event(kind: str, d: dict[str, Any]) -> None:
        if kind == "start":
            total = d["total"]
            console.print(f"job {d['job_id']} · study [bold]{d['study']}[/] · sampler {d['sampler']} · "
                          f"{d['valid']} valid of {d['space']} configs · {d['gpu_model']}")
            state["task"] = progress.add_task("tuning", total=total, best="—")
        elif kind == "trial" and state["task"] is not None:
            progress.update(state["task"], completed=d["done"], best=_fmt_ms(d["best_ms"]))
        elif kind == "remeasure":
            progress.update(state["task"], description="re-measuring")
        elif kind == "stop":
            progress.update(state["task"], description=f"stopped: {d['reason']}")
        elif kind == "done":
            state["timeline"] = d.get("timeline")

    try:
        with progress:
            run_job(url, job_id, device=args.device, interpret=args.interpret, on_event=on_event)
    except LookupError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]: resume with `blocktune tune --resume {job_id}`")
        return 130
    return _final_table(url, job_id, console, timeline=state["timeline"] if getattr(args, "verbose", False) else None)


def _final_table(url: str, job_id: int, console, *, timeline: dict[str, Any] | None = None) -> int:
    import collections

    import sqlalchemy as sa
    from rich.table import Table

    from db.engine import make_engine, session_factory
    from db.models import BestConfig, Job, Trial

    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            job = s.get(Job, job_id)
            trials = s.scalars(sa.select(Trial).where(Trial.job_id == job_id)).all()
            best = s.scalars(sa.select(BestConfig).where(BestConfig.job_id == job_id)).first()
            ok = sorted((t for t in trials if t.status == "ok" and t.median_ms is not None), key=lambda t: t.median_ms)
            table = Table(title=f"job {job_id} ({job.kernel.name}): {job.state}")
            for col in ("#", "trial", "config", "median", "p20–p80", "vs best"):
                table.add_column(col, justify="right" if col in ("#", "trial", "median", "vs best") else "left")
            for i, t in enumerate(ok[:10], 1):
                sp = t.spread or {}
                table.add_row(str(i), str(t.number), _fmt_config(t.config), _fmt_ms(t.median_ms),
                              f"{_fmt_ms(sp.get('p20'))}–{_fmt_ms(sp.get('p80'))}",
                              f"{t.median_ms / ok[0].median_ms:.2f}×")
            console.print(table)
            counts = collections.Counter(t.status for t in trials)
            console.print("trials: " + ", ".join(f"{n} {st}" for st, n in counts.most_common()))
            console.print(f"study [bold]{job.study_name}[/] (Optuna): optuna-dashboard {engine.url.render_as_string(hide_password=True)}")
            if timeline:
                from rich.markup import escape

                from tuner.timeline import format_timeline

                console.print("[bold]timeline[/] (where this run's time went):")
                console.print(escape(format_timeline(timeline, indent="  ")))
            if job.state == "succeeded" and best is not None:
                line = f"[bold green]best[/] {_fmt_config(best.config)}: {_fmt_ms(best.median_ms)} (re-measured)"
                if best.default_ms:
                    line += f"; default {_fmt_ms(best.default_ms)} → {best.default_ms / best.median_ms:.2f}× faster"
                console.print(line)
                return 0
            if job.state == "failed":
                console.print(f"[bold red]failed[/]: {(job.error or '').splitlines()[0] if job.error else ''}")
                return 1
            console.print(f"job {job_id} is {job.state}")
            return 0 if job.state in ("running", "queued") else 1
    finally:
        engine.dispose()


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_best(args) -> int:
    from rich.table import Table

    from db import repo
    from db.engine import default_url, make_engine, session_factory
    from db.migrate import upgrade
    from jobspec.problem_key import canonical_key

    console = _console()
    url = args.database_url or default_url()
    upgrade(url)
    key = None
    if args.key:
        values = {}
        for item in args.key:
            if "=" not in item:
                console.print(f"[red]--key wants NAME=VALUE, got {item!r}[/]")
                return 2
            k, v = item.split("=", 1)
            values[k.strip()] = _parse_value(v.strip())
        key = canonical_key(values)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            rows = repo.find_best_configs(s, kernel_name=args.kernel, problem_key=key, gpu_model=args.gpu)
            if args.json:
                print(json.dumps([{"kernel": r.kernel_name, "fingerprint": r.kernel_fingerprint,
                                   "problem_key": json.loads(r.problem_key), "gpu_model": r.gpu_model,
                                   "config": r.config, "median_ms": r.median_ms, "default_ms": r.default_ms,
                                   "job_id": r.job_id} for r in rows], indent=2))
                return 0 if rows else 1
            if not rows:
                console.print(f"no best config stored for kernel {args.kernel!r}"
                              + (f" and key {key}" if key else "") + (f" on {args.gpu}" if args.gpu else ""))
                return 1
            table = Table(title=f"best configs: {args.kernel}")
            for col in ("problem key", "GPU", "config", "median", "default", "speed-up", "job"):
                table.add_column(col)
            for r in rows:
                table.add_row(r.problem_key, r.gpu_model, _fmt_config(r.config), _fmt_ms(r.median_ms),
                              _fmt_ms(r.default_ms), f"{r.default_ms / r.median_ms:.2f}×" if r.default_ms else "—",
                              str(r.job_id or "—"))
            console.print(table)
            return 0
    finally:
        engine.dispose()


def cmd_gpus(args) -> int:
    import sqlalchemy as sa
    from rich.table import Table

    from db.engine import default_url, make_engine, session_factory
    from db.migrate import upgrade
    from db.models import Gpu
    from jobspec.device import INTERPRETER_MODEL

    console = _console()
    table = Table(title="GPUs on this machine")
    for col in ("index", "model", "compute capability", "SMs", "memory", "shared mem/block", "driver", "CUDA"):
        table.add_column(col)
    local = 0
    if _has_gpu():
        from compiler.runtime import driver

        for i in range(driver.device_count()):
            p = driver.device_properties(i)
            cap = p["capability"]
            table.add_row(str(i), p["name"], f"{cap[0]}.{cap[1]}", str(p["sm_count"]),
                          f"{p['total_memory'] / 2**30:.1f} GiB", f"{p.get('max_shared_memory', 0) // 1024} KiB",
                          str(p.get("driver_version", "")), str(p.get("cuda_version", "")))
            local += 1
    if local:
        console.print(table)
    else:
        console.print("no CUDA GPU on this machine (`blocktune tune --interpret` runs on the CPU)")
    url = args.database_url or default_url()
    upgrade(url)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            rows = s.scalars(sa.select(Gpu).order_by(Gpu.model)).all()
            if rows:
                t = Table(title="GPU models in the database")
                for col in ("model", "compute capability", "SMs", "memory", "driver", "CUDA", "first seen"):
                    t.add_column(col)
                for g in rows:
                    seen = g.created_at.strftime("%Y-%m-%d %H:%M UTC")
                    if g.model == INTERPRETER_MODEL:     # CPU workers: no GPU, nothing of a GPU to show
                        t.add_row(g.model, "— (CPU interpreter)", "—", "—", "—", "—", seen)
                        continue
                    t.add_row(g.model, g.compute_capability, str(g.sm_count), f"{g.total_memory / 2**30:.1f} GiB",
                              g.driver_version, g.cuda_version, seen)
                console.print(t)
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="blocktune")
    register(parser.add_subparsers(dest="command", required=True))
    a = parser.parse_args()
    sys.exit(int(a.func(a) or 0))
