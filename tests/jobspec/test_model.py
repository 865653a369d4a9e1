"""Job spec validation: good specs load, bad ones say what is wrong."""
from __future__ import annotations

import json

import pydantic
import pytest

from jobspec.model import JobSpec, load_spec

ADD_SRC = '''
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
'''


def add_spec(**over) -> dict:
    spec = {
        "kernel": {"name": "add_kernel", "source": ADD_SRC},
        "sizes": {"N": 4000},
        "args": [
            {"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "fp32", "init": "rand"}},
            {"name": "y_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "randn"}},
            {"name": "out_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "zeros"}},
            {"name": "n_elements", "value": "numel(x_ptr)"},
        ],
        "key": ["n_elements"],
        "grid": "cdiv(n_elements, BLOCK_SIZE)",
        "space": {"BLOCK_SIZE": [128, 256, 512, 1024], "num_warps": [1, 2, 4]},
        "constraints": ["BLOCK_SIZE // (32 * num_warps) >= 1"],
        "check": {"outputs": ["out_ptr"]},
        "budget": {"trials": 10},
    }
    spec.update(over)
    return spec


def test_good_spec_and_derived_values():
    spec = JobSpec.model_validate(add_spec())
    assert spec.args[0].tensor.dtype == "float32"
    assert spec.grid == ["cdiv(n_elements, BLOCK_SIZE)"]
    assert spec.shapes() == {"x_ptr": (4000,), "y_ptr": (4000,), "out_ptr": (4000,)}
    assert spec.scalar_env()["n_elements"] == 4000
    assert spec.problem_key() == {"n_elements": 4000}
    assert spec.grid_for({"BLOCK_SIZE": 1024, "num_warps": 4}) == (4, 1, 1)
    assert spec.full_space()["num_stages"] == [3]
    assert JobSpec.model_validate(spec.to_json()) == spec  # round-trips through the database's JSON


def test_yaml_and_json_files(tmp_path):
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(add_spec()))
    (tmp_path / "s.json").write_text(json.dumps(add_spec()))
    assert load_spec(tmp_path / "s.yaml") == load_spec(tmp_path / "s.json")


@pytest.mark.parametrize("over, fragment", [
    ({"grid": "cdiv(n_elements, BLOCK)"}, "unknown name(s) BLOCK"),
    ({"grid": "x_ptr.shape"}, "attribute access"),
    ({"constraints": ["__import__('os').system('x')"]}, "not allowed"),
    ({"space": {"BLOCK_SIZE": []}}, "no values"),
    ({"space": {"BLOCK_SIZE": [128, 128]}}, "duplicate"),
    ({"space": {"BLOCK_SIZE": [128], "num_warps": [3]}}, "powers of two"),
    ({"budget": {}}, "trials and/or seconds"),
    ({"budget": {"trials": 0}}, "greater than or equal to 1"),
    ({"key": ["nope"]}, "key: 'nope'"),
    ({"check": {"outputs": ["n_elements"]}}, "not a tensor argument"),
    ({"sampler": "cmaes"}, "sampler"),
    ({"kernel": {"name": "add kernel", "source": ADD_SRC}}, "pattern"),
    ({"extra_field": 1}, "Extra inputs"),
    ({"configs": [{"BLOCK": 128}]}, "unknown parameter"),
    ({"key": [f"k{i}" for i in range(9)]}, "at most 8 items"),
    ({"constraints": ["BLOCK_SIZE > 0"] * 257}, "at most 256 items"),
    ({"space": {"BLOCK_SIZE": list(range(1, 4098))}}, "over the limit of 4096"),
])
def test_bad_specs_say_why(over, fragment):
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec.model_validate(add_spec(**over))
    assert fragment in str(info.value)


@pytest.mark.parametrize("arg, fragment", [
    ({"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "complex64"}}, "unknown dtype"),
    ({"name": "x_ptr", "tensor": {"shape": ["N"], "init": "full"}}, "needs a value"),
    ({"name": "x_ptr", "tensor": {"shape": ["N"], "init": "randint"}}, "needs high"),
    ({"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "int32", "init": "randn"}}, "floating dtype"),
    ({"name": "x_ptr", "tensor": {"shape": ["M"]}}, "unknown name(s) M"),
    ({"name": "x_ptr"}, "exactly one"),
    ({"name": "x_ptr", "value": 1, "tensor": {"shape": [1]}}, "exactly one"),
])
def test_bad_arguments(arg, fragment):
    spec = add_spec()
    spec["args"][0] = arg
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec.model_validate(spec)
    assert fragment in str(info.value)


def test_scalars_only_see_earlier_scalars():
    spec = add_spec()
    spec["args"][3] = {"name": "n_elements", "value": "later + 1"}
    spec["args"].append({"name": "later", "value": 3})
    with pytest.raises(pydantic.ValidationError, match="unknown name"):
        JobSpec.model_validate(spec)


def test_absurd_tensor_sizes_are_refused_before_allocation():
    from jobspec.safe_eval import SafeEvalError

    spec = JobSpec.model_validate(add_spec(sizes={"N": 2**40}))
    with pytest.raises(SafeEvalError, match="too large"):
        spec.shapes()


def test_a_spec_as_large_as_allowed_validates_quickly():
    """The API validates submissions in its own process: the checks are linear in the spec's size
    (512 arguments once took quadratic time), and one argument more is refused."""
    import time

    spec = add_spec()
    spec["args"] = [{"name": f"a{i}", "value": i} for i in range(512)]
    spec["key"], spec["check"], spec["grid"] = [], {}, ["a1"]
    t = time.perf_counter()
    JobSpec.model_validate(spec)
    assert time.perf_counter() - t < 2.0
    spec["args"].append({"name": "a512", "value": 0})
    with pytest.raises(pydantic.ValidationError, match="at most 512 items"):
        JobSpec.model_validate(spec)


def test_the_problem_key_is_the_one_a_launch_looks_up():
    """A tensor in the key stands for its dtype name, as the compiler's autotuner keys a launch
    (compiler.runtime.jit.key_value): the job's winner is stored under the key its launches ask for."""
    import numpy as np

    from compiler.runtime.jit import key_value
    from jobspec.problem_key import canonical_key

    spec = JobSpec.model_validate(add_spec(key=["x_ptr", "n_elements"]))
    x = np.zeros(4000, dtype=np.float32)
    assert spec.problem_key() == {"x_ptr": key_value(x), "n_elements": key_value(4000)} == {
        "x_ptr": "float32", "n_elements": 4000}
    assert canonical_key(spec.problem_key()) == '{"n_elements":4000,"x_ptr":"float32"}'
