"""The lowering state of the NVPTX backend, below its rules: `Lowering` and the `RuleTable` it runs.

Every block value is lowered to a Python list of llvmlite values, one per register the thread
owns in the value's layout (layouts.py) — Triton's "struct of values". Scalars are single llvmlite
values, uniform across the threads of the program.

A `RuleTable` maps op names to rules (nvptx.py builds it). Rules in `by_layout` take the wanted
output layout and return the register list (or the scalar): the lowering may then recompute cheap
values (arange/splat/const chains, `REMAT_OPS`) in a second layout instead of converting them
through shared memory. Rules in `statements` set their results themselves.

`Lowering(fn, options, rules)` holds the module and builders, the value table, region scopes, the
thread-index arithmetic, shared-memory layout conversions, and the structured-control-flow helpers
(slots, regions, counted loops) that the `for`/`if`/`while` rules and the pipeline share.

Names used throughout the rules: `lw` is the Lowering, `b` its builder (`lw.b`; `lw.pb` builds in
the entry block), `lay` a Layout; `tv, tm` are a thread's part of an offset (an i32 value, or None)
and the mask of bits that part can set (`linear`, `combine_const`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from llvmlite import ir as ll

from .. import ir
from . import fragment_convert
from ..language import dtypes as T
from . import f16_accumulator, fp8
from .assign_layouts import LayoutAssignment
from .axis_info import AxisAnalysis
from .debug_info import LineInfo
from .errors import BackendError
from .layouts import Layout, default_layout, log2
from .llvm_target import libdevice_path
from .llvm_types import F16, F32, GPTR, I8, I16, I32, I64, SPTR, esize, lty, mty
from .options import LoweringOptions

# ops whose lowering takes the wanted output layout and may be recomputed in another layout
REMAT_OPS = {"const", "arange", "splat", "broadcast", "expand_dims", "trans", "reshape", "addptr", "add", "sub",
             "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "cmp", "select", "cast", "maximum", "minimum",
             "assume", "not", "neg"}


# ops that only rearrange their one block operand: made again in another layout from the operand
# in the matching one
RESHAPING_OPS = {"expand_dims", "broadcast", "trans", "reshape"}

# a layout conversion through shared memory moves at most this many bytes at a time
CONVERT_CHUNK_BYTES = 32 * 1024
# the dynamic shared memory a CTA may have on sm_90 (227 KiB)
SMEM_LIMIT = 227 * 1024

# a loop-invariant value converted inside a loop is converted once before it (LoopHoist) when the
# converted copy takes at most this many registers a thread (it stays live through the loop)
HOIST_MAX_REGS = 16


def _register_only_bit(a: Layout, b: Layout, j: int) -> bool:
    """Row-major offset bit j comes from one register bit alone in both layouts."""
    m = 1 << j
    for lay in (a, b):
        if any(lay.flat(x) & m for x in lay.lane + lay.warp):
            return False
        flats = [lay.flat(x) for x in lay.reg]
        if sum(1 for f in flats if f & m) != 1 or m not in flats:
            return False
    return True


def _gather_bits(x: int, bits) -> int:
    """The bits of x at positions `bits` (descending), packed: bits[0] is the top one."""
    v = 0
    for j in bits:
        v = (v << 1) | (x >> j & 1)
    return v


def _remove_bits(x: int, bits) -> int:
    """x with the positions `bits` taken out (the bits above each move down)."""
    for j in sorted(bits, reverse=True):
        x = (x & ((1 << j) - 1)) | ((x >> (j + 1)) << j)
    return x


def _chunk_pad_shift(pad_shift, bits):
    """A padded scratch buffer's (row shift, pad) for one chunk: its rows lose the chunk bits below
    the row shift."""
    if pad_shift is None:
        return None
    shift, pad = pad_shift
    return shift - sum(1 for j in bits if j < shift), pad


def _scratch_bytes(numel: int, es: int, pad_shift, bits) -> int:
    """The bytes of a conversion's scratch buffer that holds one chunk of `bits`."""
    n = numel >> len(bits)
    if pad_shift is None:
        return n * es
    shift, pad = _chunk_pad_shift(pad_shift, bits)
    return (n + (n >> shift) * pad) * es


def _first_dim(lay: Layout):
    """The dim a thread's consecutive registers (else its neighbour lanes) run along."""
    for bb in lay.reg + lay.lane:
        nz = [d for d, x in enumerate(bb) if x]
        if nz:
            return nz[0]
    return None


@dataclass(frozen=True)
class LoopHoist:
    """Where an open loop's invariant layout conversions go: `builder` sits before the branch that
    ends a block ahead of the loop (its pipeline prologue, its phis), `inside` holds the ids of
    every value the loop body defines, `depth` indexes the scope open at the loop, which keeps the
    converted registers for the loop and what follows it."""
    builder: ll.IRBuilder
    inside: frozenset
    depth: int


@dataclass(frozen=True)
class RuleTable:
    by_layout: Mapping[str, Callable]     # op → rule(lw, op, layout | None) -> registers | scalar
    statements: Mapping[str, Callable]    # op → rule(lw, op) -> None (it sets its results)

    def names(self) -> set[str]:
        return set(self.by_layout) | set(self.statements)


class Lowering:
    """The state of one kernel's lowering: the LLVM module and builders, every IR value's registers
    (in its layout), the open region scopes, and what the kernel needs (shared memory, sm_90a).
    The rules (the `RuleTable`) read and extend it; `run()` lowers the whole function."""

    def __init__(self, fn: ir.Function, options: LoweringOptions, rules: "RuleTable", parent: "Lowering | None" = None,
                 parent_return_type=None):
        """`parent`: the kernel's lowering, when `fn` is one of its device functions (device_calls.py),
        lowered into the kernel's module as a function of its own; `parent_return_type(fn)`: its
        LLVM return type."""
        self.parent_return_type = parent_return_type
        self.fn, self.options, self.rules = fn, options, rules
        self.parent = parent
        self.num_warps = options.num_warps
        self.axis = AxisAnalysis(fn)
        self.assign = LayoutAssignment(fn, options, self.axis)
        self.uses = ir.uses(fn)
        self.module = ll.Module(name=fn.name) if parent is None else parent.module
        # what the kernel needs, found while lowering
        self._smem_total = 0                    # dynamic shared memory (see smem_bytes)
        # bytes at the start of shared memory held by tiles that live across a loop (dot.py's
        # pinned operands): while they are held, every other use starts after them
        self.smem_reserved = 0
        self.pinned_tiles: dict = {}            # (dot op id, operand index) → SmemTile (absolute base)
        self.kernel_pins: dict = {}             # value id → SmemTile of a pinned kernel-level value
        self.kernel_pins_end = 0                # those stay reserved up to here until the kernel ends
        self.needs_sm90a = False                # wgmma (wgmma.py)
        self.stages_past_margin = False         # a loop took stages options.smem_margin kept free (multi_dot.py)
        self.pending_tma_waits: list = []       # mbarriers of pinned blocks still landing (pinned_tma.py)
        self.ws = None                          # warp_specialize.State: a producer warpgroup runs beside
        self.defer_store_wait = False           # TMA stores leave their read in flight (persistent.py)
        self.params = []                        # the ABI of each passed parameter
        self.tensor_map_params: list[int] = []  # indices of the CUtensorMap parameters (tma.py)
        self.strings: dict[str, ll.GlobalVariable] = {}    # printf formats (debug_ops.py)
        self.vals: dict[int, object] = {}     # value id → llvm value (scalar) or (Layout, [regs])
        self.scopes: list[dict] = [{}]          # (value id, layout) → regs; one dict per open region
        self.hoists: list[LoopHoist] = []       # the open loops, outermost first
        # value id → (tile, i32 byte offset): a block that sits in shared memory for as long as it
        # lives (a pipelined loop's stage), read in any layout asked for (bind_smem_block)
        self.smem_backed: dict[int, tuple] = {}
        self._intrinsics: dict[str, ll.Function] = {} if parent is None else parent._intrinsics
        self.device_funcs: dict = {} if parent is None else parent.device_funcs   # (name, smem base) → ll.Function
        if parent is not None:
            self.strings = parent.strings
        self._tl_cache: dict = {}
        self._build_signature()

    # ------------------------------------------------------------------------------------------
    # module, signature, prologue
    def _build_signature(self):
        fn = self.fn
        ptys, passed = [], []
        for i, (a, t) in enumerate(zip(fn.args, fn.arg_types)):
            attrs = fn.arg_attrs[i] if i < len(fn.arg_attrs) else {}
            if attrs.get("equal_to_1"):
                continue
            if attrs.get("tensor_map"):   # a CUtensorMap, by value (nvptx.module_text marks it)
                pt, abi = ll.PointerType(), "tmap"
                self.tensor_map_params.append(len(ptys))
            elif t.is_ptr():
                pt, abi = GPTR, "ptr"
            elif t.name == "int1":
                pt, abi = I32, "i32"
            elif t.name in ("fp16", "bf16"):
                pt, abi = I16, "b16"
            else:
                pt = lty(t)
                abi = {"fp32": "f32", "fp64": "f64"}.get(t.name, f"i{t.primitive_bitwidth}")
            ptys.append(pt)
            passed.append((i, a, t))
            self.params.append({"name": fn.arg_names[i] if i < len(fn.arg_names) else f"arg{i}",
                                "type": "tmap" if abi == "tmap" else T.to_signature(t), "abi": abi})
        ret = ll.VoidType() if self.parent is None else self.parent_return_type(fn)
        self.func = ll.Function(self.module, ll.FunctionType(ret, ptys), name=fn.name)
        if self.parent is None:
            self.func.calling_convention = "ptx_kernel"
        else:   # a device function: a .func of its own, as Triton's noinline functions
            self.func.linkage = "internal"
            self.func.attributes.add("noinline")
        entry = self.func.append_basic_block("entry")
        body = self.func.append_basic_block("body")
        self.pb = ll.IRBuilder(entry)
        br = self.pb.branch(body)
        self.pb.position_before(br)
        self.b = ll.IRBuilder(body)
        # source lines for the PTX's .loc (TRITON_DISABLE_LINE_INFO=1 leaves them out)
        self.line_info = None
        if self.options.line_info:
            self.line_info = LineInfo(self.module, self.func, fn, None if self.parent is None else self.parent.line_info)
        if self.line_info is not None:
            self.pb.debug_metadata = self.b.debug_metadata = self.line_info.entry
        for k, (i, a, t) in enumerate(passed):
            p = self.func.args[k]
            p.name = (fn.arg_names[i] if i < len(fn.arg_names) else f"arg{i}").replace(".", "_")
            if t.is_ptr():
                v = p
            elif t.name == "int1":
                v = self.pb.icmp_unsigned("!=", p, ll.Constant(I32, 0))
            elif t.name in ("fp16", "bf16"):
                v = self.pb.bitcast(p, lty(t))
            else:
                v = p
            self.vals[a.id] = v
        for i, (a, t) in enumerate(zip(fn.args, fn.arg_types)):
            attrs = fn.arg_attrs[i] if i < len(fn.arg_attrs) else {}
            if attrs.get("equal_to_1"):
                self.vals[a.id] = ll.Constant(lty(t), 1)
        tid = self.call("llvm.nvvm.read.ptx.sreg.tid.x", I32, [], pb=True)
        self.lane = self.pb.and_(tid, ll.Constant(I32, 31), name="lane")
        self.warp = self.pb.lshr(tid, ll.Constant(I32, 5), name="warp")
        self.tid = tid
        self.func.attributes.add("nounwind")

    def has_libdevice(self) -> bool:
        return libdevice_path() is not None

    def libdevice_functions(self) -> list[str]:
        """The libdevice functions (`__nv_*`) the kernel calls, whose definitions module_text adds."""
        return sorted(n for n in self._intrinsics if n.startswith("__nv_"))

    def intrinsic(self, name: str, ret: ll.Type, args: list) -> ll.Function:
        f = self._intrinsics.get(name)
        if f is None:
            f = ll.Function(self.module, ll.FunctionType(ret, args), name=name)
            self._intrinsics[name] = f
        return f

    def call(self, name, ret, args, pb=False):
        b = self.pb if pb else self.b
        f = self.intrinsic(name, ret, [a.type for a in args])
        return b.call(f, args)

    @property
    def smem(self):
        g = self.module.globals.get("global_smem")
        if g is None:
            g = ll.GlobalVariable(self.module, ll.ArrayType(I8, 0), "global_smem", addrspace=3)
            g.linkage = "external"
            g.align = 16
            g.type = SPTR  # opaque pointer (llvmlite would type it [0 x i8]*)
        return g

    def smem_ptr(self, byte_off):
        if self.smem_reserved:
            byte_off = self.b.add(byte_off, ll.Constant(I32, self.smem_reserved))
        return self.b.gep(self.smem, [byte_off], inbounds=True, source_etype=I8)

    @property
    def smem_bytes(self) -> int:
        """Shared memory used, counted from the first byte past the reserved tiles (the rules
        write `lw.smem_bytes = max(lw.smem_bytes, their end)` with offsets from there)."""
        return self._smem_total - self.smem_reserved

    @smem_bytes.setter
    def smem_bytes(self, end: int):
        self._smem_total = max(self._smem_total, end + self.smem_reserved)

    @property
    def smem_total(self) -> int:
        """The dynamic shared memory the kernel needs, reserved tiles included (what it is launched with)."""
        return self._smem_total

    def barrier(self):
        if self.ws is not None:   # the producer warpgroup (warp_specialize.py) does not take part
            self.call("llvm.nvvm.barrier.cta.sync.aligned.count", ll.VoidType(),
                      [ll.Constant(I32, 0), ll.Constant(I32, self.ws.consumer_threads)])
            return
        self.call("llvm.nvvm.barrier.cta.sync.aligned.all", ll.VoidType(), [ll.Constant(I32, 0)])

    # ------------------------------------------------------------------------------------------
    # thread-index arithmetic (computed once in the entry block)
    def linear(self, lane_vals: tuple, warp_vals: tuple):
        """XOR over lane/warp bits of the given per-bit constants → (llvm i32 | None, bit mask)."""
        key = (lane_vals, warp_vals)
        if key in self._tl_cache:
            return self._tl_cache[key]
        pb = self.pb
        terms = []
        for src, vals in ((self.lane, lane_vals), (self.warp, warp_vals)):
            i = 0
            while i < len(vals):
                v0 = vals[i]
                if v0 == 0:
                    i += 1
                    continue
                if v0 & (v0 - 1) == 0:
                    j = i + 1
                    while j < len(vals) and vals[j] == v0 << (j - i):
                        j += 1
                    n, k0 = j - i, log2(v0)
                    t = pb.lshr(src, ll.Constant(I32, i)) if i else src
                    t = pb.and_(t, ll.Constant(I32, (1 << n) - 1))
                    if k0:
                        t = pb.shl(t, ll.Constant(I32, k0))
                    terms.append((t, ((1 << n) - 1) << k0))
                    i = j
                else:
                    t = pb.and_(pb.lshr(src, ll.Constant(I32, i)) if i else src, ll.Constant(I32, 1))
                    t = pb.mul(t, ll.Constant(I32, v0))
                    terms.append((t, v0))   # 0 or v0: exactly v0's bits (a constant added later stays an add)
                    i += 1
        if not terms:
            res = (None, 0)
        else:
            acc, mask = terms[0]
            for t, m in terms[1:]:
                acc = pb.or_(acc, t) if not (mask & m) else pb.xor(acc, t)
                mask |= m
            res = (acc, mask)
        self._tl_cache[key] = res
        return res

    def thread_flat(self, lay: Layout):
        return self.linear(tuple(lay.flat(b) for b in lay.lane), tuple(lay.flat(b) for b in lay.warp))

    def thread_coord(self, lay: Layout, d: int):
        return self.linear(tuple(b[d] for b in lay.lane), tuple(b[d] for b in lay.warp))

    def combine_const(self, tv, tmask: int, c: int, b=None):
        """thread part (xor) constant → i32."""
        b = b or self.b
        if tv is None:
            return ll.Constant(I32, c)
        if c == 0:
            return tv
        if c & tmask == 0:
            return b.add(tv, ll.Constant(I32, c))
        return b.xor(tv, ll.Constant(I32, c))

    def index(self, lay: Layout, d: int, r: int):
        tv, m = self.thread_coord(lay, d)
        return self.combine_const(tv, m, lay.reg_coord(r)[d])

    def owner_pred(self, lay: Layout | None):
        """i1: this thread is the first holder of its elements (None: every thread owns)."""
        if lay is None:
            zl, zw = 31, self.num_warps - 1
        else:
            zl = sum(1 << i for i, b in enumerate(lay.lane) if not any(b))
            zw = sum(1 << i for i, b in enumerate(lay.warp) if not any(b))
        if not zl and not zw:
            return None
        key = ("owner", zl, zw)
        if key in self._tl_cache:
            return self._tl_cache[key]
        pb = self.pb
        m = pb.or_(pb.and_(self.lane, ll.Constant(I32, zl)), pb.shl(pb.and_(self.warp, ll.Constant(I32, zw)), ll.Constant(I32, 5)))
        p = pb.icmp_unsigned("==", m, ll.Constant(I32, 0))
        self._tl_cache[key] = p
        return p

    # ------------------------------------------------------------------------------------------
    # values
    def scalar(self, v: ir.Value):
        x = self.vals[v.id]
        assert not isinstance(x, tuple), f"{v} is a block"
        return x

    def layout_of(self, v: ir.Value) -> Layout:
        return self.vals[v.id][0]

    def set_block(self, v: ir.Value, lay: Layout, regs: list):
        assert len(regs) == lay.n_regs, (v, len(regs), lay)
        self.vals[v.id] = (lay, regs)

    def want(self, v: ir.Value) -> Layout:
        lay = self.assign.get(v)
        if lay is None:
            lay = default_layout(v.shape, self.num_warps)
        return lay

    def block(self, v: ir.Value, lay: Layout) -> list:
        """v's registers in layout `lay` (splatting scalars, converting or rematerializing)."""
        x = self.vals[v.id]
        if not isinstance(x, tuple):
            return [x] * lay.n_regs
        have, regs = x
        if have == lay:
            return regs
        key = (v.id, lay)
        for s in reversed(self.scopes):
            if key in s:
                return s[key]
        out = self._remap(regs, have, lay)  # same threads, registers reordered: free
        if out is None and v.id in self.smem_backed:
            out = self._read_backed(v, lay)
        if out is None and v.owner is not None and self._rematerializable(v, 6):
            out = self.rules.by_layout[v.owner.name](self, v.owner, lay)
        if out is None:
            hoist = self._hoist_for(v, lay)
            if hoist is not None:
                # a conversion costs barriers and shared-memory traffic that LLVM cannot move out
                # of the loop (e.g. attention's row statistics broadcast per key block): once, before it
                saved, self.b = self.b, hoist.builder
                try:
                    out = self.convert(regs, have, lay, v.dtype)
                finally:
                    self.b = saved
                self.scopes[hoist.depth][key] = out
                return out
            out = self.convert(regs, have, lay, v.dtype)
        self.scopes[-1][key] = out
        return out

    def _hoist_for(self, v: ir.Value, lay: Layout) -> "LoopHoist | None":
        """The outermost open loop that `v` is invariant in, when its conversion to `lay` may move
        before that loop."""
        if lay.n_regs > HOIST_MAX_REGS:
            return None
        for h in self.hoists:
            if v.id not in h.inside:
                return h
        return None

    def open_hoist(self, body: ir.Block) -> None:
        """Start a loop whose body is `body`: from here on, conversions of values it does not define
        are emitted here, ahead of it (close with close_hoist once the loop is lowered)."""
        b = self.b
        here = self.func.append_basic_block("loop.invariants")
        b.branch(here)
        b.position_at_end(here)
        nxt = self.func.append_basic_block("loop.pre")
        br = b.branch(nxt)
        b.position_at_end(nxt)
        hb = ll.IRBuilder(here)
        hb.debug_metadata = b.debug_metadata
        hb.position_before(br)
        inside = {a.id for a in body.args}
        for o in body.walk():
            inside.update(r.id for r in o.results)
            for r in o.regions:
                inside.update(a.id for a in r.args)
        self.hoists.append(LoopHoist(hb, frozenset(inside), len(self.scopes) - 1))

    def close_hoist(self) -> None:
        self.hoists.pop()

    def bind_smem_block(self, v: ir.Value, lay: Layout, tile, dyn) -> None:
        """v is the block that `tile` (a FlatTile) holds at byte offset `dyn` (i32) in shared memory,
        written and made visible to every thread before this point and left alone while v lives:
        its registers in any layout are plain shared-memory loads, no conversion."""
        self.smem_backed[v.id] = (tile, dyn)
        self.set_block(v, lay, self._read_backed(v, lay))

    def _read_backed(self, v: ir.Value, lay: Layout) -> list:
        tile, dyn = self.smem_backed[v.id]
        base = self.b.add(dyn, ll.Constant(I32, tile.base)) if tile.base else dyn
        return self.smem_read(lay, mty(v.dtype), tile.es, dyn_bytes=base)

    def _rematerializable(self, v: ir.Value, depth: int) -> bool:
        if v.id in self.smem_backed:
            return True   # read again in the layout wanted (block())
        op = v.owner
        if op is None or op.name not in REMAT_OPS or depth == 0:
            return False
        if op.name in RESHAPING_OPS and self._loop_invariant(op.operands[0]):
            return True   # its operand's conversion moves out of the loop (`Di[:, None]` in a loop)
        return all(o is None or not o.is_block or self._rematerializable(o, depth - 1) for o in op.operands)

    def _loop_invariant(self, v: ir.Value) -> bool:
        return bool(self.hoists) and v.id not in self.hoists[-1].inside

    @staticmethod
    def _remap(regs, have: Layout, want: Layout):
        if have.lane != want.lane or have.warp != want.warp:
            return None
        idx = have.reg_index_map()
        out = []
        for r in range(want.n_regs):
            j = idx.get(want.reg_coord(r))
            if j is None:
                return None
            out.append(regs[j])
        return out

    def _vec_len(self, lay: Layout, tmask: int, es: int) -> int:
        """How many consecutive registers are consecutive in row-major memory (≤16 bytes)."""
        k = 0
        while k < len(lay.reg) and lay.flat(lay.reg[k]) == 1 << k and (1 << (k + 1)) * es <= 16:
            k += 1
        v = 1 << k
        # the thread part and the other register bases must leave the low offset bits alone
        while v > 1 and (tmask & (v - 1) or any(lay.flat(b) & (v - 1) for b in lay.reg[k:])):
            v //= 2
        return v

    def convert(self, regs, have: Layout, want: Layout, dt) -> list:
        """Layout conversion through shared memory (out of a dot's accumulator: fragment_convert)."""
        if fragment_convert.applies(have, want, dt, max(CONVERT_CHUNK_BYTES, self.smem_bytes)):
            return fragment_convert.convert(self, regs, have, want, dt, fragment_convert.has_stmatrix(self.options.target))
        mt = mty(dt)
        es = 8 if dt.is_ptr() else esize(dt)
        pad_shift = None
        nbytes = have.numel() * es
        if have.rank >= 1 and have.shape[-1] > 1 and _first_dim(have) != _first_dim(want):
            # a transposing conversion: pad every row of the row-major buffer (Triton's padded
            # scratch layout) so that threads walking a column hit different banks
            row = have.shape[-1]
            vw = self._vec_len(have, self.thread_flat(have)[1], es)
            vr = self._vec_len(want, self.thread_flat(want)[1], es)
            pad = max(vw, vr, max(1, 4 // es))
            if row % pad == 0:
                pad_shift = (log2(row), pad)
                nbytes += (have.numel() // row) * pad * es
        # big tiles go through in chunks of the top row-major offset bits that both layouts keep
        # in registers (Triton converts large tiles in repetitions too): bounded scratch space
        k = 0
        total = log2(have.numel())
        while nbytes >> k > CONVERT_CHUNK_BYTES and k < total and _register_only_bit(have, want, total - 1 - k):
            k += 1
        bits = list(range(total - 1, total - 1 - k, -1))
        if nbytes >> k > SMEM_LIMIT - self.smem_reserved:
            # more than shared memory holds (a 128x128 fp64 block, its minor dim split off): lower
            # bits that both keep in registers go into the chunks too
            for j in range(total - 2 - k, -1, -1):
                if _scratch_bytes(have.numel(), es, pad_shift, bits) <= CONVERT_CHUNK_BYTES:
                    break
                if _register_only_bit(have, want, j):
                    bits.append(j)
            if len(bits) > k:
                pad_shift = _chunk_pad_shift(pad_shift, bits)
                nbytes, k = _scratch_bytes(have.numel(), es, pad_shift, bits) << len(bits), len(bits)
        self.smem_bytes = max(self.smem_bytes, nbytes >> k)
        vals = regs
        if dt.name == "int1":
            vals = [self.b.zext(x, I8) for x in regs]
        if dt.is_ptr():
            mt = I64
            vals = [self.b.ptrtoint(x, I64) for x in regs]
        if k == 0:
            self.barrier()
            self.smem_write(vals, have, mt, es, pad_shift)
            self.barrier()
            out = self.smem_read(want, mt, es, pad_shift)
        else:
            out = [None] * want.n_regs
            for c in range(1 << k):
                self.barrier()
                self.smem_write(vals, have, mt, es, pad_shift, chunk=(tuple(bits), c))
                self.barrier()
                self.smem_read(want, mt, es, pad_shift, chunk=(tuple(bits), c), out=out)
            assert all(x is not None for x in out)
        if dt.name == "int1":
            out = [self.b.icmp_unsigned("!=", x, ll.Constant(I8, 0)) for x in out]
        if dt.is_ptr():
            out = [self.b.inttoptr(x, GPTR) for x in out]
        return out

    def _padded(self, off, pad_shift, base_elems: int):
        """Element offset in the (optionally row-padded) scratch buffer."""
        b = self.b
        if pad_shift is not None:
            shift, pad = pad_shift
            rows = b.lshr(off, ll.Constant(I32, shift))
            off = b.add(off, b.mul(rows, ll.Constant(I32, pad)))
        if base_elems:
            off = b.add(off, ll.Constant(I32, base_elems))
        return off

    def _smem_slots(self, lay: Layout, es, pad_shift, base_elems: int, chunk, dyn_bytes=None):
        """(first register, vector length, shared-memory pointer) of each of this thread's vectors at
        their row-major offsets. `chunk` = (bits, c): only the registers whose offset has the value c
        in those bits (register-only bits, in descending order: c's top bit is bits[0]), at the offset
        with those bits taken out. `dyn_bytes`: an i32 added to every byte offset."""
        tv, tm = self.thread_flat(lay)
        vec = self._vec_len(lay, tm, es)
        b = self.b
        if chunk is not None:
            tv, tm = self._without_bits(tv, tm, chunk[0])
        for g in range(0, lay.n_regs, vec):
            flat = lay.flat(lay.reg_coord(g))
            if chunk is not None:
                if _gather_bits(flat, chunk[0]) != chunk[1]:
                    continue
                flat = _remove_bits(flat, chunk[0])
            off = self._padded(self.combine_const(tv, tm, flat), pad_shift, base_elems)
            byte = b.mul(off, ll.Constant(I32, es))
            yield g, vec, self.smem_ptr(byte if dyn_bytes is None else b.add(byte, dyn_bytes))

    def _without_bits(self, tv, tm: int, bits):
        """A thread's offset part with the (register-only, so clear) offset `bits` taken out: the
        part above each shifted down — nothing to do where the thread sets no bit above them."""
        b = self.b
        for j in sorted(bits, reverse=True):   # highest first: the lower positions stay put
            if tv is None or not tm >> j:
                continue
            low = b.and_(tv, ll.Constant(I32, (1 << j) - 1))
            tv = b.or_(low, b.lshr(b.and_(tv, ll.Constant(I32, ~((1 << (j + 1)) - 1) & 0xFFFFFFFF)), ll.Constant(I32, 1)))
            tm = _remove_bits(tm, (j,))
        return tv, tm

    def smem_write(self, vals, lay: Layout, mt, es, pad_shift=None, base_elems: int = 0, pred=None, chunk=None):
        """Store this thread's registers at their row-major offsets (see _smem_slots for `chunk`)."""
        b = self.b
        for g, vec, ptr in self._smem_slots(lay, es, pad_shift, base_elems, chunk):
            if vec == 1:
                val = vals[g]
            else:
                val = ll.Constant(ll.VectorType(mt, vec), None)
                for j in range(vec):
                    val = b.insert_element(val, vals[g + j], ll.Constant(I32, j))
            if pred is not None:
                with b.if_then(pred):
                    b.store(val, ptr, align=es * vec)
            else:
                b.store(val, ptr, align=es * vec)

    def smem_read(self, lay: Layout, mt, es, pad_shift=None, base_elems: int = 0, chunk=None, out=None, dyn_bytes=None):
        """Load this thread's registers (with `chunk`, only those registers are filled in `out`)."""
        b = self.b
        res = out if out is not None else []
        for g, vec, ptr in self._smem_slots(lay, es, pad_shift, base_elems, chunk, dyn_bytes):
            if vec == 1:
                got = [b.load(ptr, typ=mt, align=es)]
            else:
                v = b.load(ptr, typ=ll.VectorType(mt, vec), align=es * vec)
                got = [b.extract_element(v, ll.Constant(I32, j)) for j in range(vec)]
            if out is not None:
                out[g:g + vec] = got
            else:
                res.extend(got)
        return res

    def each_thread_share(self, count: int, body) -> None:
        """body(i) for i = tid, tid + T, … below `count` (T: the program's threads): work shared out
        over the threads (tl.sort's compare-and-swap pairs, tl.histogram's bins), unrolled when
        short, else a loop."""
        b = self.b
        threads = 32 * self.num_warps
        if count < threads:
            with b.if_then(b.icmp_unsigned("<", self.tid, ll.Constant(I32, count))):
                body(self.tid)
            return
        trips = count // threads
        if trips <= 8:
            for t in range(trips):
                body(b.add(self.tid, ll.Constant(I32, t * threads)) if t else self.tid)
            return
        step = ll.Constant(I32, threads)
        header, exitb, iv, _ = self.loop_head("share", ll.Constant(I32, 0), ll.Constant(I32, count), step, [], True)
        body(b.add(iv, self.tid))
        self.loop_back(header, iv, step, [], [])
        b.position_at_end(exitb)

    # ------------------------------------------------------------------------------------------
    # driving
    def run(self):
        self.lower_block(self.fn.body)
        if self.b.block.terminator is None:
            if isinstance(self.func.function_type.return_type, ll.VoidType):
                self.b.ret_void()
            else:   # past a device function's return of its values
                self.b.unreachable()
        return self

    def lower_block(self, block: ir.Block):
        """Lower a region's ops; returns its terminator op (yield/condition) unlowered."""
        for op in block.ops:
            if op.name in ("yield", "condition"):
                return op
            self.lower_op(op)
        return None

    def lower_op(self, op: ir.Op):
        """Lower one op through its rule; results land in the value table in their layouts."""
        if self.line_info is not None:
            self.b.debug_metadata = self.line_info.at(op.loc)
        rule = self.rules.by_layout.get(op.name)
        if rule is not None:
            res = op.result
            if res.is_block:
                lay = self.want(res)
                self.set_block(res, lay, rule(self, op, lay))
            else:
                self.vals[res.id] = rule(self, op, None)
            return
        rule = self.rules.statements.get(op.name)
        if rule is None:
            raise BackendError(f"op {op.name!r} is not supported by the NVPTX backend", op.loc)
        rule(self, op)

    # ------------------------------------------------------------------------------------------
    # helpers for elementwise rules
    def operands(self, op, lay):
        """Operands as register lists in `lay` (scalars: one-element lists when lay is None)."""
        out = []
        for o in op.operands:
            if o is None:
                out.append(None)
            elif lay is None:
                out.append([self.scalar(o)])
            else:
                out.append(self.block(o, lay))
        return out

    def const(self, dt, value):
        t = lty(dt)
        if dt.is_fp8():
            return fp8.constant(dt, value)
        if dt.is_floating():
            if dt.name in ("fp16", "bf16"):
                c = ll.Constant(F32, float(value))
                return self.b.fptrunc(c, t) if not math.isnan(float(value)) else self.pb.fptrunc(c, t)
            return ll.Constant(t, float(value))
        if dt.is_ptr():
            return ll.Constant(I64, int(value)).inttoptr(GPTR)
        return ll.Constant(t, int(bool(value)) if dt.name == "int1" else int(value))

    def to_f32(self, x, dt):
        if dt.name in ("fp16", "bf16"):
            return self.b.fpext(x, F32)
        return x

    def from_f32(self, x, dt):
        if dt.name in ("fp16", "bf16"):
            return self.b.fptrunc(x, lty(dt))
        return x

    # ------------------------------------------------------------------------------------------
    # structured control flow: slots (loop-carried / merged values), regions, counted loops
    def slot_layout(self, v: ir.Value):
        """The layout of a loop-carried or merged slot (None for a scalar)."""
        return self.want(v) if v.is_block else None

    def get_as(self, v: ir.Value, lay):
        """v's registers in `lay`, or [v] for a scalar slot (lay None)."""
        return self.block(v, lay) if lay is not None else [self.scalar(v)]

    def bind(self, v: ir.Value, lay, regs):
        """Give v the registers of a slot (one value when lay is None)."""
        if lay is None:
            self.vals[v.id] = regs[0]
        else:
            self.set_block(v, lay, regs)

    def region_yields(self, block: ir.Block, lays: list) -> list:
        """Lower `block` in its own scope; the registers of its terminator's operands, in `lays`."""
        self.scopes.append({})
        try:
            term = self.lower_block(block)
            ys = term.operands if term is not None else []
            return [self.get_as(y, l) for y, l in zip(ys, lays)]
        finally:
            self.scopes.pop()

    def loop_head(self, prefix: str, lb, ub, step, reg_lists: list, signed: bool):
        """Branch into a counted loop's header: a phi for the induction variable (from `lb`) and one
        per register of each list in `reg_lists` (their values on entry), the exit test against `ub`,
        and the builder left in the body block. Returns (header, exit block, iv, phis per list)."""
        b = self.b
        pre = b.block
        header = self.func.append_basic_block(f"{prefix}.header")
        bodyb = self.func.append_basic_block(f"{prefix}.body")
        exitb = self.func.append_basic_block(f"{prefix}.exit")
        entries = [f16_accumulator.pack(b, regs, f16_accumulator.H2) if _in_pairs(regs) else regs for regs in reg_lists]
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(lb.type, name="iv")
        iv.add_incoming(lb, pre)
        phis = []
        for regs, entry in zip(reg_lists, entries):
            ps = []
            for x in entry:
                p = b.phi(x.type)
                p.add_incoming(x, pre)
                ps.append(p)
            phis.append(PairPhis(ps) if entry is not regs else ps)
        for i, ps in enumerate(phis):   # (after every phi of the header)
            if isinstance(ps, PairPhis):
                phis[i] = PairPhis(f16_accumulator.unpack(b, ps.words), ps.words)
        neg_step = isinstance(step, ll.Constant) and isinstance(step.constant, int) and step.constant < 0
        if signed:
            cond = b.icmp_signed(">" if neg_step else "<", iv, ub)
        else:
            cond = b.icmp_unsigned("<", iv, ub)
        b.cbranch(cond, bodyb, exitb)
        b.position_at_end(bodyb)
        return header, exitb, iv, phis

    def loop_back(self, header, iv, step, phis: list, nexts: list):
        """Close a loop opened by loop_head: the next values of iv and of every phi, and the back
        edge (returned: loop metadata goes on it)."""
        b = self.b
        iv_next = b.add(iv, step)
        end = b.block
        iv.add_incoming(iv_next, end)
        for ps, regs in zip(phis, nexts):
            if isinstance(ps, PairPhis):
                ps, regs = ps.words, f16_accumulator.pack(b, regs, f16_accumulator.H2)
            for p, x in zip(ps, regs):
                p.add_incoming(x, end)
        return b.branch(header)


class PairPhis(list):
    """The fp16 registers a loop carries, as values of the header, and (`words`) the <2 x half> phis
    that carry them in pairs: an fp16 accumulator stays in the f16x2 words its tensor-core
    instructions read and write (f16_accumulator.py), with no packing of halves in the loop."""

    def __init__(self, values, words=None):
        super().__init__(values)
        self.words = words if words is not None else list(values)


def _in_pairs(regs: list) -> bool:
    """A loop carries these registers in f16x2 pairs: fp16 registers, an even count of them."""
    return len(regs) >= 2 and len(regs) % 2 == 0 and all(x.type == F16 for x in regs)


def region_combiner(lw: Lowering, region: ir.Block):
    """A region of scalar ops (a custom reduction's combine function, tl.map_elementwise's function)
    as a callable: its ops lowered on scalar registers, once per call (tuples of registers in, the
    yielded registers out)."""
    def comb(a, c):
        for arg, v in zip(region.args, tuple(a) + tuple(c)):
            lw.vals[arg.id] = v
        lw.scopes.append({})
        try:
            term = lw.lower_block(region)
            return tuple(lw.scalar(y) for y in term.operands)
        finally:
            lw.scopes.pop()
    return comb
