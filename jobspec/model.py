"""The job spec: one pydantic model, loaded from JSON or YAML, for every part that handles a job —
the API validates a submitted spec with it (and documents it in OpenAPI), the tuner runs it,
`blocktune tune` and `blocktune submit` read files with it, the client may build and check one
before sending it.

Example (YAML)::

    kernel:
      name: add_kernel
      source: |
        import triton
        import triton.language as tl
        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
            ...
    sizes: {N: 98432}
    args:
      - {name: x_ptr, tensor: {shape: [N], dtype: float32, init: rand}}
      - {name: y_ptr, tensor: {shape: [N], dtype: float32, init: rand}}
      - {name: out_ptr, tensor: {shape: [N], dtype: float32, init: zeros}}
      - {name: n_elements, value: "numel(x_ptr)"}
    key: [n_elements]
    grid: ["cdiv(n_elements, BLOCK_SIZE)"]
    space: {BLOCK_SIZE: [256, 512, 1024, 2048], num_warps: [2, 4, 8], num_stages: [1, 2, 3]}
    check: {outputs: [out_ptr]}
    budget: {trials: 30, seconds: 600, patience: 15}
    sampler: auto

Names visible to expressions: the `sizes`, the scalar arguments, the tensor arguments (only through
shape(t, d), numel(t), stride(t, d)), the config (constexprs, num_warps, num_stages), the
`constants`, and in constraints also the device's properties (max_shared_memory, sm_count, l2_size,
total_memory, cc_major, cc_minor, warp_size=32).

The sizes of a spec are bounded (MAX_ARGS arguments, MAX_EXPRESSIONS constraints, ...): the API
validates a submission in its own process, and no real kernel comes near them.
"""
from __future__ import annotations

import collections
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, Strict, StringConstraints, TypeAdapter,
                      field_validator, model_validator)

from jobspec import problem_key as pk
from jobspec.config import CONFIG_BUILTINS, DEFAULTS
from jobspec.device import DEVICE_NAMES
from jobspec.safe_eval import SafeEvalError, TensorInfo, check_names, parse, safe_eval

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
                 "fp64": "float64", "double": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
                 "i64": "int64", "u8": "uint8", "int": "int32", "long": "int64"}
INITS = ("randn", "rand", "zeros", "ones", "full", "arange", "randint", "empty")
MAX_TENSOR_ELEMENTS = 2**33          # 8 Gi elements: refuse absurd allocations early
MAX_SPACE = 10_000_000
MAX_ARGS = 512                       # kernel arguments (and sizes, constants, outputs)
MAX_PARAMS = 64                      # tuned parameters
MAX_VALUES = 4096                    # values of one tuned parameter
MAX_EXPRESSIONS = 256                # constraints
MAX_CONFIGS = 1024                   # known-good configs


# --- the problem key, validated (its format: jobspec/problem_key.py) -------------------------------

KeyName = Annotated[str, StringConstraints(pattern=pk.KEY_NAME_PATTERN)]
# strict: a value keeps its JSON type ("0000" stays a string, and is refused when too long, rather
# than becoming the integer 0)
KeyValue = (Annotated[int, Strict(), Field(ge=pk.INT_MIN, le=pk.INT_MAX)]
            # open bounds: an integer beyond the int range, taken as a float, is at least 2**53 in size
            | Annotated[float, Strict(), Field(gt=-(2**53), lt=2**53, allow_inf_nan=False)]
            | Annotated[str, Strict(), StringConstraints(max_length=pk.MAX_STRING_CHARS, pattern=pk.STRING_PATTERN)]
            | Annotated[bool, Strict()] | None)


def _fits(key: dict[str, Any]) -> dict[str, Any]:
    size = len(pk.canonical_key(key).encode())
    if size > pk.MAX_KEY_BYTES:
        raise ValueError(f"the key's canonical JSON is {size} bytes, over the limit of {pk.MAX_KEY_BYTES}")
    return key


ProblemKey = Annotated[
    dict[KeyName, KeyValue],
    Field(max_length=pk.MAX_KEY_NAMES,
          description="key names (identifiers) to numbers (integers within ±(2**53 - 1)), short "
                      f"printable-ASCII strings, booleans or null; at most {pk.MAX_KEY_NAMES}, canonical JSON "
                      f"at most {pk.MAX_KEY_BYTES} bytes",
          json_schema_extra={"additionalProperties": False}),   # patternProperties names the only keys allowed
    AfterValidator(_fits),
]
PROBLEM_KEY = TypeAdapter(ProblemKey)


# --- the job spec ---------------------------------------------------------------------------------

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KernelRef(_Model):
    source: str = Field(min_length=1, description="Python source with the @jit kernel (never executed)")
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class ReferenceKernel(_Model):
    """A kernel whose outputs are the truth; run once with a fixed config."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    source: str | None = Field(default=None, min_length=1, description="defaults to the tuned kernel's source")
    config: dict[str, Any] = Field(default_factory=dict, max_length=MAX_PARAMS,
                                   description="constexprs + num_warps/num_stages")
    grid: list[str | int] | None = Field(default=None, min_length=1, max_length=3)


class TensorSpec(_Model):
    shape: list[str | int] = Field(min_length=1, max_length=8)
    dtype: str = "float32"
    init: Literal["randn", "rand", "zeros", "ones", "full", "arange", "randint", "empty"] = "randn"
    low: float | None = None      # rand / randint lower bound
    high: float | None = None     # rand / randint upper bound (exclusive for randint)
    std: float = 1.0              # randn scale
    mean: float = 0.0             # randn shift
    value: float | None = None    # full
    inplace: bool = False         # read and written by the kernel: reset before every run

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        v = DTYPE_ALIASES.get(v, v)
        if v not in DTYPES:
            raise ValueError(f"unknown dtype {v!r}; one of {', '.join(DTYPES)}")
        return v

    @model_validator(mode="after")
    def _init_args(self):
        if self.init == "full" and self.value is None:
            raise ValueError("init 'full' needs a value")
        if self.init == "randint":
            if self.high is None:
                raise ValueError("init 'randint' needs high (and optionally low)")
        if self.init in ("randn", "rand") and self.dtype.startswith(("int", "uint")):
            raise ValueError(f"init {self.init!r} needs a floating dtype, not {self.dtype} (use randint)")
        return self


class ArgSpec(_Model):
    """One kernel argument, in the kernel's order: a tensor, or a scalar (value or expression)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    tensor: TensorSpec | None = None
    value: Union[int, float, bool, str, None] = None
    dtype: str | None = None      # scalars: i32/i64/fp32 (inferred from the value otherwise)

    @model_validator(mode="after")
    def _one_of(self):
        if (self.tensor is None) == (self.value is None):
            raise ValueError(f"argument {self.name!r}: give exactly one of 'tensor' or 'value'")
        if isinstance(self.value, str):
            parse(self.value)
        if self.dtype is not None:
            d = DTYPE_ALIASES.get(self.dtype, self.dtype)
            if d not in DTYPES:
                raise ValueError(f"argument {self.name!r}: unknown dtype {self.dtype!r}")
            self.dtype = d
        return self

    @property
    def is_tensor(self) -> bool:
        return self.tensor is not None


class CheckSpec(_Model):
    outputs: list[str] = Field(default_factory=list, max_length=MAX_ARGS,
                               description="tensor arguments compared with the reference")
    atol: float | None = None
    rtol: float | None = None


class Budget(_Model):
    trials: int | None = Field(default=None, ge=1, le=100_000)
    seconds: float | None = Field(default=None, gt=0)
    patience: int | None = Field(default=None, ge=1, description="stop after N evaluated trials without improvement")

    @model_validator(mode="after")
    def _some(self):
        if self.trials is None and self.seconds is None:
            raise ValueError("budget: give trials and/or seconds")
        return self


class MeasureSpec(_Model):
    warmup_ms: float = Field(default=25.0, ge=0)
    rep_ms: float = Field(default=100.0, gt=0)
    min_reps: int = Field(default=10, ge=1)
    max_reps: int = Field(default=1000, ge=1)
    cuda_graph: Literal["auto", "always", "never"] = "auto"
    cuda_graph_below_us: float = 10.0
    flush_l2: bool = True
    timeout_s: float = Field(default=20.0, gt=0, description="per config (run + measure) before it counts as a hang")
    compile_timeout_s: float = Field(default=300.0, gt=0, description="per config compilation")
    remeasure_top: int = Field(default=3, ge=0, description="re-measure the best few at the end")
    remeasure_rounds: int = Field(default=5, ge=1)


class JobSpec(_Model):
    kernel: KernelRef
    sizes: dict[str, int] = Field(default_factory=dict, max_length=MAX_ARGS,
                                  description="named sizes usable in shapes and expressions")
    args: list[ArgSpec] = Field(min_length=1, max_length=MAX_ARGS)
    key: list[str] = Field(default_factory=list, max_length=pk.MAX_KEY_NAMES, description=(
        "names whose values make the problem key (jobspec.problem_key; a tensor stands for its dtype name)"))
    grid: list[str | int] = Field(min_length=1, max_length=3)
    space: dict[str, list[int | float | bool | str]] = Field(min_length=1, max_length=MAX_PARAMS)
    constants: dict[str, int | float | bool | str] = Field(default_factory=dict, max_length=MAX_ARGS,
                                                           description="fixed constexprs")
    constraints: list[str] = Field(default_factory=list, max_length=MAX_EXPRESSIONS)
    check: CheckSpec = Field(default_factory=CheckSpec)
    reference: ReferenceKernel | None = None
    configs: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_CONFIGS,
                                          description="known-good configs, tried first")
    default_config: dict[str, Any] | None = Field(default=None, max_length=MAX_PARAMS,
                                                  description="the untuned config (its time is kept)")
    budget: Budget = Field(default_factory=lambda: Budget(trials=50))
    sampler: Literal["auto", "tpe", "random", "brute"] = "auto"
    seed: int = 0
    lookahead: int | None = Field(default=None, ge=1, le=64, description=(
        "configs asked and compiled ahead of the GPU; default: all queued known-good configs (up to 2 per "
        "compile worker) while there are some, then 2 for TPE (two per compile worker for random/brute)"))
    measure: MeasureSpec = Field(default_factory=MeasureSpec)

    @field_validator("grid", mode="before")
    @classmethod
    def _grid_str(cls, v):
        return [v] if isinstance(v, (str, int)) else v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v):
        for k, n in v.items():
            if n < 0 or n > 2**40:
                raise ValueError(f"size {k}={n} out of range")
        return v

    @field_validator("space")
    @classmethod
    def _space(cls, v):
        for name, values in v.items():
            if not values:
                raise ValueError(f"space: {name!r} has no values")
            if len(values) > MAX_VALUES:
                raise ValueError(f"space: {name!r} has {len(values)} values, over the limit of {MAX_VALUES}")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"space: {name!r} has duplicate values")
            if name in CONFIG_BUILTINS:
                for x in values:
                    if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                        raise ValueError(f"space: {name} values must be positive integers, got {x!r}")
                if name == "num_warps" and any(x & (x - 1) or x > 32 for x in values):
                    raise ValueError("space: num_warps must be powers of two ≤ 32")
        if math.prod(len(x) for x in v.values()) > MAX_SPACE:
            raise ValueError(f"space: more than {MAX_SPACE} configs")
        return v

    @model_validator(mode="after")
    def _names(self):
        arg_names = [a.name for a in self.args]
        dup = {n for n, count in collections.Counter(arg_names).items() if count > 1}
        if dup:
            raise ValueError(f"duplicate argument names: {', '.join(sorted(dup))}")
        # a scalar argument may repeat a size under its own name ({name: M, value: M})
        clash = set(self.sizes) & {a.name for a in self.args if a.is_tensor or a.value != a.name}
        if clash:
            raise ValueError(f"names used both as sizes and arguments: {', '.join(sorted(clash))}")
        clash = (set(self.space) | set(self.constants)) & (set(arg_names) | set(self.sizes))
        if clash:
            raise ValueError(f"config names clash with sizes/arguments: {', '.join(sorted(clash))}")
        clash = set(self.space) & set(self.constants)
        if clash:
            raise ValueError(f"names both tuned (space) and fixed (constants): {', '.join(sorted(clash))}")
        tensors = {a.name for a in self.args if a.is_tensor}
        scalars = [a.name for a in self.args if not a.is_tensor]
        shape_names = set(self.sizes)
        for a in self.args:
            if a.is_tensor:
                for d in a.tensor.shape:
                    check_names(d, shape_names, f"shape of {a.name}")
        # scalars may use sizes, tensors and the scalars before them
        known = set(self.sizes) | tensors
        for a in self.args:
            if not a.is_tensor:
                check_names(a.value, known, f"argument {a.name}")
                known.add(a.name)
        config_names = set(self.space) | set(CONFIG_BUILTINS) | set(self.constants)
        expr_names = set(self.sizes) | tensors | set(scalars) | config_names
        for g in self.grid:
            check_names(g, expr_names, "grid")
        for c in self.constraints:
            check_names(c, expr_names | set(DEVICE_NAMES), "constraint")
        for k in self.key:
            if k not in set(self.sizes) | set(arg_names) | set(self.constants):
                raise ValueError(f"key: {k!r} is not a size, an argument or a constant")
        for o in self.check.outputs:
            if o not in tensors:
                raise ValueError(f"check.outputs: {o!r} is not a tensor argument")
        for cfg in [*self.configs, *([self.default_config] if self.default_config else [])]:
            unknown = set(cfg) - set(self.space) - set(CONFIG_BUILTINS)
            if unknown:
                raise ValueError(f"config {cfg}: unknown parameter(s) {', '.join(sorted(unknown))}")
        if self.reference is not None and self.reference.grid is not None:
            ref_names = expr_names | set(self.reference.config)
            for g in self.reference.grid:
                check_names(g, ref_names, "reference.grid")
        return self

    # --- derived values -------------------------------------------------------------------

    def config_names(self) -> list[str]:
        names = list(self.space)
        for b in CONFIG_BUILTINS:
            if b not in names:
                names.append(b)
        return names

    def full_space(self) -> dict[str, list]:
        """The space with num_warps / num_stages defaulting to Triton's 4 / 3 when not tuned."""
        space = dict(self.space)
        for name in CONFIG_BUILTINS:
            space.setdefault(name, [DEFAULTS[name]])
        return space

    def shapes(self) -> dict[str, tuple[int, ...]]:
        out = {}
        for a in self.args:
            if a.is_tensor:
                shape = tuple(int(safe_eval(d, self.sizes)) for d in a.tensor.shape)
                if any(d < 0 for d in shape):
                    raise SafeEvalError(f"negative dimension in the shape of {a.name}: {shape}")
                if math.prod(shape) > MAX_TENSOR_ELEMENTS:
                    raise SafeEvalError(f"tensor {a.name} too large: {shape}")
                out[a.name] = shape
        return out

    def scalar_env(self) -> dict[str, Any]:
        """Sizes, tensors (TensorInfo) and the scalar arguments' values."""
        env: dict[str, Any] = dict(self.sizes)
        shapes = self.shapes()
        for a in self.args:
            if a.is_tensor:
                env[a.name] = TensorInfo(shapes[a.name], a.tensor.dtype)
        for a in self.args:
            if not a.is_tensor:
                v = safe_eval(a.value, env) if isinstance(a.value, str) else a.value
                if a.dtype in ("int8", "int16", "int32", "int64", "uint8") and isinstance(v, float) and v.is_integer():
                    v = int(v)
                env[a.name] = v
        return env

    def problem_key(self) -> dict[str, Any]:
        """The values of the `key` names (jobspec.problem_key): a tensor argument by its dtype name,
        as the compiler's autotuner keys a launch, so that a launch finds what a job tuned."""
        env = {**self.scalar_env(), **self.constants}
        out = {}
        for k in self.key:
            v = env[k]
            out[k] = v.dtype if isinstance(v, TensorInfo) else v
        return out

    def grid_for(self, config: dict[str, Any], env: dict[str, Any] | None = None) -> tuple[int, int, int]:
        env = {**(env if env is not None else self.scalar_env()), **self.constants, **config}
        dims = [int(safe_eval(g, env)) for g in self.grid]
        if any(d < 0 for d in dims):
            raise SafeEvalError(f"negative grid {dims}")
        while len(dims) < 3:
            dims.append(1)
        return tuple(dims)  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=False)


def load_spec(path: str | Path) -> JobSpec:
    """Read a job spec from a .json file, or a YAML one (any other name)."""
    p = Path(path)
    return parse_spec_text(p.read_text(), yaml_ok=p.suffix.lower() != ".json")


def read_spec_data(text: str, *, yaml_ok: bool = True) -> dict[str, Any]:
    """The mapping in a spec file's text (YAML, or JSON only), not validated yet."""
    if yaml_ok:
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a job spec is a mapping at the top level")
    return data


def parse_spec_text(text: str, *, yaml_ok: bool = True) -> JobSpec:
    return JobSpec.model_validate(read_spec_data(text, yaml_ok=yaml_ok))
