"""@autotune / @heuristics / Config with Triton's semantics, in interpret mode (numpy references).

The behaviours Triton's own runtime/test_autotuner.py checks: per-key caching whatever the
argument order, reset_to_zero / restore_value (also with None buffers), pre/post hooks paired even
when a config fails to compile, early_config_prune and perf_model/top_k pruning (fractions keep at
least one config), a single pruned config runs untimed, pruning everything is an AutotunerError,
ir_override names a config (interpret mode refuses it: it replaces GPU code), and the decorators stack in both orders.
"""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.util import interpret  # noqa: F401
from compiler import knobs


pytestmark = pytest.mark.usefixtures("interpret")


def timed_by_block(timings: dict, calls: list | None = None):
    """A do_bench that runs the kernel once and reports the time given for its BLOCK_SIZE."""
    def do_bench(kernel_call, quantiles):
        kernel_call()
        block = _last_block[0]
        if calls is not None:
            calls.append(block)
        return [timings.get(block, 1.0)] * 3
    return do_bench


_last_block = [None]


def _remember_block(nargs):
    _last_block[0] = nargs["BLOCK_SIZE"]


def configs_of(*blocks):
    return [triton.Config({"BLOCK_SIZE": b}, pre_hook=_remember_block) for b in blocks]


def by_block(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


@triton.jit
def copy_kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < N), mask=offs < N)


@triton.jit
def increment_kernel(src, N, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(src + offs, tl.load(src + offs, mask=offs < N) + 1, mask=offs < N)


@triton.jit
def ones_kernel(maybe, dst, N, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if maybe is not None:
        tl.store(maybe + offs, tl.full([BLOCK_SIZE], 1, dtype=maybe.dtype.element_ty), mask=offs < N)
    else:
        tl.store(dst + offs, tl.full([BLOCK_SIZE], 1, dtype=dst.dtype.element_ty), mask=offs < N)


def test_one_tuning_per_key_whatever_the_argument_order():
    tuned = triton.autotune(configs_of(32, 128), key=["N"], do_bench=timed_by_block({32: 2.0, 128: 1.0}))(copy_kernel)
    src = torch.randn(1000)
    dst = torch.full_like(src, float("nan"))
    tuned[by_block(1000)](dst, src, 1000)
    assert tuned.best_config.kwargs["BLOCK_SIZE"] == 128 and torch.equal(dst, src)
    dst2 = torch.full_like(src, float("nan"))
    tuned[by_block(500)](N=500, src=src, dst=dst2)
    assert len(tuned.cache) == 2 and torch.equal(dst2[:500], src[:500]) and dst2[500:].isnan().all()
    tuned.configs_timings = None
    tuned[by_block(1000)](src=src, dst=dst, N=1000)                 # the first key again: from the cache
    assert tuned.configs_timings is None and len(tuned.cache) == 2


def test_a_dtype_constexpr_can_be_the_key():
    @triton.autotune(configs_of(32, 128), key=["DTYPE"], do_bench=timed_by_block({}))
    @triton.jit
    def cast_kernel(dst, src, N, DTYPE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < N).to(DTYPE), mask=offs < N)

    src = torch.randn(300)
    dst = torch.empty(300, dtype=torch.float16)
    cast_kernel[by_block(300)](dst, src, 300, tl.float16)
    cast_kernel[by_block(300)](dst, src, 300, tl.float16)
    assert len(cast_kernel.cache) == 1 and torch.equal(dst, src.half())


def test_a_key_that_names_no_parameter_is_left_out_as_triton_does():
    """Tutorial 08 keys its TMA kernel on ['group_a_ptrs', ..., 'gropup_c_ptrs', ...] (sic)."""
    tuned = triton.autotune(configs_of(32, 128), key=["N", "gropup_c_ptrs"],
                            do_bench=timed_by_block({32: 1.0, 128: 2.0}))(copy_kernel)
    src = torch.randn(300)
    dst = torch.full_like(src, float("nan"))
    tuned[by_block(300)](dst, src, 300)
    tuned[by_block(300)](dst, src, 300)
    assert list(tuned.cache) == [(300, "torch.float32", "torch.float32")]  # N and the tensors' dtypes
    assert tuned.best_config.kwargs["BLOCK_SIZE"] == 32 and torch.equal(dst, src)


@pytest.mark.parametrize("by_keyword", [False, True])
def test_restore_value_undoes_the_timed_runs(by_keyword):
    tuned = triton.autotune(configs_of(32, 128), key=["N"], restore_value=["src"],
                            do_bench=timed_by_block({}))(increment_kernel)
    src = torch.zeros(1024)
    if by_keyword:
        tuned[by_block(1024)](src=src, N=1024)
    else:
        tuned[by_block(1024)](src, 1024)
    assert torch.equal(src, torch.ones(1024))              # two timed runs undone, the real one kept


@pytest.mark.parametrize("maybe_is_none", [False, True])
@pytest.mark.parametrize("hook", ["reset_to_zero", "restore_value"])
def test_reset_and_restore_skip_a_none_buffer(hook, maybe_is_none):
    tuned = triton.autotune(configs_of(32, 128), key=["N"], do_bench=timed_by_block({}),
                            **{hook: ["maybe"]})(ones_kernel)
    dst = torch.full((1024,), 2.0)
    maybe = None if maybe_is_none else dst
    tuned[by_block(1024)](maybe, dst, 1024)
    assert torch.equal(dst, torch.ones(1024))


def test_reset_to_zero_zeroes_before_every_run_and_before_the_real_launch():
    seen = []

    def bench(kernel_call, quantiles):
        kernel_call()
        seen.append(acc.clone())
        return [1.0] * 3

    @triton.autotune(configs_of(32, 128), key=["N"], reset_to_zero=["acc"], do_bench=bench)
    @triton.jit
    def accumulate(acc, N, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(acc + offs, tl.load(acc + offs, mask=offs < N) + 3, mask=offs < N)

    acc = torch.full((256,), 7.0)
    accumulate[by_block(256)](acc, 256)
    assert all(torch.equal(s, torch.full((256,), 3.0)) for s in seen) and len(seen) == 2
    assert torch.equal(acc, torch.full((256,), 3.0))


@triton.jit
def small_blocks_only(src, N, N_STAGES: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    tl.static_assert(BLOCK_SIZE <= 64, "BLOCK_SIZE too large for this kernel")
    offs = tl.arange(0, BLOCK_SIZE)
    for _ in tl.range(tl.cdiv(N, BLOCK_SIZE), num_stages=N_STAGES):
        tl.store(src + offs, tl.load(src + offs, mask=offs < N) * 2, mask=offs < N)
        offs += BLOCK_SIZE


def test_hooks_are_paired_and_hear_of_a_config_that_fails_to_compile():
    state = {"open": 0, "calls": 0, "errors": []}

    def pre_hook(nargs, reset_only=False):
        state["open"] += 1
        state["calls"] += 1

    def post_hook(nargs, *, exception):     # keyword-only, as Triton's tests write it
        state["open"] -= 1
        assert state["open"] == 0
        if exception is not None:
            state["errors"].append(exception)

    tuned = triton.autotune(configs_of(4096, 32), key=["N"], pre_hook=pre_hook, post_hook=post_hook,
                            do_bench=timed_by_block({}))(
        triton.heuristics({"N_STAGES": lambda nargs: 4 if nargs["N"] == 100 else 2})(small_blocks_only))
    src = torch.ones(100)
    tuned[(1,)](src, 100)
    assert state["calls"] == 3 and state["open"] == 1       # two timed runs; the reset_only call has no post_hook
    (err,) = state["errors"]
    assert isinstance(err, triton.CompilationError) and "BLOCK_SIZE too large" in str(err)
    assert tuned.best_config.kwargs["BLOCK_SIZE"] == 32
    assert torch.equal(src, torch.full((100,), 4.0))        # one timed run and the real launch


@pytest.mark.parametrize("with_perf_model", [False, True])
def test_prune_configs_by(with_perf_model):
    records = {}

    def early_config_prune(configs, named_args, **kwargs):
        records["early"] = (sorted(named_args), kwargs["N"])  # positional arguments by name, keywords apart
        return [configs[0]]

    def perf_model(**kwargs):
        records.setdefault("estimated", []).append(kwargs["BLOCK_SIZE"])
        assert kwargs["N"] == 1024 and kwargs["num_warps"] == 4 and "src" in kwargs
        return kwargs["BLOCK_SIZE"]

    prune = {"perf_model": perf_model, "top_k": 1} if with_perf_model else {"early_config_prune": early_config_prune}
    benched = []
    tuned = triton.autotune(configs_of(128, 32), key=["N"], prune_configs_by=prune,
                            do_bench=timed_by_block({}, benched))(copy_kernel)
    src = torch.randn(1024)
    dst = torch.empty_like(src)
    tuned[by_block(1024)](dst, src, N=1024)
    assert torch.equal(dst, src) and benched == []           # pruned to one: untimed
    if with_perf_model:
        assert records == {"estimated": [128, 32]} and tuned.best_config.kwargs["BLOCK_SIZE"] == 32
    else:
        assert records == {"early": (["dst", "src"], 1024)} and tuned.best_config.kwargs["BLOCK_SIZE"] == 128


def test_a_fractional_top_k_keeps_at_least_one_config():
    tuned = triton.autotune(configs_of(32, 128), key=["N"],
                            prune_configs_by={"perf_model": lambda **kw: kw["BLOCK_SIZE"], "top_k": 0.3},
                            do_bench=timed_by_block({}))(copy_kernel)
    src = torch.randn(1024)
    dst = torch.empty_like(src)
    tuned[by_block(1024)](dst, src, N=1024)
    assert torch.equal(dst, src) and tuned.best_config.kwargs["BLOCK_SIZE"] == 32


def test_top_k_fraction_applies_to_what_early_pruning_left():
    configs = [triton.Config({"BLOCK_SIZE": b}) for b in range(1, 11)]
    estimated, launched, benched = [], [], []

    class RecordingKernel:
        fn = None

        def run(self, **kwargs):
            launched.append(kwargs["BLOCK_SIZE"])

    def bench(kernel_call, quantiles):
        kernel_call()
        benched.append(launched[-1])
        return [float(launched[-1])] * 3

    def perf_model(**kwargs):
        estimated.append(kwargs["BLOCK_SIZE"])
        return kwargs["BLOCK_SIZE"]

    tuner = triton.runtime.Autotuner(RecordingKernel(), arg_names=[], configs=configs, key=[], do_bench=bench,
                                     prune_configs_by={"early_config_prune": lambda c, nargs, **kw: c[:6],
                                                       "perf_model": perf_model, "top_k": 0.5})
    tuner.run()
    assert estimated == [1, 2, 3, 4, 5, 6] and benched == [1, 2, 3] and launched[-1] == 1


def test_pruning_to_one_config_skips_the_benchmark_and_the_listener(monkeypatch):
    heard = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **event: heard.append(event))

    def must_not_bench(kernel_call, quantiles):
        raise AssertionError("a single pruned config must not be benchmarked")

    configs = configs_of(32, 128)
    tuned = triton.autotune(configs, key=["N"], do_bench=must_not_bench,
                            prune_configs_by={"early_config_prune": lambda c, nargs, **kw: [c[1]]})(copy_kernel)
    src = torch.randn(1024)
    dst = torch.empty_like(src)
    tuned[by_block(1024)](dst, src, N=1024)
    assert torch.equal(dst, src) and tuned.best_config == configs[1] and heard == []


def test_the_listener_hears_of_a_tuning(monkeypatch):
    heard = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **event: heard.append(event))
    configs = configs_of(32, 128)
    tuned = triton.autotune(configs, key=["N"], do_bench=timed_by_block({32: 5.0, 128: 2.0}))(copy_kernel)
    src = torch.randn(512)
    tuned[by_block(512)](torch.empty_like(src), src, 512)
    (event,) = heard
    assert event["best_config"] == configs[1] and event["key"][0] == 512
    assert event["fn"] is copy_kernel and not event["cache_hit"] and set(event["configs_timings"]) == set(configs)


def test_pruning_every_config_is_an_autotuner_error():
    tuned = triton.autotune(configs_of(32, 128), key=["N"],
                            prune_configs_by={"early_config_prune": lambda c, nargs, **kw: []})(copy_kernel)
    src = torch.randn(64)
    with pytest.raises(triton.TritonError) as e:
        tuned[by_block(64)](torch.empty_like(src), src, N=64)
    assert isinstance(e.value, triton.AutotunerError)
    assert str(e.value) == ("Autotuner error: No valid autotuner configs after pruning. `early_config_prune` "
                            "should return at least one config.")


def test_ir_override_names_a_config_and_interpret_mode_refuses_it():
    first = triton.Config({"BLOCK_SIZE": 32}, ir_override="first.ttir")
    second = triton.Config({"BLOCK_SIZE": 32}, ir_override="second.ttir")
    assert str(first) != str(second) and first != second and "ir_override: first.ttir" in str(first)
    tuned = triton.autotune([first], key=["N"])(copy_kernel)
    src = torch.randn(64)
    with pytest.raises(ValueError, match="ir_override='first.ttir' replaces the compiled GPU code"):
        tuned[by_block(64)](torch.empty_like(src), src, 64)


def test_config_pre_hook_runs_before_the_chosen_launch():
    seen = []
    config = triton.Config({"BLOCK_SIZE": 64}, num_warps=2, num_stages=1, num_ctas=1,
                           pre_hook=lambda nargs: seen.append((nargs["N"], nargs["BLOCK_SIZE"], nargs["num_warps"])))
    tuned = triton.autotune([config], key=["N"])(copy_kernel)
    src = torch.randn(200)
    dst = torch.empty_like(src)
    tuned[by_block(200)](dst, src, 200)
    assert seen == [(200, 64, 2)] and torch.equal(dst, src)


@pytest.mark.parametrize("order", ["autotune_over_heuristics", "heuristics_over_autotune"])
def test_heuristics_stack_with_autotune(order):
    heuristic = triton.heuristics({"EVEN": lambda args: args["N"] % args["BLOCK_SIZE"] == 0}) \
        if order == "autotune_over_heuristics" else triton.heuristics({"EVEN": lambda args: args["N"] % 64 == 0})
    tune = triton.autotune([triton.Config({"BLOCK_SIZE": 16}), triton.Config({"BLOCK_SIZE": 64})], key=["N"],
                           do_bench=lambda call, quantiles: (call(), [1.0] * 3)[1])

    @triton.jit
    def scaled(dst, src, N, EVEN: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        if EVEN:
            tl.store(dst + offs, tl.load(src + offs) * 2)
        else:
            tl.store(dst + offs, tl.load(src + offs, mask=offs < N) * 2, mask=offs < N)

    kernel = tune(heuristic(scaled)) if order == "autotune_over_heuristics" else heuristic(tune(scaled))
    for n in (128, 50):
        src = torch.randn(n)
        dst = torch.full_like(src, float("nan"))
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](dst, src, n)
        torch.testing.assert_close(dst, src * 2, rtol=0, atol=0)


def test_heuristics_see_every_argument_by_name():
    seen = []

    def block_for(args):
        seen.append({k: args[k] for k in ("dst", "src", "N")})
        return triton.next_power_of_2(args["N"])

    kernel = triton.heuristics({"BLOCK_SIZE": block_for})(copy_kernel)
    src = torch.randn(37)
    dst = torch.empty_like(src)
    kernel[(1,)](dst, src, N=37)
    assert len(seen) == 1 and seen[0]["dst"] is dst and seen[0]["src"] is src and seen[0]["N"] == 37
    assert torch.equal(dst, src)
