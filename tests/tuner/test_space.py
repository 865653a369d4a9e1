"""Search space, constraints, encoding for Optuna, samplers."""
from __future__ import annotations

import optuna
import pytest

from tuner.samplers import choose_kind, make_sampler, mark
from tuner.space import SearchSpace, config_key

SMEM = "(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2 * num_stages <= max_shared_memory"


def matmul_space():
    return SearchSpace({"BLOCK_M": [256, 32, 64, 128], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64],
                        "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}, [SMEM])


def test_enumeration_and_constraints():
    sp = matmul_space()
    assert sp.size == 4 * 4 * 2 * 2 * 4
    assert sp.params["BLOCK_M"] == [32, 64, 128, 256]  # ordinal lists are sorted
    valid = sp.valid_configs({"max_shared_memory": 232448})
    assert 0 < len(valid) < sp.size
    big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 5}
    assert big in sp and big not in valid
    assert sp.violations(big, {"max_shared_memory": 232448}) == [SMEM]
    assert "unknown name" in sp.violations(big, {})[0]  # an unevaluable constraint counts as broken


def test_encode_decode_roundtrip_and_completion():
    sp = matmul_space()
    cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 8, "num_stages": 3}
    enc = sp.encode(cfg)
    assert enc == cfg                                        # Optuna gets the real values
    assert sp.decode(enc) == cfg
    assert sp.complete({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}) == {
        "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    assert sp.complete({"BLOCK_M": 64}) is None             # a constexpr without a value
    assert sp.complete({"BLOCK_M": 48, "BLOCK_N": 64, "BLOCK_K": 32}) is None  # outside the space
    assert config_key({"b": 1, "a": 2}) == config_key({"a": 2, "b": 1})


def test_choose_kind():
    assert choose_kind("auto", 40, 50) == "brute"
    assert choose_kind("auto", 400, 50) == "tpe"
    assert choose_kind("auto", 400, None) == "tpe"
    assert choose_kind("random", 4, 50) == "random"


@pytest.mark.parametrize("kind", ["tpe", "random", "brute"])
def test_samplers_propose_configs_of_the_space(kind):
    sp = matmul_space()
    study = optuna.create_study(sampler=make_sampler(kind, seed=1, n_startup_trials=5))
    seen = set()
    for _ in range(30):
        t = study.ask()
        cfg = sp.suggest(t)
        assert cfg in sp
        seen.add(config_key(cfg))
        study.tell(t, float(cfg["BLOCK_M"] * cfg["num_stages"]))
    assert len(seen) > 10


def test_tpe_learns_from_infeasible_trials():
    """Configs marked infeasible steer TPE away from that region."""
    sp = SearchSpace({"X": list(range(0, 64, 4)), "Y": list(range(0, 64, 4))})
    study = optuna.create_study(sampler=make_sampler("tpe", seed=3, n_startup_trials=10))
    late_bad = 0
    for i in range(80):
        t = study.ask()
        cfg = sp.suggest(t)
        bad = cfg["X"] >= 32   # half the space is "out of resources"
        mark(t, not bad)
        study.tell(t, float("inf") if bad else float(abs(cfg["X"] - 20) + abs(cfg["Y"] - 40)))
        if i >= 40 and bad:
            late_bad += 1
    assert late_bad < 10, late_bad  # random would hit ~20 of 40


def test_optuna_trials_hold_the_real_values():
    """optuna-dashboard shows trial.params: they are the config's values (BLOCK_SIZE=2048), never a
    position in the list; evenly spaced integers stay an ordered range for TPE."""
    sp = SearchSpace({"BLOCK_SIZE": [4096, 1024, 2048], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3, 4],
                      "MODE": ["a", "b"]})
    dists = sp.distributions()
    assert dists["num_stages"] == optuna.distributions.IntDistribution(1, 4, step=1)
    assert dists["BLOCK_SIZE"] == optuna.distributions.CategoricalDistribution([1024, 2048, 4096])
    assert isinstance(dists["num_warps"], optuna.distributions.CategoricalDistribution)   # 2, 4, 8: not evenly spaced
    assert SearchSpace({"B": [32, 64, 96, 128]}).distributions()["B"] == optuna.distributions.IntDistribution(
        32, 128, step=32)
    study = optuna.create_study(sampler=make_sampler("tpe", seed=5, n_startup_trials=4))
    seen_block_sizes = set()
    for _ in range(12):
        t = study.ask()
        cfg = sp.suggest(t)
        assert t.params == cfg and cfg in sp
        seen_block_sizes.add(cfg["BLOCK_SIZE"])
        study.tell(t, float(cfg["BLOCK_SIZE"]) / cfg["num_warps"])
    assert seen_block_sizes <= {1024, 2048, 4096} and len(seen_block_sizes) >= 2
    assert all(ft.params == sp.decode(ft.params) for ft in study.trials)
    # a config enqueued (known-good configs, re-queued trials) comes back as itself
    study.enqueue_trial(sp.encode({"BLOCK_SIZE": 2048, "num_warps": 8, "num_stages": 3, "MODE": "b"}))
    t = study.ask()
    assert sp.suggest(t) == {"BLOCK_SIZE": 2048, "num_warps": 8, "num_stages": 3, "MODE": "b"}
