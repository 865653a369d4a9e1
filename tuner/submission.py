"""A job spec checked before it is stored as a job, the same way wherever it comes from.

    submission = prepare_submission(spec)                 # raises SubmissionError / ValidationError
    job_id = create_job_from_spec(db_url, spec)           # checked, then stored through db.repo

Nothing submitted is executed: the spec is validated by its pydantic model (jobspec.JobSpec; its
expressions are parsed by the safe evaluator), sizes and scalar arguments are evaluated by the safe
evaluator only, its problem key must be one the service can store and look up (jobspec.ProblemKey),
and the kernel source is parsed and checked by blocktune's compiler (`jit_from_source`, which reads
it with `ast` and never runs it; its front end bounds compile-time work and values). A few limits of
our own are applied on top. The API runs this in a checker process with CPU-time, memory and
wall-clock limits (service.kernel_check), never in its own; `blocktune tune` runs it in-process.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from jobspec.model import PROBLEM_KEY, JobSpec
from jobspec.safe_eval import SafeEvalError, safe_eval

MAX_SOURCE_CHARS = 200_000
MAX_STATIC_TRIP_COUNT = 1 << 24   # a loop over literal bounds longer than this is refused


class SubmissionError(Exception):
    def __init__(self, loc: tuple, message: str):
        self.loc = loc
        self.message = message
        super().__init__(message)


@dataclass
class Submission:
    spec: dict[str, Any]           # normalized JSON of the JobSpec
    kernel_name: str
    source: str
    fingerprint: str
    compiler_version: str
    trials_total: int | None
    problem_key: dict[str, Any]


def _literal_int(node: ast.AST) -> int | None:
    """The value of an integer literal expression built only from literals (e.g. 10**12)."""
    try:
        text = ast.unparse(node)
        if any(isinstance(n, ast.Name) for n in ast.walk(node)):
            return None
        v = safe_eval(text, {})
    except (SafeEvalError, ValueError, SyntaxError, TypeError, ZeroDivisionError, OverflowError, RecursionError,
            MemoryError):
        return 2**62 + 1   # too large for the evaluator: certainly too long
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _check_loops(source: str, loc: tuple) -> None:
    """Refuse loops whose literal trip count is absurd (`for i in range(10**12)`): they would
    only burn a worker until the trial timeout. (The source has passed the compiler's parse, which
    bounds its nesting: `ast.unparse` below cannot recurse too deeply.)"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return  # the compiler reports it
    for node in ast.walk(tree):
        if isinstance(node, ast.While) and isinstance(node.test, ast.Constant) and node.test.value \
                and not any(isinstance(n, (ast.Break, ast.Return)) for n in ast.walk(node)):
            raise SubmissionError(loc, f"line {node.lineno}: `while {node.test.value!r}` loop without a break never ends")
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
            fn = node.iter.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name not in ("range", "static_range"):
                continue
            args = [_literal_int(a) for a in node.iter.args]
            if not args or any(a is None for a in args):
                continue
            start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
            if step == 0:
                raise SubmissionError(loc, f"line {node.lineno}: loop with a step of 0 never ends")
            trips = max(0, (stop - start + step - (1 if step > 0 else -1)) // step)
            if trips > MAX_STATIC_TRIP_COUNT:
                raise SubmissionError(loc, f"line {node.lineno}: loop of {trips} iterations is over the limit of "
                                           f"{MAX_STATIC_TRIP_COUNT}")


def _compile_check(source: str, name: str, loc: tuple):
    import compiler

    if len(source) > MAX_SOURCE_CHARS:
        raise SubmissionError(loc, f"kernel source of {len(source)} characters is over the limit of {MAX_SOURCE_CHARS}")
    if "\x00" in source:
        raise SubmissionError(loc, "kernel source contains NUL characters")
    try:
        fn = compiler.jit_from_source(source, name, filename="<submitted>")
    except compiler.CompilationError as exc:
        raise SubmissionError(loc, f"kernel rejected by the compiler: {exc}")
    except RecursionError:
        raise SubmissionError(loc, "kernel source nests too deeply")
    except (SyntaxError, ValueError, TypeError, KeyError, AttributeError, NameError) as exc:
        raise SubmissionError(loc, f"kernel rejected: {type(exc).__name__}: {exc}")
    _check_loops(source, loc)
    return fn


def _candidate_configs(spec) -> list[dict]:
    """A few configs to check the kernel body with: the default, the first known-good one, the
    first value of every parameter, the last value of every parameter."""
    out = []
    for cfg in ([spec.default_config] if spec.default_config else []) + spec.configs[:1] + [
            {k: v[0] for k, v in spec.space.items()}, {k: v[-1] for k, v in spec.space.items()}]:
        full = {**{k: v[0] for k, v in spec.space.items()}, **cfg}
        if full not in out:
            out.append(full)
    return out


def _front_end_check(spec, fn) -> None:
    """Run the compiler's front end (source → typed block IR; nothing is executed) on the spec's
    signature for a few configs. The kernel is refused only when every one of them fails: a
    config-specific failure is a trial's compile-error, not a bad job."""
    import compiler
    from compiler.runtime import compile as rc
    from tuner.data import signature, specialization

    env = spec.scalar_env()
    sig = signature(spec, env)
    div16, one = specialization(spec, env)
    first_error = None
    for cfg in _candidate_configs(spec):
        constexprs = {**spec.constants, **{k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}}
        try:
            rc.build_ir(fn, rc.normalize_signature(fn, sig, constexprs), constexprs, div16, one)
            return
        except compiler.CompilationError as exc:
            first_error = first_error or f"kernel rejected by the compiler: {exc}"
        except RecursionError:
            first_error = first_error or "kernel source nests too deeply"
        except MemoryError:
            raise   # the checker process reports its memory limit
        except Exception as exc:  # noqa: BLE001 - any front-end failure is the kernel's
            first_error = first_error or f"kernel rejected by the compiler: {type(exc).__name__}: {exc}"
    raise SubmissionError(("kernel", "source"), first_error or "kernel rejected by the compiler")


def prepare_submission(body: JobSpec | dict[str, Any]) -> Submission:
    """Check a job spec (its JSON is validated with JobSpec first); raises pydantic.ValidationError
    or SubmissionError."""
    import compiler

    spec = body if isinstance(body, JobSpec) else JobSpec.model_validate(body)

    fn = _compile_check(spec.kernel.source, spec.kernel.name, ("kernel", "source"))
    kernel_args = set(getattr(fn, "arg_names", []) or [])
    if kernel_args:
        unknown = [a.name for a in spec.args if a.name not in kernel_args]
        if unknown:
            raise SubmissionError(("args",), f"not arguments of kernel {spec.kernel.name}: {', '.join(unknown)}")
    if spec.reference is not None and spec.reference.source is not None:
        _compile_check(spec.reference.source, spec.reference.name, ("reference", "source"))
    try:
        spec.shapes()
        key = spec.problem_key()
    except (SafeEvalError, ZeroDivisionError, OverflowError, ValueError, TypeError, KeyError) as exc:
        raise SubmissionError(("args",), f"cannot evaluate sizes/arguments: {exc}")
    try:
        PROBLEM_KEY.validate_python(key)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"])
        raise SubmissionError(("key",), f"the problem key {key} cannot be stored and looked up: "
                                        f"{where + ': ' if where else ''}{first['msg']}")
    _front_end_check(spec, fn)
    grid_errors = []
    for cfg in _candidate_configs(spec):
        try:
            spec.grid_for(cfg)
            break
        except (SafeEvalError, ZeroDivisionError, OverflowError, ValueError, TypeError, KeyError) as exc:
            grid_errors.append(str(exc))
    else:
        raise SubmissionError(("grid",), f"cannot evaluate the grid: {grid_errors[0]}")
    return Submission(spec=spec.to_json(), kernel_name=spec.kernel.name, source=spec.kernel.source,
                      fingerprint=fn.fingerprint, compiler_version=compiler.__version__,
                      trials_total=spec.budget.trials, problem_key=key)


def create_job_from_spec(db_url: str, spec: JobSpec | dict[str, Any], *, gpu_model: str | None = None,
                         idempotency_key: str | None = None) -> int:
    """Check `spec` (prepare_submission: the API's checks) and store it as a queued job with its
    kernel (db.repo.submit_job); returns the job's id. What `blocktune tune` and tests do."""
    from db import repo
    from db.engine import make_engine, session_factory

    sub = prepare_submission(spec)
    engine = make_engine(db_url)
    try:
        with session_factory(engine).begin() as s:
            return repo.submit_job(s, fingerprint=sub.fingerprint, kernel_name=sub.kernel_name, source=sub.source,
                                   compiler_version=sub.compiler_version, spec=sub.spec, gpu_model=gpu_model,
                                   idempotency_key=idempotency_key, trials_total=sub.trials_total).id
    finally:
        engine.dispose()
