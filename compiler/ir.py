"""Block IR: typed SSA over block values with structured control flow.

Every backend (the numpy interpreter, the NVPTX code generator) consumes this and nothing else.
A `Function` holds one `Block`; an `Op` has operands (Values, or None for an absent optional
operand), results, attributes and, for control flow, nested regions (each a `Block`).

Types come from `compiler.language.dtypes`: a scalar `dtype`, a `pointer_type`, or a `block_type`
(shape of powers of two × scalar). Shapes never change at run time.

The op set (operand names in order; `?` marks an optional operand that may be None):

  const                 → r        attrs: value (python int/float/bool); r is scalar or splat block
  arange                → r        attrs: start, end                      r: block<i32>[end-start]
  program_id            → r        attrs: axis                            r: i32
  num_programs          → r        attrs: axis                            r: i32
  splat      x          → r        scalar → block of r's shape
  broadcast  x          → r        block → block; size-1 dims grow to r's shape
  expand_dims x         → r        attrs: axis (a size-1 dim is inserted there)
  reshape    x          → r        attrs: can_reorder; row-major element order is kept
  trans      x          → r        attrs: perm (tuple)
  join       a, b       → r        a, b of one type; r = their values side by side in a new minor
                                   dim of size 2 (r[..., 0] = a, r[..., 1] = b)
  split      x          → r0, r1   x's last dim has size 2; r0 = x[..., 0], r1 = x[..., 1]
  gather     src, index → r        attrs: axis; index (integers) has src's rank and src's size in
                                   every other dim; r (index's shape, src's type) = src with the
                                   `axis` coordinate replaced by index's element (out of range: the
                                   interpreter raises, the GPU wraps it modulo the dim)
  flip       x          → r        attrs: dim; x reversed along dim
  sort       x          → r        attrs: dim, descending; NaN sorts above every number
  histogram  x, mask?   → r        attrs: num_bins; x 1-D integers; r: i32[num_bins], the count of
                                   each value 0 … num_bins-1 among x (where mask); others ignored
  cast       x          → r        numeric conversion to r's element type (float→int truncates,
                                   int→bool is x != 0, ptr↔int reinterprets the address)
  bitcast    x          → r        same bit width, reinterpret
  <binary>   a, b       → r        a, b, r have one type (the front end inserts casts/broadcasts):
                                   add sub mul fdiv (float /) div (int, truncating) rem (int: C
                                   remainder, float: fmod) and or xor shl shr (arithmetic for signed,
                                   logical for unsigned) maximum minimum (NaN-ignoring, like fmax)
                                   maximum_nan minimum_nan (NaN-propagating)
  cmp        a, b       → r        attrs: pred in eq ne lt le gt ge; r has element type i1
  <unary>    x          → r        neg not (bitwise invert; logical not on i1) abs exp exp2 log log2
                                   sqrt rsqrt sin cos floor ceil erf tanh; float ops also take
                                   attrs: fast (bool) — backends may use approximate instructions
  fma        a, b, c    → r        a*b+c, one rounding
  umulhi     a, b       → r        high half of the unsigned double-width product
  extern_elementwise *args → r     attrs: symbol (a libdevice function, `__nv_*`); elementwise,
                                   args have r's shape and the symbol's argument types
  inline_asm *args      → *r       attrs: asm, constraints, pure, pack; PTX inline assembly per
                                   element (per `pack` elements); args and results share a shape
  select     c, a, b    → r        c is i1 (same shape), a and b have r's type
  addptr     p, off     → r        p + off * sizeof(element); off is an integer of p's shape
  load       p, mask?, other? → r  attrs: cache, eviction, volatile; `other` has r's type
  store      p, v, mask?           attrs: cache, eviction; v has p's element type
  atomic_rmw p, v, mask? → r       attrs: kind in add max min xchg and or xor; sem; scope
                                   r = old values (same shape as v)
  atomic_cas p, cmp, v  → r        r = old values
  reduce     x          → r        attrs: axis, kind in sum max min argmax argmin xor_sum;
                                   r drops `axis` from x's shape (scalar if x was 1-D);
                                   argmax/argmin give i32 indices (first occurrence on ties);
                                   attrs: tie_break_left
  scan       x          → r        attrs: axis, kind in sum prod max min, reverse
  reduce_combine *xs    → *rs      tl.reduce with a @jit combine: xs of one shape, rs drop `axis`;
                                   attrs: axis; region combine(*a, *b) (scalars) ends with yield(*r)
  scan_combine *xs      → *rs      tl.associative_scan: rs of xs's types; attrs: axis, reverse;
                                   region combine(*a, *b) ends with yield(*r) (a: the earlier elements)
  map_elementwise *xs   → *rs      tl.map_elementwise: xs of one shape, rs of that shape; attrs: pack;
                                   region fn(x0[0..pack), x1[0..pack), ...) (scalars) ends with
                                   yield(r0[0..pack), r1[0..pack), ...): pack consecutive elements per call
  dot        a, b, c    → r        r = a @ b + c; a [M,K], b [K,N], c/r [M,N]; attrs:
                                   input_precision in ieee tf32 tf32x3, max_num_imprecise_acc
  barrier                          all threads of the program meet here
  assume     x          → r        r is x; attrs: multiple_of (tuple|None), max_contiguous (tuple|None)
  for        lb, ub, step, *init → *r   region body(iv, *iter) ends with yield(*next); iv takes
                                   lb, lb+step, … while iv < ub (step > 0; the front end rewrites
                                   negative constant steps); attrs: num_stages (None or int)
  if         cond       → *r       regions then, else; each ends with yield(*r)
  while      *init      → *r       region before(*args) ends with condition(c, *fwd);
                                   region after(*fwd) ends with yield(*next_args)
  yield      *vals
  condition  c, *vals
  return
  print      *vals                 attrs: prefix (device_print; interpreter prints, GPU ignores)
  assert     c                     attrs: message (device_assert)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from .language.dtypes import block_type, dtype, pointer_type, scalar_of, shape_of, to_signature

BINARY_OPS = ("add", "sub", "mul", "fdiv", "div", "rem", "and", "or", "xor", "shl", "shr",
              "maximum", "minimum", "maximum_nan", "minimum_nan")
UNARY_OPS = ("neg", "not", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
             "floor", "ceil", "erf", "tanh")
CMP_PREDS = ("eq", "ne", "lt", "le", "gt", "ge")
REDUCE_KINDS = ("sum", "max", "min", "argmax", "argmin", "xor_sum")
SCAN_KINDS = ("sum", "prod", "max", "min")
ATOMIC_KINDS = ("add", "max", "min", "xchg", "and", "or", "xor")
TERMINATORS = ("yield", "condition", "return")


@dataclass(frozen=True)
class Loc:
    """Where in the user's source an op came from (1-based line, 0-based column, as `ast`)."""
    file: str
    line: int
    col: int
    fn: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


UNKNOWN_LOC = Loc("<unknown>", 0, 0)
_ids = itertools.count()


class Value:
    """An SSA value: the result of an op or an argument of a block."""

    __slots__ = ("type", "owner", "index", "name", "id")

    def __init__(self, type, owner=None, index: int = 0, name: str | None = None):
        self.type, self.owner, self.index, self.name = type, owner, index, name
        self.id = next(_ids)

    @property
    def shape(self) -> tuple:
        return shape_of(self.type)

    @property
    def dtype(self) -> dtype:
        return scalar_of(self.type)

    @property
    def is_block(self) -> bool:
        return isinstance(self.type, block_type)

    def __repr__(self) -> str:
        return f"%{self.name or self.id}: {type_text(self.type)}"


class Block:
    """A straight-line list of ops with block arguments (loop-carried values, region inputs)."""

    def __init__(self, arg_types=(), arg_names=()):
        names = list(arg_names) + [None] * (len(arg_types) - len(arg_names))
        self.args: list[Value] = [Value(t, None, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.ops: list[Op] = []

    def add_arg(self, type, name=None) -> Value:
        v = Value(type, None, len(self.args), name)
        self.args.append(v)
        return v

    @property
    def terminator(self) -> "Op | None":
        return self.ops[-1] if self.ops and self.ops[-1].name in TERMINATORS else None

    def walk(self) -> Iterator["Op"]:
        """Every op in this block and its nested regions, pre-order."""
        for op in self.ops:
            yield op
            for r in op.regions:
                yield from r.walk()


class Op:
    __slots__ = ("name", "operands", "results", "attrs", "regions", "loc")

    def __init__(self, name: str, operands=(), result_types=(), attrs=None, regions=(), loc: Loc = UNKNOWN_LOC):
        self.name = name
        self.operands: list[Value | None] = list(operands)
        self.results: list[Value] = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions: list[Block] = list(regions)
        self.loc = loc

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Op {self.name} at {self.loc}>"


@dataclass
class Function:
    """A kernel after specialization: arguments are the runtime (non-constexpr) parameters."""
    name: str
    arg_names: list[str]
    arg_types: list[Any]
    body: Block
    # Per runtime argument: facts known at compile time through specialization.
    #   "divisibility": 16 when the pointer/int is known divisible by 16 (bytes for pointers), else 1
    #   "equal_to_1": True for an int argument specialized to the constant 1 (then not passed)
    arg_attrs: list[dict] = field(default_factory=list)
    constexprs: dict = field(default_factory=dict)
    loc: Loc = UNKNOWN_LOC
    # ops dead-code elimination dropped: the backend still refuses what it cannot compile among
    # them (an unused `tl.dot` of fp8e4b8 is an error on the GPU, as in Triton)
    dropped_ops: list = field(default_factory=list)
    # CompilationErrors of what the front end accepts for interpret mode but Triton's compiler
    # refuses (a noinline @jit function called with a block): the backend raises the first
    gpu_refusals: list = field(default_factory=list)
    # the noinline @jit functions its `call` ops name (attrs["callee"]), each compiled as a device
    # function of its own on the GPU (frontend/device_calls.py)
    device_functions: dict = field(default_factory=dict)
    result_types: list = field(default_factory=list)   # what a device function returns (scalars)

    def walk_with_dropped(self) -> Iterator[Op]:
        """walk(), then the dropped ops and their regions."""
        yield from self.walk()
        for op in self.dropped_ops:
            yield op
            for r in op.regions:
                yield from r.walk()

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def __str__(self) -> str:
        return print_function(self)


# ---------------------------------------------------------------------------------------------
# Printing: stable, readable text that tests can compare.

def type_text(t) -> str:
    """A type as the IR prints it: signature spellings ("i32", "*fp16", "<128xu8>")."""
    return to_signature(t) if isinstance(t, dtype) else str(t)


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dtype, block_type)):
        return type_text(v)
    return repr(v)


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, v: Value | None) -> str:
        if v is None:
            return "_"
        if v.id not in self.names:
            self.names[v.id] = f"%{v.name}" if v.name and not v.name.isdigit() and f"%{v.name}" not in self.names.values() else f"%{len(self.names)}"
        return self.names[v.id]


def print_function(fn: Function, device_functions: bool = True) -> str:
    """The function's text, then (`device_functions`) that of the device functions it calls."""
    n = _Namer()
    args = ", ".join(f"{n(a)}: {type_text(a.type)}" + (f" {{{', '.join(f'{k}={v}' for k, v in attrs.items() if v not in (1, False, None))}}}" if any(v not in (1, False, None) for v in attrs.values()) else "")
                     for a, attrs in zip(fn.args, fn.arg_attrs or [{}] * len(fn.args)))
    lines = [f"func @{fn.name}({args}) {{"]
    _print_block(fn.body, n, lines, "  ")
    lines.append("}")
    if device_functions:   # the kernel's device functions (one table for the kernel and them all)
        for callee in fn.device_functions.values():
            if isinstance(callee, Function):
                lines += ["", print_function(callee, device_functions=False)]
    return "\n".join(lines)


def _print_block(block: Block, n: _Namer, lines: list, indent: str):
    for op in block.ops:
        res = ", ".join(n(r) for r in op.results)
        head = f"{res} = " if res else ""
        ops = ", ".join(n(o) for o in op.operands)
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in op.attrs.items())
        types = ", ".join(type_text(r.type) for r in op.results)
        text = f"{indent}{head}{op.name}({ops})" + (f" {{{attrs}}}" if attrs else "") + (f" : {types}" if types else "")
        if op.regions:
            lines.append(text + " {")
            for i, region in enumerate(op.regions):
                if i:
                    lines.append(f"{indent}}} {{")
                if region.args:
                    lines.append(f"{indent}  ^({', '.join(f'{n(a)}: {type_text(a.type)}' for a in region.args)}):")
                _print_block(region, n, lines, indent + "  ")
            lines.append(f"{indent}}}")
        else:
            lines.append(text)


# ---------------------------------------------------------------------------------------------
# Small helpers used by passes and backends.

SIDE_EFFECTS = {"call", "store", "atomic_rmw", "atomic_cas", "barrier", "print", "assert", "return", "yield",
                "condition", "for", "if", "while", "load", "tma_store"}


def inline_asm_elements_per_register(dt, pack: int) -> int:
    """Triton's packing of `tl.inline_asm_elementwise` operands and results: each instance gets
    pack / k registers of k elements, k = min(pack, max(1, 32 // bits)) (four uint8 share one
    32-bit register; four int32 are four)."""
    bits = 64 if dt.is_ptr() else dt.primitive_bitwidth
    return min(pack, max(1, 32 // bits))


def has_effect(op: "Op") -> bool:
    """Whether running the op can be observed beyond its results (a non-volatile load's only effect
    is a possible fault, which dropping it when unused avoids); inline asm declared impure counts."""
    if op.name == "load":
        return bool(op.attrs.get("volatile"))
    return op.name in SIDE_EFFECTS or (op.name == "inline_asm" and not op.attrs.get("pure"))


def eliminate_dead_code(fn: "Function") -> list:
    """Drop ops whose results nobody uses and that have no effect (repeat until nothing changes);
    returns the dropped ops."""
    dropped: list = []
    while True:
        used = {o.id for op in fn.walk() for o in op.operands if o is not None}
        removed = 0

        def sweep(block: Block):
            nonlocal removed
            keep = []
            for op in block.ops:
                for r in op.regions:
                    sweep(r)
                if not has_effect(op) and op.results and not any(r.id in used for r in op.results):
                    removed += 1
                    dropped.append(op)
                    continue
                keep.append(op)
            block.ops = keep
        sweep(fn.body)
        if not removed:
            return dropped

def uses(fn: Function) -> dict[int, list[Op]]:
    """Value id → the ops that use it."""
    table: dict[int, list[Op]] = {}
    for op in fn.walk():
        for o in op.operands:
            if o is not None:
                table.setdefault(o.id, []).append(op)
    return table


def print_text(prefix: str, n_operands: int) -> str:
    """The text a `print` op puts between `idx (...)` and each value, as Triton writes it: a prefix
    followed by values ends in ": " (shared by the interpreter and the GPU lowering)."""
    prefix = str(prefix)
    if n_operands:
        if not prefix.endswith(" "):
            prefix += " "
        if not prefix.endswith(": "):
            prefix = prefix[:-1] + ": "
    prefix = prefix.strip()
    return ("" if prefix.startswith(":") else " ") + prefix + " " if prefix else " "


def is_pointer(ty) -> bool:
    return isinstance(scalar_of(ty), pointer_type)
