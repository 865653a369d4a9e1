"""The `tl` surface: constexpr, and the builtins a kernel may call.

Builtins are never executed as Python: the front end recognises them by identity (their
`__blocktune_builtin__` name) and lowers each call to block IR (see compiler/frontend/builtins.py).
Calling one outside a kernel is an error that says so.
"""
from __future__ import annotations

import builtins
import enum
import functools
import operator
from typing import Any


def _constexpr_op(op, reflected=False):
    def apply(self, other):
        other = other.value if isinstance(other, constexpr) else other
        return constexpr(op(other, self.value) if reflected else op(self.value, other))
    return apply


class constexpr:
    """A compile-time constant. As an annotation (`BLOCK: tl.constexpr`) it marks a meta-parameter."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self):
        return hash(self.value)

    @property
    def type(self) -> "constexpr_type":
        return constexpr_type(self.value)

    def __neg__(self):
        return constexpr(-self.value)

    def __pos__(self):
        return constexpr(+self.value)

    def __invert__(self):
        return constexpr(~self.value)


# Python code run at compile time (a constexpr_function, an aggregate's methods) computes on the
# constexpr fields it holds: `self.val * self.val` is a constexpr, as in Triton.
for _name, _op in {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
                   "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
                   "or": operator.or_, "xor": operator.xor}.items():
    setattr(constexpr, f"__{_name}__", _constexpr_op(_op))
    setattr(constexpr, f"__r{_name}__", _constexpr_op(_op, reflected=True))
for _name in ("lshift", "rshift", "lt", "le", "gt", "ge"):
    setattr(constexpr, f"__{_name}__", _constexpr_op(getattr(operator, _name)))
del _name, _op


class const:
    """A kernel parameter annotation (`in_ptr: tl.const`): the pointer's data is read-only. Stores
    and atomics through it are compile errors, and it does not mix with a plain pointer (as in
    Triton, constness is part of the pointer type)."""


class constexpr_type:
    """The type of a compile-time value (Triton's): `x.type == tl.constexpr_type(42)` for x = 42
    known at compile time."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __eq__(self, other):
        return isinstance(other, constexpr_type) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self) -> str:
        return f"constexpr_type[{self.value}]"


constexpr_type.__blocktune_host_helper__ = True     # kernels make them at compile time


def must_use_result(x, s=True):
    """`@must_use_result("why")` on a @jit function (or builtin): a call whose result is dropped
    (`f(x)` as a statement) is a compile error, with `why` appended to the message (Triton's API)."""
    if isinstance(x, str):
        return lambda fn: must_use_result(fn, x)
    x._must_use_result = s
    return x


def builtin(fn):
    """Mark a `tl` function as lowered by the compiler. A user's `@tl.core.builtin` (a Python
    function taking `_semantic`) runs as Python at compile time instead, as in Triton.

    Python code that a kernel runs at compile time (an aggregate's `__init__`, a builtin of the
    user's) receives a `_semantic` and may call builtins with it: `tl.arange(0, 4, _semantic=_semantic)`
    lowers at that kernel's call site."""
    name = fn.__name__

    @functools.wraps(fn)
    def outside_kernel(*args, _semantic=None, **kwargs):
        if _semantic is not None:
            return _semantic.call(outside_kernel, args, kwargs)
        raise RuntimeError(
            f"tl.{name} can only be called inside a @jit kernel (it is compiled, not run as Python); "
            "set BLOCKTUNE_INTERPRET=1 to run kernels on the CPU")

    def lower(gen, node, *args, **kwargs):
        # inside a kernel: the compiler's rule for this builtin. A rule that refuses its arguments
        # shows this frame in its traceback, as Triton's builtins (in its core.py) do.
        return gen.builtin_rules[outside_kernel.__blocktune_builtin__](gen, node, *args, **kwargs)

    outside_kernel.__blocktune_builtin__ = name
    outside_kernel.__blocktune_lower__ = lower
    return outside_kernel


def _aggregate(cls):
    """Triton's `tl.core._aggregate` class decorator: an instance groups kernel values (the class's
    annotated fields) and is passed to and returned from @jit functions as one value; its @jit
    methods take it as `self`. A kernel builds one by calling the class: its `__init__` runs at
    compile time (a Python one with the kernel values as arguments, or a @jit one inlined)."""
    cls.__blocktune_aggregate__ = True
    return cls


def is_aggregate(obj) -> bool:
    """Whether `obj` is an instance of an `_aggregate` class."""
    return getattr(type(obj), "__blocktune_aggregate__", False) is True


class tensor:
    """The type of block values inside a kernel (for annotations and isinstance in user code)."""


class tensor_descriptor_base:
    """The type of tensor descriptors inside a kernel, host-made or `tl.make_tensor_descriptor`'s
    (for isinstance in user code: `isinstance(desc_or_ptr, tl.tensor_descriptor)`)."""


class tensor_descriptor(tensor_descriptor_base):
    """See tensor_descriptor_base; Triton's name for the descriptors kernels take and make."""


# --- programs and index spaces ---------------------------------------------------------------
@builtin
def program_id(axis): ...
@builtin
def num_programs(axis): ...
@builtin
def arange(start, end): ...
@builtin
def zeros(shape, dtype): ...
@builtin
def zeros_like(input): ...
@builtin
def full(shape, value, dtype): ...
@builtin
def full_like(input, value, dtype=None): ...
@builtin
def cdiv(x, div): ...
@builtin
def to_tensor(x): ...
@builtin
def static_assert(cond, msg=""): ...
@builtin
def static_print(*values): ...
@builtin
def device_print(prefix, *args, hex=False): ...
@builtin
def device_assert(cond, msg=""): ...
@builtin
def assume(cond): ...

# --- shapes ---------------------------------------------------------------------------------
@builtin
def reshape(input, *shape, can_reorder=False): ...
@builtin
def view(input, *shape): ...
@builtin
def trans(input, *dims): ...
@builtin
def permute(input, *dims): ...
@builtin
def expand_dims(input, axis): ...
@builtin
def broadcast_to(input, *shape): ...
@builtin
def broadcast(input, other): ...
@builtin
def ravel(x, can_reorder=False): ...
@builtin
def join(a, b): ...
@builtin
def split(a): ...
@builtin
def interleave(a, b): ...
@builtin
def cat(input, other, can_reorder=False): ...
@builtin
def gather(src, index, axis): ...
@builtin
def flip(x, dim=None): ...
@builtin
def sort(x, dim=None, descending=False): ...
@builtin
def topk(x, k, dim=None): ...
@builtin
def histogram(input, num_bins, mask=None): ...
@builtin
def item(input): ...

# --- elementwise ----------------------------------------------------------------------------
class PropagateNan(enum.Enum):
    """`propagate_nan=` of tl.maximum/minimum/clamp: ALL makes a NaN operand give NaN."""
    NONE = 0x0000
    ALL = 0xFFFF



@builtin
def where(condition, x, y): ...
@builtin
def maximum(x, y, propagate_nan=PropagateNan.NONE): ...
@builtin
def minimum(x, y, propagate_nan=PropagateNan.NONE): ...
@builtin
def clamp(x, min, max, propagate_nan=PropagateNan.NONE): ...
@builtin
def abs(x): ...
@builtin
def exp(x): ...
@builtin
def exp2(x): ...
@builtin
def log(x): ...
@builtin
def log2(x): ...
@builtin
def sqrt(x): ...
@builtin
def sqrt_rn(x): ...
@builtin
def rsqrt(x): ...
@builtin
def sin(x): ...
@builtin
def cos(x): ...
@builtin
def floor(x): ...
@builtin
def ceil(x): ...
@builtin
def erf(x): ...
@builtin
def sigmoid(x): ...
@builtin
def softmax(x, ieee_rounding=False): ...
@builtin
def fdiv(x, y, ieee_rounding=False): ...
@builtin
def div_rn(x, y): ...
@builtin
def fma(x, y, z): ...
@builtin
def umulhi(x, y): ...
@builtin
def extern_elementwise(lib_name, lib_path, args, arg_type_symbol_dict, is_pure): ...
@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack): ...
@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False): ...

# --- reductions and scans -------------------------------------------------------------------
@builtin
def sum(input, axis=None, keep_dims=False, dtype=None): ...
@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...
@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...
@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False): ...
@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False): ...
@builtin
def xor_sum(input, axis=None, keep_dims=False): ...
@builtin
def cumsum(input, axis=0, reverse=False, dtype=None): ...
@builtin
def cumprod(input, axis=0, reverse=False, dtype=None): ...
@builtin
def reduce(input, axis, combine_fn, keep_dims=False): ...
@builtin
def associative_scan(input, axis, combine_fn, reverse=False): ...
@builtin
def map_elementwise(scalar_fn, *args, pack=1): ...
@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, lhs_k_pack=True,
               rhs_k_pack=True, out_dtype=None): ...  # out_dtype None: tl.float32

# --- memory ---------------------------------------------------------------------------------
@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False): ...
@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""): ...
@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None): ...
@builtin
def debug_barrier(): ...
@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order): ...
@must_use_result("Note that tl.advance does not have any side effects. To move the block pointer, you need to "
                 "assign the result of tl.advance to a variable.")
@builtin
def advance(base, offsets): ...
@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"): ...
# tensor descriptors: the functional interface, and the type for isinstance in kernel code
@builtin
def load_tensor_descriptor(desc, offsets): ...
@builtin
def store_tensor_descriptor(desc, offsets, value): ...


class tensor_descriptor_base:
    """The type of tensor descriptors inside a kernel (`isinstance(d, tl.tensor_descriptor)`)."""


class tensor_descriptor(tensor_descriptor_base):
    """A descriptor made in the kernel (`tl.make_tensor_descriptor`) or passed from the host."""


@builtin
def multiple_of(input, values): ...
@builtin
def max_contiguous(input, values): ...
@builtin
def max_constancy(input, values): ...

# --- matrix ---------------------------------------------------------------------------------
@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=None): ...

# --- loops (used as iterators in `for` statements) ------------------------------------------
class range:
    """`for i in tl.range(lo, hi, step, num_stages=...)`: a loop the compiler may pipeline.

    num_stages sets the pipeline depth of a loop that feeds tensor-core dots. warp_specialize=True
    (a constexpr: tutorial 09's WARP_SPECIALIZE, which an autotuner Config or blocktune's tuner can
    search like any meta-parameter) splits a wgmma loop fed by TMA descriptor loads on sm_90 into a
    producer warpgroup that issues the copies and the num_warps consumer warps that run the dots
    (compiler/backend/warp_specialize.py; the launch gets 4 more warps); on a loop around such
    loops (tutorial 09's loop over tiles) it marks the loops inside. Elsewhere, and in interpret
    mode, the loop runs as without it. knobs.codegen.warp_specialize (BLOCKTUNE_WARP_SPECIALIZE=1)
    marks every loop. disable_licm=True asks LLVM not to hoist loop-invariant code out of the loop
    (`llvm.licm.disable`, as Triton). The other arguments are Triton's scheduling hints and are
    accepted without effect: loop_unroll_factor, disallow_acc_multi_buffer, flatten."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False, disable_licm=False):
        raise RuntimeError("tl.range can only be used inside a @jit kernel")


class condition:
    """`while tl.condition(c, disable_licm=True):` — a while loop's condition with loop options
    (Triton's). disable_licm asks LLVM not to hoist loop-invariant code out of the loop (shorter
    live ranges); the loop computes the same either way."""

    def __init__(self, arg1, disable_licm=False):
        self.condition = arg1
        self.disable_licm = disable_licm


class static_range:
    """`for i in tl.static_range(...)`: unrolled at compile time; bounds must be constexpr."""

    def __init__(self, arg1, arg2=None, step=None):
        raise RuntimeError("tl.static_range can only be used inside a @jit kernel")


# --- tuples ---------------------------------------------------------------------------------
class tuple(builtins.tuple):  # noqa: A001 - Triton's name
    """`tl.tuple(iterable)`: a tuple of kernel values. In a kernel it is a plain tuple (compared,
    concatenated, indexed with constexprs, unpacked, passed to and returned from @jit functions);
    on the host it is a tuple that a kernel takes as a tuple argument."""
