"""Block IR → LLVM IR (llvmlite) → PTX, for NVIDIA GPUs (sm_80+; tuned for sm_90).

Every block value is lowered to a Python list of llvmlite values, one per register the thread
owns in the value's layout (compiler/backend/layouts.py) — Triton's "struct of values". Scalars are
single llvmlite values, uniform across the threads of the program.

The lowering rules are one table (`RULES`) from op name to a function. "Layout-polymorphic"
rules (elementwise ops, index arithmetic, shape ops) take the wanted output layout and return the
register list; this lets the lowering rematerialize cheap values (arange/splat/const chains) in a
second layout instead of converting them through shared memory. The other rules set their
results themselves.

Kernel ABI (what the launcher passes, in order, one per `fn.args` that is not `equal_to_1`):
  pointers            → u64 (`ptr addrspace(1)`)
  i1                  → i32 (0 or 1)
  i8/i16/i32/i64, u*  → the integer of that width
  fp16 / bf16         → 16-bit raw bits (`.b16`, pass the value's bit pattern as uint16)
  fp32 / fp64         → float / double
Arguments specialized as `equal_to_1` are not kernel parameters (the kernel uses the constant 1).
`compile_ir(...)["params"]` lists the ABI of each passed parameter.
Block dims: (32 * num_warps, 1, 1); dynamic shared memory: `compile_ir(...)["shared"]` bytes.
"""
from __future__ import annotations

import math

from llvmlite import ir as ll

from .. import ir
from ..language import dtypes as T
from .assign_layouts import LayoutAssignment, broadcast_layout
from .axis_info import AxisAnalysis
from .layouts import Layout, blocked, default_layout, dot_operand, log2
from . import mma, pipeline
from .llvm_target import cpu_for, llir_to_ptx, ptxas_check  # noqa: F401  (re-exported)

try:  # the shared error type, once compiler/errors.py exists
    from ..errors import CompilationError as _BaseError  # type: ignore
except Exception:  # pragma: no cover
    _BaseError = Exception


class BackendError(_BaseError):
    """The NVPTX backend cannot lower this IR (unsupported op/type combination). A
    `compiler.CompilationError` with the op's source location when compiler/errors.py exists."""

    def __init__(self, message, loc=None, source_line=None):
        if loc is not None and getattr(loc, "line", 0) <= 0:
            loc = None  # ir.UNKNOWN_LOC
        if source_line is None and loc is not None and getattr(loc, "file", None):
            import linecache
            source_line = linecache.getline(loc.file, loc.line) or None
        if _BaseError is Exception:  # pragma: no cover
            Exception.__init__(self, f"{loc}: {message}" if loc is not None else message)
            self.message, self.loc, self.source_line = message, loc, source_line
        else:
            super().__init__(message, loc, source_line)


from llvmlite.ir import types as _lltypes  # noqa: E402


class BFloatType(_lltypes._BaseFloatType):
    """LLVM `bfloat` (llvmlite 0.50 has no class for it)."""
    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"

    def format_constant(self, value):
        import struct
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
            return "0xR7FC0"
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return f"0xR{bits & 0xFFFF:04X}"


BFloatType._create_instance()

I1, I8, I16, I32, I64 = (ll.IntType(n) for n in (1, 8, 16, 32, 64))
F16, BF16, F32, F64 = ll.HalfType(), BFloatType(), ll.FloatType(), ll.DoubleType()
GPTR = ll.PointerType(addrspace=1)
SPTR = ll.PointerType(addrspace=3)
# Triton compiles with FP contraction on (enable_fp_fusion): a*b+c may become one fma.
CONTRACT = ("contract",)
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
FULL_MASK = ll.Constant(I32, -1)


def lty(dt) -> ll.Type:
    """Register type of an element type."""
    if dt.is_ptr():
        return GPTR
    n = dt.name
    if n == "i1":
        return I1
    if dt.is_int():
        return ll.IntType(dt.primitive_bitwidth)
    if n == "fp16":
        return F16
    if n == "bf16":
        if BF16 is None:
            raise BackendError("llvmlite lacks bfloat")
        return BF16
    if n == "fp32":
        return F32
    if n == "fp64":
        return F64
    raise BackendError(f"element type {dt} is not supported by the NVPTX backend yet")


def mty(dt) -> ll.Type:
    """In-memory type (bools are bytes)."""
    return I8 if dt.name == "i1" else lty(dt)


def esize(dt) -> int:
    return 8 if dt.is_ptr() else max(1, dt.primitive_bitwidth // 8)


def _pow2_floor(n: int) -> int:
    n = max(1, int(n))
    return 1 << (n.bit_length() - 1)


def _is_signed(dt) -> bool:
    return dt.is_int_signed()


_SEM = {"acq_rel": ".acq_rel", "acquire": ".acquire", "release": ".release", "relaxed": ".relaxed", "": ".acq_rel", None: ".acq_rel"}
_SCOPE = {"gpu": ".gpu", "cta": ".cta", "sys": ".sys", "": ".gpu", None: ".gpu"}
_CACHE = {"": "", None: "", ".ca": ".ca", ".cg": ".cg", ".cs": ".cs", ".lu": ".lu", ".cv": ".cv", ".wb": ".wb", ".wt": ".wt",
          "ca": ".ca", "cg": ".cg", "cs": ".cs", "lu": ".lu", "cv": ".cv", "wb": ".wb", "wt": ".wt"}
_EVICT = {"evict_first": ".L1::evict_first", "evict_last": ".L1::evict_last", "evict_normal": ".L1::evict_normal",
          "no_allocate": ".L1::no_allocate"}


def _cache_qualifiers(op) -> str:
    """`.cg`-style cache operator, else an L1 eviction priority (PTX cannot combine the two: the
    cache operator wins)."""
    c = _CACHE.get(op.attrs.get("cache", ""), "")
    return c or _EVICT.get(op.attrs.get("eviction", "") or "", "")


# ops whose lowering takes the wanted output layout and may be recomputed in another layout
REMAT_OPS = {"const", "arange", "splat", "broadcast", "expand_dims", "trans", "reshape", "addptr", "add", "sub",
             "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "cmp", "select", "cast", "maximum", "minimum",
             "assume", "not", "neg"}


class Lowering:
    def __init__(self, fn: ir.Function, num_warps: int, target: str):
        self.fn, self.num_warps, self.target = fn, num_warps, target
        self.axis = AxisAnalysis(fn)
        self.assign = LayoutAssignment(fn, num_warps, self.axis)
        self.uses = ir.uses(fn)
        self.module = ll.Module(name=fn.name)
        self.smem_bytes = 0
        self.vals: dict[int, object] = {}     # value id → llvm value (scalar) or (Layout, [regs])
        self.scopes: list[dict] = [{}]          # (value id, layout) → regs; one dict per open region
        self.params = []
        self._intrinsics: dict[str, ll.Function] = {}
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
            if t.is_ptr():
                pt, abi = GPTR, "ptr"
            elif t.name == "i1":
                pt, abi = I32, "i32"
            elif t.name in ("fp16", "bf16"):
                pt, abi = I16, "b16"
            else:
                pt = lty(t)
                abi = {"fp32": "f32", "fp64": "f64"}.get(t.name, f"i{t.primitive_bitwidth}")
            ptys.append(pt)
            passed.append((i, a, t))
            self.params.append({"name": fn.arg_names[i] if i < len(fn.arg_names) else f"arg{i}",
                                "type": T.to_signature(t), "abi": abi})
        self.func = ll.Function(self.module, ll.FunctionType(ll.VoidType(), ptys), name=fn.name)
        self.func.calling_convention = "ptx_kernel"
        entry = self.func.append_basic_block("entry")
        body = self.func.append_basic_block("body")
        self.pb = ll.IRBuilder(entry)
        br = self.pb.branch(body)
        self.pb.position_before(br)
        self.b = ll.IRBuilder(body)
        for k, (i, a, t) in enumerate(passed):
            p = self.func.args[k]
            p.name = (fn.arg_names[i] if i < len(fn.arg_names) else f"arg{i}").replace(".", "_")
            if t.is_ptr():
                v = p
            elif t.name == "i1":
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
        from .llvm_target import libdevice_path
        return libdevice_path() is not None

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
        return self.b.gep(self.smem, [byte_off], inbounds=True, source_etype=I8)

    def barrier(self):
        self.call("llvm.nvvm.barrier.cta.sync.aligned.all", ll.VoidType(), [ll.Constant(I32, 0)])

    # ------------------------------------------------------------------------------------------
    # thread-index arithmetic (computed once in the entry block)
    def _linear(self, lane_vals: tuple, warp_vals: tuple):
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
                    bits = (1 << v0.bit_length()) - 1
                    terms.append((t, bits))
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
        return self._linear(tuple(lay.flat(b) for b in lay.lane), tuple(lay.flat(b) for b in lay.warp))

    def thread_coord(self, lay: Layout, d: int):
        return self._linear(tuple(b[d] for b in lay.lane), tuple(b[d] for b in lay.warp))

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
        if out is None and v.owner is not None and self._rematerializable(v, 6):
            out = RULES[v.owner.name](self, v.owner, lay)
        if out is None:
            out = self.convert(regs, have, lay, v.dtype)
        self.scopes[-1][key] = out
        return out

    def _rematerializable(self, v: ir.Value, depth: int) -> bool:
        op = v.owner
        if op is None or op.name not in REMAT_OPS or depth == 0:
            return False
        return all(o is None or not o.is_block or self._rematerializable(o, depth - 1) for o in op.operands)

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
        """Layout conversion through shared memory."""
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
        self.smem_bytes = max(self.smem_bytes, nbytes >> k)
        vals = regs
        if dt.name == "i1":
            vals = [self.b.zext(x, I8) for x in regs]
        if dt.is_ptr():
            mt = I64
            vals = [self.b.ptrtoint(x, I64) for x in regs]
        if k == 0:
            self.barrier()
            self._smem_write(vals, have, mt, es, pad_shift)
            self.barrier()
            out = self._smem_read(want, mt, es, pad_shift)
        else:
            out = [None] * want.n_regs
            for c in range(1 << k):
                self.barrier()
                self._smem_write(vals, have, mt, es, pad_shift, chunk=(total - k, c))
                self.barrier()
                self._smem_read(want, mt, es, pad_shift, chunk=(total - k, c), out=out)
            assert all(x is not None for x in out)
        if dt.name == "i1":
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

    def _smem_slots(self, lay: Layout, es, pad_shift, base_elems: int, chunk):
        """(first register, vector length, shared-memory pointer) of each of this thread's vectors at
        their row-major offsets. `chunk` = (shift, c): only the registers whose offset >> shift == c,
        at offset mod 2**shift."""
        tv, tm = self.thread_flat(lay)
        vec = self._vec_len(lay, tm, es)
        b = self.b
        for g in range(0, lay.n_regs, vec):
            flat = lay.flat(lay.reg_coord(g))
            if chunk is not None:
                if flat >> chunk[0] != chunk[1]:
                    continue
                flat &= (1 << chunk[0]) - 1
            off = self._padded(self.combine_const(tv, tm, flat), pad_shift, base_elems)
            yield g, vec, self.smem_ptr(b.mul(off, ll.Constant(I32, es)))

    def _smem_write(self, vals, lay: Layout, mt, es, pad_shift=None, base_elems: int = 0, pred=None, chunk=None):
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

    def _smem_read(self, lay: Layout, mt, es, pad_shift=None, base_elems: int = 0, chunk=None, out=None):
        """Load this thread's registers (with `chunk`, only those registers are filled in `out`)."""
        b = self.b
        res = out if out is not None else []
        for g, vec, ptr in self._smem_slots(lay, es, pad_shift, base_elems, chunk):
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

    # ------------------------------------------------------------------------------------------
    # driving
    def run(self):
        self.lower_block(self.fn.body)
        if self.b.block.terminator is None:
            self.b.ret_void()
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
        rule = RULES.get(op.name)
        if rule is None:
            raise BackendError(f"op {op.name!r} is not supported by the NVPTX backend", op.loc)
        if op.name in POLY:
            res = op.result
            if res.is_block:
                lay = self.want(res)
                self.set_block(res, lay, rule(self, op, lay))
            else:
                self.vals[res.id] = rule(self, op, None)
        else:
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
        if dt.is_floating():
            if dt.name in ("fp16", "bf16"):
                c = ll.Constant(F32, float(value))
                return self.b.fptrunc(c, t) if not math.isnan(float(value)) else self.pb.fptrunc(c, t)
            return ll.Constant(t, float(value))
        if dt.is_ptr():
            return ll.Constant(I64, int(value)).inttoptr(GPTR)
        return ll.Constant(t, int(bool(value)) if dt.name == "i1" else int(value))

    def to_f32(self, x, dt):
        if dt.name in ("fp16", "bf16"):
            return self.b.fpext(x, F32)
        return x

    def from_f32(self, x, dt):
        if dt.name in ("fp16", "bf16"):
            return self.b.fptrunc(x, lty(dt))
        return x


# ==============================================================================================
# Elementwise / index rules: (lowering, op, layout | None) → regs | scalar

CONVERT_CHUNK_BYTES = 32 * 1024


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


def _first_dim(lay: Layout):
    """The dim a thread's consecutive registers (else its neighbour lanes) run along."""
    for bb in lay.reg + lay.lane:
        nz = [d for d, x in enumerate(bb) if x]
        if nz:
            return nz[0]
    return None


def _emap(lw: Lowering, op, lay, f):
    args = lw.operands(op, lay)
    if lay is None:
        return f(*[a[0] if a is not None else None for a in args])
    rep = _constant_runs(lw, op, lay)
    out = []
    for i in range(lay.n_regs):
        j = rep[i]
        out.append(out[j] if j != i else f(*[a[i] if a is not None else None for a in args]))
    return out


def _constant_runs(lw: Lowering, op, lay) -> list:
    """Register → the register holding the same value, from the result's constancy (axis info):
    a register bit whose basis moves less than the constancy along one dim stays inside an aligned
    run of equal values, so `cols < N` is compared once per vector, as Triton does."""
    n = lay.n_regs
    res = op.results[0] if op.results else None
    if res is None or not res.is_block:
        return list(range(n))
    k = lw.axis.get(res).constancy
    same = 0
    for bit, basis in enumerate(lay.reg):
        dims = [d for d, v in enumerate(basis) if v]
        if len(dims) == 1 and basis[dims[0]] < k[dims[0]]:
            same |= 1 << bit
    return [r & ~same for r in range(n)] if same else list(range(n))


def r_const(lw, op, lay):
    dt = op.result.dtype
    v = op.attrs["value"]
    if dt.name in ("fp16", "bf16"):
        c = lw.pb.fptrunc(ll.Constant(F32, float(v)), lty(dt))  # in the entry block: dominates all
    else:
        c = lw.const(dt, v)
    return c if lay is None else [c] * lay.n_regs


def r_arange(lw, op, lay):
    start = op.attrs["start"]
    tv, m = lw.thread_coord(lay, 0)
    return [lw.combine_const(tv, m, lay.reg_coord(r)[0] + 0) if start == 0 else
            lw.b.add(lw.combine_const(tv, m, lay.reg_coord(r)[0]), ll.Constant(I32, start)) for r in range(lay.n_regs)]


def r_splat(lw, op, lay):
    return [lw.scalar(op.operands[0])] * lay.n_regs


def r_broadcast(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    sl = lay.project(src.shape)
    regs = lw.block(src, sl)
    idx = sl.reg_index_map()
    keep = [s != 1 or t == 1 for s, t in zip(src.shape, lay.shape)]
    out = []
    for r in range(lay.n_regs):
        c = tuple(x if k else 0 for x, k in zip(lay.reg_coord(r), keep))
        out.append(regs[idx[c]])
    return out


def r_expand_dims(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    return list(lw.block(src, lay.squeeze(op.attrs["axis"])))


def r_trans(lw, op, lay):
    perm = tuple(op.attrs["perm"])
    inv = tuple(perm.index(i) for i in range(len(perm)))
    return list(lw.block(op.operands[0], lay.trans(inv)))


def r_reshape(lw, op, lay):
    src = op.operands[0]
    if not src.is_block:
        return [lw.scalar(src)] * lay.n_regs
    return list(lw.block(src, lay.reshape(src.shape)))


def r_assume(lw, op, lay):
    return _emap(lw, op, lay, lambda x: x)


def r_addptr(lw, op, lay):
    elt = mty(op.result.dtype.element_ty)
    return _emap(lw, op, lay, lambda p, o: lw.b.gep(p, [o], source_etype=elt))


def _binary(name):
    def rule(lw, op, lay):
        dt = op.result.dtype
        b = lw.b
        fl = dt.is_floating()
        half = dt.name in ("fp16", "bf16")
        sgn = _is_signed(dt)
        t = lty(dt)

        def f(x, y):
            if name == "add":
                return b.fadd(x, y, flags=CONTRACT) if fl else b.add(x, y)
            if name == "sub":
                return b.fsub(x, y, flags=CONTRACT) if fl else b.sub(x, y)
            if name == "mul":
                return b.fmul(x, y, flags=CONTRACT) if fl else b.mul(x, y)
            if name == "fdiv":
                if dt.name == "fp32":
                    if op.attrs.get("ieee", False):
                        return b.fdiv(x, y)
                    return b.asm(ll.FunctionType(F32, [F32, F32]), "div.full.f32 $0, $1, $2;", "=r,r,r", [x, y], False)
                if half:
                    return lw.from_f32(b.fdiv(lw.to_f32(x, dt), lw.to_f32(y, dt)), dt)
                return b.fdiv(x, y)
            if name == "div":
                return b.sdiv(x, y) if sgn else b.udiv(x, y)
            if name == "rem":
                if fl:
                    if half:
                        return lw.from_f32(b.frem(lw.to_f32(x, dt), lw.to_f32(y, dt)), dt)
                    return b.frem(x, y)
                return b.srem(x, y) if sgn else b.urem(x, y)
            if name == "and":
                return b.and_(x, y)
            if name == "or":
                return b.or_(x, y)
            if name == "xor":
                return b.xor(x, y)
            if name == "shl":
                return b.shl(x, y)
            if name == "shr":
                return b.ashr(x, y) if sgn else b.lshr(x, y)
            if name in ("maximum", "minimum", "maximum_nan", "minimum_nan"):
                mx = name.startswith("maximum")
                if fl:
                    iname = ("llvm.maxnum" if mx else "llvm.minnum") if not name.endswith("_nan") else ("llvm.maximum" if mx else "llvm.minimum")
                    return lw.call(f"{iname}.{_fsuffix(dt)}", t, [x, y])
                if dt.name == "i1":
                    return b.or_(x, y) if mx else b.and_(x, y)
                iname = ("llvm.smax" if mx else "llvm.smin") if sgn else ("llvm.umax" if mx else "llvm.umin")
                return lw.call(f"{iname}.i{dt.primitive_bitwidth}", t, [x, y])
            raise BackendError(f"binary op {name}", op.loc)
        return _emap(lw, op, lay, f)
    return rule


def _fsuffix(dt) -> str:
    return {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64"}[dt.name]


def r_cmp(lw, op, lay):
    dt = op.operands[0].dtype
    pred = op.attrs["pred"]
    b = lw.b
    sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[pred]

    def f(x, y):
        if dt.is_floating():
            return b.fcmp_unordered(sym, x, y) if pred == "ne" else b.fcmp_ordered(sym, x, y)
        if dt.is_ptr():
            x, y = b.ptrtoint(x, I64), b.ptrtoint(y, I64)
            return b.icmp_unsigned(sym, x, y)
        return b.icmp_signed(sym, x, y) if _is_signed(dt) else b.icmp_unsigned(sym, x, y)
    return _emap(lw, op, lay, f)


def r_select(lw, op, lay):
    return _emap(lw, op, lay, lambda c, x, y: lw.b.select(c, x, y))


def r_fma(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        t = lty(dt)
        return _emap(lw, op, lay, lambda x, y, z: lw.call(f"llvm.fma.{_fsuffix(dt)}", t, [x, y, z]))
    return _emap(lw, op, lay, lambda x, y, z: lw.b.add(lw.b.mul(x, y), z))


def r_umulhi(lw, op, lay):
    dt = op.result.dtype
    n = dt.primitive_bitwidth
    w = ll.IntType(2 * n)
    b = lw.b

    def f(x, y):
        p = b.mul(b.zext(x, w), b.zext(y, w))
        return b.trunc(b.lshr(p, ll.Constant(w, n)), lty(dt))
    return _emap(lw, op, lay, f)


def r_cast(lw, op, lay):
    src, dst = op.operands[0].dtype, op.result.dtype
    return _emap(lw, op, lay, lambda x: cast_value(lw, x, src, dst))


def cast_value(lw, x, src, dst):
    b = lw.b
    if src == dst:
        return x
    st, dt_ = lty(src), lty(dst)
    if dst.is_ptr():
        if src.is_ptr():
            return x
        return b.inttoptr(b.sext(x, I64) if src.primitive_bitwidth < 64 else x, GPTR)
    if src.is_ptr():
        v = b.ptrtoint(x, I64)
        return b.trunc(v, dt_) if dst.primitive_bitwidth < 64 else v
    if dst.name == "i1":
        if src.is_floating():
            return b.fcmp_unordered("!=", x, ll.Constant(st, 0.0)) if src.name not in ("fp16", "bf16") else \
                b.fcmp_unordered("!=", b.fpext(x, F32), ll.Constant(F32, 0.0))
        return b.icmp_unsigned("!=", x, ll.Constant(st, 0))
    if src.is_floating() and dst.is_floating():
        if src.primitive_bitwidth < dst.primitive_bitwidth or (src.name, dst.name) in (("fp16", "bf16"), ("bf16", "fp16")):
            if (src.name, dst.name) in (("fp16", "bf16"), ("bf16", "fp16")):
                return b.fptrunc(b.fpext(x, F32), dt_)
            return b.fpext(x, dt_)
        if src.name == "fp64" and dst.name in ("fp16", "bf16"):
            return b.fptrunc(x, dt_)  # cvt.rn from f64 directly
        return b.fptrunc(x, dt_)
    if src.is_floating():
        xf = x
        if src.name in ("fp16", "bf16"):
            xf = b.fpext(x, F32)
        return b.fptosi(xf, dt_) if _is_signed(dst) else b.fptoui(xf, dt_)
    if dst.is_floating():
        if dst.name in ("fp16", "bf16"):
            v = b.sitofp(x, F32) if _is_signed(src) else b.uitofp(x, F32)
            return b.fptrunc(v, dt_)
        return b.sitofp(x, dt_) if _is_signed(src) else b.uitofp(x, dt_)
    # int → int
    sb, db = src.primitive_bitwidth, dst.primitive_bitwidth
    if sb == db:
        return x
    if sb > db:
        return b.trunc(x, dt_)
    return b.sext(x, dt_) if _is_signed(src) else b.zext(x, dt_)


def r_bitcast(lw, op, lay):
    dst = lty(op.result.dtype)
    src = op.operands[0].dtype
    b = lw.b

    def f(x):
        if src.is_ptr():
            return b.ptrtoint(x, dst)
        if op.result.dtype.is_ptr():
            return b.inttoptr(x, dst)
        return b.bitcast(x, dst)
    return _emap(lw, op, lay, f)


def r_not(lw, op, lay):
    dt = op.result.dtype
    return _emap(lw, op, lay, lambda x: lw.b.xor(x, ll.Constant(lty(dt), -1)))


def r_neg(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        return _emap(lw, op, lay, lambda x: lw.b.fneg(x))
    return _emap(lw, op, lay, lambda x: lw.b.sub(ll.Constant(lty(dt), 0), x))


def r_abs(lw, op, lay):
    dt = op.result.dtype
    if dt.is_floating():
        return _emap(lw, op, lay, lambda x: lw.call(f"llvm.fabs.{_fsuffix(dt)}", lty(dt), [x]))
    return _emap(lw, op, lay, lambda x: lw.call(f"llvm.abs.i{dt.primitive_bitwidth}", lty(dt), [x, ll.Constant(I1, 0)]))


def _approx(lw, name, x):
    return lw.call(name, F32, [x])


def _exp2_f32(lw, x):
    return _approx(lw, "llvm.nvvm.ex2.approx.f", x)


def math_f32(lw, name, x, fast):
    """One fp32 math function (x: float)."""
    b = lw.b
    c = lambda v: ll.Constant(F32, v)  # noqa: E731
    if name == "exp":
        return _exp2_f32(lw, b.fmul(x, c(LOG2E)))
    if name == "exp2":
        return _exp2_f32(lw, x)
    if name == "log":
        return b.fmul(_approx(lw, "llvm.nvvm.lg2.approx.f", x), c(LN2))
    if name == "log2":
        return _approx(lw, "llvm.nvvm.lg2.approx.f", x)
    if name == "sqrt":
        if fast:
            return _approx(lw, "llvm.nvvm.sqrt.approx.f", x)
        return lw.call("llvm.sqrt.f32", F32, [x])
    if name == "rsqrt":
        return _approx(lw, "llvm.nvvm.rsqrt.approx.f", x)
    if name in ("sin", "cos", "erf", "tanh") and lw.has_libdevice():
        # precise, like Triton (libdevice); `fast` is not honoured here: sin.approx is wrong
        # for large arguments (rotary embeddings), and Triton's tl.sin is precise too
        return lw.call(f"__nv_{name}f", F32, [x])
    if name == "sin":
        return _approx(lw, "llvm.nvvm.sin.approx.f", x)
    if name == "cos":
        return _approx(lw, "llvm.nvvm.cos.approx.f", x)
    if name == "floor":
        return lw.call("llvm.floor.f32", F32, [x])
    if name == "ceil":
        return lw.call("llvm.ceil.f32", F32, [x])
    if name == "tanh":
        if fast:
            return _approx(lw, "llvm.nvvm.tanh.approx.f32", x)
        # |x| < 0.3: odd Taylor polynomial; else sign(x) * (1 - 2 / (exp(2|x|) + 1))
        ax = lw.call("llvm.fabs.f32", F32, [x])
        e = _exp2_f32(lw, b.fmul(ax, c(2 * LOG2E)))
        big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(e, c(1.0))))
        big = lw.call("llvm.copysign.f32", F32, [big, x])
        x2 = b.fmul(x, x)
        p = c(62.0 / 2835.0)
        for k in (-17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0):
            p = lw.call("llvm.fma.f32", F32, [p, x2, c(k)])
        small = lw.call("llvm.fma.f32", F32, [b.fmul(p, x2), x, x])
        return b.select(b.fcmp_ordered("<", ax, c(0.3)), small, big)
    if name == "erf":
        ax = lw.call("llvm.fabs.f32", F32, [x])
        # |x| < 0.5: Taylor series of erf; else Abramowitz–Stegun 7.1.26 (abs error < 1.5e-7)
        x2 = b.fmul(x, x)
        coef = [1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360]
        p = c(coef[-1])
        for k in reversed(coef[:-1]):
            p = lw.call("llvm.fma.f32", F32, [p, x2, c(k)])
        small = b.fmul(b.fmul(p, x), c(2.0 / math.sqrt(math.pi)))
        t = b.fdiv(c(1.0), lw.call("llvm.fma.f32", F32, [ax, c(0.3275911), c(1.0)]))
        q = c(1.061405429)
        for k in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            q = lw.call("llvm.fma.f32", F32, [q, t, c(k)])
        q = b.fmul(q, t)
        ex = _exp2_f32(lw, b.fmul(b.fneg(b.fmul(ax, ax)), c(LOG2E)))
        big = b.fsub(c(1.0), b.fmul(q, ex))
        big = lw.call("llvm.copysign.f32", F32, [big, x])
        return b.select(b.fcmp_ordered("<", ax, c(0.5)), small, big)
    raise BackendError(f"math function {name}")


def r_unary_math(lw, op, lay):
    name = op.name
    dt = op.result.dtype
    fast = bool(op.attrs.get("fast", False))
    if dt.name == "fp64":
        if name in ("sqrt", "floor", "ceil"):
            iname = {"sqrt": "llvm.sqrt.f64", "floor": "llvm.floor.f64", "ceil": "llvm.ceil.f64"}[name]
            return _emap(lw, op, lay, lambda x: lw.call(iname, F64, [x]))
        if name == "rsqrt":
            return _emap(lw, op, lay, lambda x: lw.call("llvm.nvvm.rsqrt.approx.d", F64, [x]) if fast else
                         lw.b.fdiv(ll.Constant(F64, 1.0), lw.call("llvm.sqrt.f64", F64, [x])))
        if not lw.has_libdevice():
            raise BackendError(f"tl.{name} on fp64 needs libdevice (libdevice.10.bc not found)", op.loc)
        return _emap(lw, op, lay, lambda x: lw.call(f"__nv_{name}", F64, [x]))
    if not dt.is_floating():
        raise BackendError(f"tl.{name} needs a floating-point operand, got {dt}", op.loc)
    return _emap(lw, op, lay, lambda x: lw.from_f32(math_f32(lw, name, lw.to_f32(x, dt), fast), dt))


# ==============================================================================================
# Non-polymorphic rules: (lowering, op) → None (they set their results)

def r_program_id(lw, op, lay):
    ax = "xyz"[op.attrs["axis"]]
    return lw.call(f"llvm.nvvm.read.ptx.sreg.ctaid.{ax}", I32, [])


def r_num_programs(lw, op, lay):
    ax = "xyz"[op.attrs["axis"]]
    return lw.call(f"llvm.nvvm.read.ptx.sreg.nctaid.{ax}", I32, [])


def r_barrier(lw, op):
    lw.barrier()


def r_nop(lw, op):
    pass


def r_print(lw, op):
    from .debug_ops import lower_print
    lower_print(lw, op)


def r_assert(lw, op):
    if getattr(lw, "debug", False):
        from .debug_ops import lower_assert
        lower_assert(lw, op)


def r_return(lw, op):
    lw.b.ret_void()
    lw.b.position_at_end(lw.func.append_basic_block("after_return"))


# ---- memory ------------------------------------------------------------------------------------

def _word_plan(es: int, vec: int):
    """(word bits, number of words) for a vector of `vec` elements of `es` bytes."""
    bits = es * 8 * vec
    if es * 8 >= 32:
        return es * 8, vec
    if bits >= 32:
        return 32, bits // 32
    return bits, 1


def _to_words(lw, elems, mt, wbits, nw):
    b = lw.b
    wt = ll.IntType(wbits)
    es_bits = mt.width if isinstance(mt, ll.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(mt)]
    per = wbits // es_bits
    words = []
    for w in range(nw):
        chunk = elems[w * per:(w + 1) * per]
        if per == 1:
            words.append(chunk[0] if isinstance(chunk[0].type, ll.IntType) and chunk[0].type.width == wbits else b.bitcast(chunk[0], wt))
        else:
            v = ll.Constant(ll.VectorType(mt, per), None)
            for j, e in enumerate(chunk):
                v = b.insert_element(v, e, ll.Constant(I32, j))
            words.append(b.bitcast(v, wt))
    return words


def _from_words(lw, words, mt, wbits):
    b = lw.b
    es_bits = mt.width if isinstance(mt, ll.IntType) else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(mt)]
    per = wbits // es_bits
    out = []
    for w in words:
        if per == 1:
            out.append(w if w.type == mt else b.bitcast(w, mt))
        else:
            v = b.bitcast(w, ll.VectorType(mt, per))
            out.extend(b.extract_element(v, ll.Constant(I32, j)) for j in range(per))
    return out


def _reg_letter(bits):
    return {8: "h", 16: "h", 32: "r", 64: "l"}[bits]


def _mem_vec(lw, lay: Layout, ptr: ir.Value, mask: ir.Value | None, es: int) -> int:
    if not lay.reg:
        return 1
    r0 = lay.reg[0]
    nz = [d for d, x in enumerate(r0) if x]
    if len(nz) != 1 or r0[nz[0]] != 1:
        return 1
    d = nz[0]
    k = 0
    while k < len(lay.reg) and lay.reg[k] == tuple((1 << k) if i == d else 0 for i in range(lay.rank)):
        k += 1
    v = 1 << k
    while v > 1 and any(bb[d] & (v - 1) for bb in lay.reg[k:] + lay.lane + lay.warp):
        v //= 2
    info = lw.axis.get(ptr)
    vec = min(v, info.contiguity[d], _pow2_floor(info.divisibility[d] // es) if info.divisibility[d] >= es else 1,
              max(1, 16 // es))
    if mask is not None:
        vec = min(vec, lw.axis.get(mask).constancy[d])
    return _pow2_floor(vec)


def _and_pred(b, p, q):
    if p is None:
        return q
    if q is None:
        return p
    return b.and_(p, q)


def _ld_asm(lw, ptr, pred, others, mt, es, vec, cache, volatile):
    wbits, nw = _word_plan(es, vec)
    regbits = 16 if wbits == 8 else wbits
    rt = ll.IntType(regbits)
    letter = _reg_letter(wbits)
    b = lw.b
    ins, cons = [ptr], ["l"]
    lines = []
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        if others is not None:
            ow = _to_words(lw, others, mt, wbits, nw)
            if wbits == 8:
                ow = [b.zext(w, I16) for w in ow]
            for j, w in enumerate(ow):
                lines.append(f"mov.b{regbits} ${j}, ${nw + 2 + j};")
                ins.append(w)
                cons.append(letter)
        else:
            lines.extend(f"mov.b{regbits} ${j}, 0;" for j in range(nw))
    vs = {1: "", 2: ".v2", 4: ".v4"}[nw]
    ty = ".u8" if wbits == 8 else f".b{wbits}"
    op = "ld.volatile.global" if volatile else f"ld.global{cache}"
    regs = ", ".join(f"${j}" for j in range(nw))
    regs = f"{{ {regs} }}" if nw > 1 else regs
    p = f"@${nw + 1} " if pred is not None else ""
    lines.append(f"{p}{op}{vs}{ty} {regs}, [ ${nw} + 0 ];")
    ret = rt if nw == 1 else ll.LiteralStructType([rt] * nw)
    constraint = ",".join([f"={letter}"] * nw + cons)
    res = b.asm(ll.FunctionType(ret, [x.type for x in ins]), "\n\t".join(lines), constraint, ins, True)
    words = [res] if nw == 1 else [b.extract_value(res, j) for j in range(nw)]
    if wbits == 8:
        words = [b.trunc(w, I8) for w in words]
    return _from_words(lw, words, mt, wbits)


def _st_asm(lw, ptr, pred, vals, mt, es, vec, cache):
    wbits, nw = _word_plan(es, vec)
    regbits = 16 if wbits == 8 else wbits
    letter = _reg_letter(wbits)
    b = lw.b
    words = _to_words(lw, vals, mt, wbits, nw)
    if wbits == 8:
        words = [b.zext(w, I16) for w in words]
    ins, cons = [], []
    p = ""
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        p = "@$0 "
    pi = len(ins)
    ins.append(ptr)
    cons.append("l")
    for w in words:
        ins.append(w)
        cons.append(letter)
    vs = {1: "", 2: ".v2", 4: ".v4"}[nw]
    ty = ".b8" if wbits == 8 else f".b{wbits}"
    regs = ", ".join(f"${pi + 1 + j}" for j in range(nw))
    regs = f"{{ {regs} }}" if nw > 1 else regs
    text = f"{p}st.global{cache}{vs}{ty} [ ${pi} + 0 ], {regs};"
    b.asm(ll.FunctionType(ll.VoidType(), [x.type for x in ins]), text, ",".join(cons), ins, True)


def _plain_load(lw, ptr, mt, es, vec):
    b = lw.b
    if vec == 1:
        return [b.load(ptr, typ=mt, align=es)]
    v = b.load(ptr, typ=ll.VectorType(mt, vec), align=es * vec)
    return [b.extract_element(v, ll.Constant(I32, j)) for j in range(vec)]


def _plain_store(lw, ptr, vals, mt, es):
    b = lw.b
    vec = len(vals)
    if vec == 1:
        b.store(vals[0], ptr, align=es)
        return
    v = ll.Constant(ll.VectorType(mt, vec), None)
    for j, e in enumerate(vals):
        v = b.insert_element(v, e, ll.Constant(I32, j))
    b.store(v, ptr, align=es * vec)


def _to_mem(lw, vals, dt):
    if dt.name == "i1":
        return [lw.b.zext(x, I8) for x in vals]
    if dt.is_ptr():
        return [lw.b.ptrtoint(x, I64) for x in vals]
    return vals


def _from_mem(lw, vals, dt):
    if dt.name == "i1":
        return [lw.b.icmp_unsigned("!=", x, ll.Constant(I8, 0)) for x in vals]
    if dt.is_ptr():
        return [lw.b.inttoptr(x, GPTR) for x in vals]
    return vals


def _mem_type(dt):
    return I64 if dt.is_ptr() else mty(dt)


def r_load(lw, op):
    p, mask, other = op.operands
    res = op.result
    dt = res.dtype
    mt, es = _mem_type(dt), esize(dt)
    cache = _cache_qualifiers(op)
    volatile = bool(op.attrs.get("volatile", False))
    if not res.is_block:
        ptr = lw.scalar(p)
        pred = lw.scalar(mask) if mask is not None else None
        oth = _to_mem(lw, [lw.scalar(other)], dt) if other is not None else None
        if pred is None and not cache and not volatile:
            vals = _plain_load(lw, ptr, mt, es, 1)
        else:
            vals = _ld_asm(lw, ptr, pred, oth, mt, es, 1, cache, volatile)
        lw.vals[res.id] = _from_mem(lw, vals, dt)[0]
        return
    lay = lw.want(res)
    ptrs = lw.block(p, lay)
    masks = lw.block(mask, lay) if mask is not None else None
    others = _to_mem(lw, lw.block(other, lay), dt) if other is not None else None
    vec = _mem_vec(lw, lay, p, mask, es)
    out = []
    for g in range(0, lay.n_regs, vec):
        pred = masks[g] if masks is not None else None
        if pred is None and not cache and not volatile:
            out.extend(_plain_load(lw, ptrs[g], mt, es, vec))
        else:
            out.extend(_ld_asm(lw, ptrs[g], pred, others[g:g + vec] if others is not None else None, mt, es, vec, cache, volatile))
    lw.set_block(res, lay, _from_mem(lw, out, dt))


def r_store(lw, op):
    p, v, mask = op.operands
    dt = v.dtype
    mt, es = _mem_type(dt), esize(dt)
    cache = _cache_qualifiers(op)
    b = lw.b
    if not p.is_block:
        pred = _and_pred(b, lw.scalar(mask) if mask is not None else None, lw.owner_pred(None))
        _st_asm(lw, lw.scalar(p), pred, _to_mem(lw, [lw.scalar(v)], dt), mt, es, 1, cache)
        return
    lay = lw.layout_of(p) if isinstance(lw.vals.get(p.id), tuple) else lw.want(p)
    lay = lw.assign.get(p) or lay
    ptrs = lw.block(p, lay)
    vals = _to_mem(lw, lw.block(v, lay), dt)
    masks = lw.block(mask, lay) if mask is not None else None
    owner = lw.owner_pred(lay)
    vec = _mem_vec(lw, lay, p, mask, es)
    for g in range(0, lay.n_regs, vec):
        pred = _and_pred(b, masks[g] if masks is not None else None, owner)
        if pred is None and not cache:
            _plain_store(lw, ptrs[g], vals[g:g + vec], mt, es)
        else:
            _st_asm(lw, ptrs[g], pred, vals[g:g + vec], mt, es, vec, cache)


_ATOM_INT = {"add": "add", "max": "max", "min": "min", "xchg": "exch", "and": "and", "or": "or", "xor": "xor"}


def _atom_one(lw, kind, ptr, val, cmp, pred, dt, sem, scope):
    """One element's atomic through inline PTX; returns the old value."""
    b = lw.b
    bits = dt.primitive_bitwidth if not dt.is_ptr() else 64
    fl = dt.is_floating()
    if kind == "cas":
        opname, ty = "cas", f".b{bits}"
    elif kind == "add":
        if fl:
            opname, ty = ("add.noftz" if bits == 16 else "add"), {"fp16": ".f16", "bf16": ".bf16", "fp32": ".f32", "fp64": ".f64"}[dt.name]
        else:
            opname, ty = "add", f".u{bits}"
    elif kind in ("max", "min"):
        if fl:
            return _atom_fminmax(lw, kind, ptr, val, pred, dt, sem, scope)
        opname, ty = kind, (f".s{bits}" if _is_signed(dt) else f".u{bits}")
    elif kind in ("xchg", "and", "or", "xor"):
        opname, ty = _ATOM_INT[kind], f".b{bits}"
    else:
        raise BackendError(f"atomic kind {kind}")
    letter = {16: "h", 32: "r", 64: "l"}[bits]
    it = ll.IntType(bits)
    tobits = (lambda x: b.bitcast(x, it)) if fl else (lambda x: b.ptrtoint(x, it) if dt.is_ptr() else x)
    ins, cons = [], []
    text = []
    idx = 1
    if pred is not None:
        ins.append(pred)
        cons.append("b")
        text.append(f"mov.b{bits} $0, 0;")
        pfx = f"@${idx} "
        idx += 1
    else:
        pfx = ""
    ins.append(ptr)
    cons.append("l")
    pi = idx
    idx += 1
    operands = [tobits(val)] if kind != "cas" else [tobits(cmp), tobits(val)]
    for x in operands:
        ins.append(x)
        cons.append(letter)
    args = ", ".join(f"${pi + 1 + j}" for j in range(len(operands)))
    text.append(f"{pfx}atom{_SEM.get(sem, '.acq_rel')}{_SCOPE.get(scope, '.gpu')}.global.{opname}{ty} $0, [ ${pi} + 0 ], {args};")
    old = b.asm(ll.FunctionType(it, [x.type for x in ins]), "\n\t".join(text), ",".join([f"={letter}"] + cons), ins, True)
    if fl:
        return b.bitcast(old, lty(dt))
    if dt.is_ptr():
        return b.inttoptr(old, GPTR)
    return old


def _atom_fminmax(lw, kind, ptr, val, pred, dt, sem, scope):
    """fp32/fp64 atomic max/min with the sign trick (Triton): for val >= 0 the float order is the
    signed integer order; for val < 0 it is the reversed unsigned order."""
    b = lw.b
    bits = dt.primitive_bitwidth
    it = ll.IntType(bits)
    iv = b.bitcast(val, it)
    neg = b.icmp_signed("<", iv, ll.Constant(it, 0))
    pos = b.not_(neg)
    p_pos = _and_pred(b, pred, pos)
    p_neg = _and_pred(b, pred, neg)
    letter = {32: "r", 64: "l"}[bits]
    op_pos = f"{kind}.s{bits}"  # val >= 0: signed max / signed min
    op_neg = f"{'min' if kind == 'max' else 'max'}.u{bits}"  # val < 0: max → unsigned min, min → unsigned max
    sem_s, scope_s = _SEM.get(sem, ".acq_rel"), _SCOPE.get(scope, ".gpu")
    text = (f"mov.b{bits} $0, 0;\n\t@$1 atom{sem_s}{scope_s}.global.{op_pos} $0, [ $3 + 0 ], $4;\n\t"
            f"@$2 atom{sem_s}{scope_s}.global.{op_neg} $0, [ $3 + 0 ], $4;")
    ins = [p_pos, p_neg, ptr, iv]
    old = b.asm(ll.FunctionType(it, [x.type for x in ins]), text, f"={letter},b,b,l,{letter}", ins, True)
    return b.bitcast(old, lty(dt))


def _atomic(lw, op, kind):
    res = op.result
    dt = res.dtype
    sem, scope = op.attrs.get("sem", "acq_rel"), op.attrs.get("scope", "gpu")
    if kind == "cas":
        p, cmp, v = op.operands
        mask = None
    else:
        p, v, mask = op.operands
        cmp = None
    b = lw.b
    used = bool(lw.uses.get(res.id))
    if not p.is_block:
        owner = lw.owner_pred(None)
        pred = _and_pred(b, lw.scalar(mask) if mask is not None else None, owner)
        old = _atom_one(lw, kind, lw.scalar(p), lw.scalar(v), lw.scalar(cmp) if cmp is not None else None, pred, dt, sem, scope)
        if used:  # broadcast thread 0's old value
            mt, es = _mem_type(dt), esize(dt)
            lw.smem_bytes = max(lw.smem_bytes, es)
            lw.barrier()
            ptr0 = lw.smem_ptr(ll.Constant(I32, 0))
            with b.if_then(lw.owner_pred(None)):
                b.store(_to_mem(lw, [old], dt)[0], ptr0, align=es)
            lw.barrier()
            old = _from_mem(lw, [b.load(ptr0, typ=mt, align=es)], dt)[0]
        lw.vals[res.id] = old
        return
    lay = lw.want(res)
    ptrs = lw.block(p, lay)
    vals = lw.block(v, lay)
    cmps = lw.block(cmp, lay) if cmp is not None else None
    masks = lw.block(mask, lay) if mask is not None else None
    owner = lw.owner_pred(lay)
    out = []
    for r in range(lay.n_regs):
        pred = _and_pred(b, masks[r] if masks is not None else None, owner)
        out.append(_atom_one(lw, kind, ptrs[r], vals[r], cmps[r] if cmps is not None else None, pred, dt, sem, scope))
    if used and owner is not None:  # replicated threads need the owner's old values
        mt, es = _mem_type(dt), esize(dt)
        lw.smem_bytes = max(lw.smem_bytes, lay.numel() * es)
        lw.barrier()
        lw._smem_write(_to_mem(lw, out, dt), lay, mt, es, pred=owner)
        lw.barrier()
        out = _from_mem(lw, lw._smem_read(lay, mt, es), dt)
    lw.set_block(res, lay, out)


def r_atomic_rmw(lw, op):
    _atomic(lw, op, op.attrs["kind"])


def r_atomic_cas(lw, op):
    _atomic(lw, op, "cas")


# ---- reductions ----------------------------------------------------------------------------

def _shfl(lw, x, mode: str, lane_arg):
    """shfl.sync.<mode> of any ≤64-bit value."""
    b = lw.b
    t = x.type
    if t == I32 or t == F32:
        sfx = "i32" if t == I32 else "f32"
        return lw.call(f"llvm.nvvm.shfl.sync.{mode}.{sfx}", t, [FULL_MASK, x, lane_arg, ll.Constant(I32, 31 if mode in ("bfly", "down", "idx") else 0)])
    if t == I64 or t == F64:
        iv = b.bitcast(x, I64) if t == F64 else x
        lo = b.trunc(iv, I32)
        hi = b.trunc(b.lshr(iv, ll.Constant(I64, 32)), I32)
        lo, hi = _shfl(lw, lo, mode, lane_arg), _shfl(lw, hi, mode, lane_arg)
        r = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ll.Constant(I64, 32)))
        return b.bitcast(r, F64) if t == F64 else r
    if isinstance(t, ll.IntType):
        r = _shfl(lw, b.zext(x, I32), mode, lane_arg)
        return b.trunc(r, t)
    if t in (F16, BF16):
        r = _shfl(lw, b.zext(b.bitcast(x, I16), I32), mode, lane_arg)
        return b.bitcast(b.trunc(r, I16), t)
    raise BackendError(f"shuffle of {t}")


def _combiner(lw, kind, dt):
    """Combine function over tuples (value,) or (value, index)."""
    b = lw.b
    fl = dt.is_floating()
    t = lty(dt)
    if kind in ("sum", "xor_sum", "max", "min", "prod"):
        def f(a, c):
            x, y = a[0], c[0]
            if kind == "sum":
                return (b.fadd(x, y) if fl else b.add(x, y),)
            if kind == "prod":
                return (b.fmul(x, y) if fl else b.mul(x, y),)
            if kind == "xor_sum":
                return (b.xor(x, y),)
            mx = kind == "max"
            if fl:
                return (lw.call(f"llvm.{'maxnum' if mx else 'minnum'}.{_fsuffix_t(x.type)}", x.type, [x, y]),)
            if dt.name == "i1":
                return (b.or_(x, y) if mx else b.and_(x, y),)
            nm = ("smax" if mx else "smin") if _is_signed(dt) else ("umax" if mx else "umin")
            return (lw.call(f"llvm.{nm}.i{dt.primitive_bitwidth}", t, [x, y]),)
        return f

    mx = kind == "argmax"

    def g(a, c):
        (va, ia), (vc, ic) = a, c
        if fl:
            better = b.fcmp_ordered(">" if mx else "<", vc, va)
            # NaN counts as the extreme (like torch.argmax)
            better = b.or_(better, b.and_(b.fcmp_unordered("uno", vc, vc), b.fcmp_ordered("ord", va, va)))
            eq = b.or_(b.fcmp_ordered("==", vc, va), b.and_(b.fcmp_unordered("uno", vc, vc), b.fcmp_unordered("uno", va, va)))
        else:
            sym = ">" if mx else "<"
            better = b.icmp_signed(sym, vc, va) if _is_signed(dt) else b.icmp_unsigned(sym, vc, va)
            eq = b.icmp_signed("==", vc, va)
        take = b.or_(better, b.and_(eq, b.icmp_signed("<", ic, ia)))
        return (b.select(take, vc, va), b.select(take, ic, ia))
    return g


def _fsuffix_t(t):
    return {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}[str(t)]


def _axis_bits(bases, axis):
    """(bits along axis, bits not along axis, mixed?)."""
    along, other, mixed = [], [], False
    for i, bb in enumerate(bases):
        a = bb[axis] != 0
        o = any(x for d, x in enumerate(bb) if d != axis)
        if a and o:
            mixed = True
        (along if a else other).append(i)
    return along, other, mixed


def r_reduce(lw, op):
    x = op.operands[0]
    axis, kind = op.attrs["axis"], op.attrs["kind"]
    res = op.result
    dt = x.dtype
    lay = lw.layout_of(x)
    if any(_axis_bits(g, axis)[2] for g in (lay.reg, lay.lane, lay.warp)):
        lay = default_layout(x.shape, lw.num_warps)
    regs = lw.block(x, lay)
    b = lw.b
    arg = kind in ("argmax", "argmin")
    work_dt = dt
    if kind == "sum" and dt.name in ("fp16", "bf16"):
        work_dt = T.float32
        regs = [b.fpext(r, F32) for r in regs]
    comb = _combiner(lw, kind, work_dt)
    vals = [(r, lw.index(lay, axis, i)) if arg else (r,) for i, r in enumerate(regs)]
    ra, ro, _ = _axis_bits(lay.reg, axis)
    acc = []
    for oi in range(1 << len(ro)):
        base = sum(1 << ro[j] for j in range(len(ro)) if oi >> j & 1)
        a = None
        for ai in range(1 << len(ra)):
            r = base | sum(1 << ra[j] for j in range(len(ra)) if ai >> j & 1)
            a = vals[r] if a is None else comb(a, vals[r])
        acc.append(a)
    la, _, _ = _axis_bits(lay.lane, axis)
    for i in la:
        acc = [comb(a, tuple(_shfl(lw, v, "bfly", ll.Constant(I32, 1 << i)) for v in a)) for a in acc]
    out_lay = lay.slice(axis)
    wa, _, _ = _axis_bits(lay.warp, axis)
    if wa:
        nw = 1 << len(wa)
        n_out = out_lay.numel()
        parts = [lty(work_dt)] + ([I32] if arg else [])
        sizes = [esize(work_dt)] + ([4] if arg else [])
        total = sum(n_out * nw * s for s in sizes)
        lw.smem_bytes = max(lw.smem_bytes, total + 16)
        lw.barrier()
        pb = lw.pb
        widx = None
        for j, i in enumerate(wa):
            bit = pb.and_(pb.lshr(lw.warp, ll.Constant(I32, i)), ll.Constant(I32, 1))
            if j:
                bit = pb.shl(bit, ll.Constant(I32, j))
            widx = bit if widx is None else pb.or_(widx, bit)
        tv, tm = lw.thread_flat(out_lay)
        offs = []
        for k in range(len(acc)):
            flat = lw.combine_const(tv, tm, out_lay.flat(out_lay.reg_coord(k)))
            offs.append(b.mul(flat, ll.Constant(I32, nw)))
        base_bytes = [0]
        for s in sizes[:-1]:
            base_bytes.append(base_bytes[-1] + n_out * nw * s)
        for k, a in enumerate(acc):
            for p, (v, t, s, bb) in enumerate(zip(a, parts, sizes, base_bytes)):
                off = b.add(b.mul(b.add(offs[k], widx), ll.Constant(I32, s)), ll.Constant(I32, bb))
                vv = b.zext(v, I8) if t == I1 else v
                b.store(vv, lw.smem_ptr(off), align=s)
        lw.barrier()
        new = []
        for k in range(len(acc)):
            a = None
            for w in range(nw):
                items = []
                for p, (t, s, bb) in enumerate(zip(parts, sizes, base_bytes)):
                    off = b.add(b.mul(b.add(offs[k], ll.Constant(I32, w)), ll.Constant(I32, s)), ll.Constant(I32, bb))
                    v = b.load(lw.smem_ptr(off), typ=I8 if t == I1 else t, align=s)
                    items.append(b.trunc(v, I1) if t == I1 else v)
                a = tuple(items) if a is None else comb(a, tuple(items))
            new.append(a)
        acc = new
    outs = [a[1] if arg else a[0] for a in acc]
    if work_dt != dt and not arg:
        outs = [b.fptrunc(v, lty(dt)) for v in outs]
    if not res.is_block:
        lw.vals[res.id] = outs[0]
    else:
        lw.set_block(res, out_lay, outs)


def _scan_ok(lay: Layout, axis: int) -> bool:
    seq = []
    for kind, group in (("r", lay.reg), ("l", lay.lane), ("w", lay.warp)):
        along, _, mixed = _axis_bits(group, axis)
        if mixed:
            return False
        for i in along:
            v = group[i][axis]
            if v & (v - 1):
                return False
            seq.append((v, kind, i))
    seq.sort()
    kinds = "".join(k for _, k, _ in seq)
    import re
    if not re.fullmatch(r"r*l*w*r*", kinds):
        return False
    for k in "lw":
        pos = [i for _, kk, i in seq if kk == k]
        if pos and pos != list(range(pos[0], pos[0] + len(pos))):
            return False
    return True


def r_scan(lw, op):
    x = op.operands[0]
    axis, kind, rev = op.attrs["axis"], op.attrs["kind"], bool(op.attrs.get("reverse", False))
    res = op.result
    dt = x.dtype
    lay = lw.layout_of(x)
    if not _scan_ok(lay, axis):
        order = (axis,) + tuple(d for d in reversed(range(x.type.numel and len(x.shape))) if d != axis)
        lay = blocked(x.shape, order, 1, lw.num_warps)
    regs = list(lw.block(x, lay))
    b = lw.b
    comb1 = _combiner(lw, kind, dt)
    comb = lambda p, q: comb1((p,), (q,))[0]  # noqa: E731
    # axis bits in increasing value
    reg_axis = sorted((lay.reg[i][axis], i) for i in _axis_bits(lay.reg, axis)[0])
    lane_axis = sorted((lay.lane[i][axis], i) for i in _axis_bits(lay.lane, axis)[0])
    warp_axis = sorted((lay.warp[i][axis], i) for i in _axis_bits(lay.warp, axis)[0])
    lane_min = lane_axis[0][0] if lane_axis else None
    warp_min = warp_axis[0][0] if warp_axis else None
    thr_min = min(v for v in (lane_min, warp_min) if v is not None) if (lane_min or warp_min) else None
    low = [i for v, i in reg_axis if thr_min is None or v < thr_min]
    high = [i for v, i in reg_axis if thr_min is not None and v > thr_min]
    other = _axis_bits(lay.reg, axis)[1]

    def reg_of(o, lo, hi):
        r = sum(1 << other[j] for j in range(len(other)) if o >> j & 1)
        r |= sum(1 << low[j] for j in range(len(low)) if lo >> j & 1)
        r |= sum(1 << high[j] for j in range(len(high)) if hi >> j & 1)
        return r
    n_o, n_lo, n_hi = 1 << len(other), 1 << len(low), 1 << len(high)
    lo_order = list(range(n_lo))[::-1] if rev else list(range(n_lo))
    # 1. in-thread inclusive scan over the low register bits
    for o in range(n_o):
        for h in range(n_hi):
            prev = None
            for lo in lo_order:
                r = reg_of(o, lo, h)
                if prev is not None:
                    regs[r] = comb(regs[prev], regs[r])
                prev = r
    last_lo = lo_order[-1]
    # 2. across lanes (Hillis–Steele on the chunk totals)
    pb = lw.pb
    if lane_axis:
        nl = len(lane_axis)
        lb0 = lane_axis[0][1]
        lidx = pb.and_(pb.lshr(lw.lane, ll.Constant(I32, lb0)), ll.Constant(I32, (1 << nl) - 1))
        for o in range(n_o):
            for h in range(n_hi):
                tot = regs[reg_of(o, last_lo, h)]
                incl = tot
                for s in range(nl):
                    delta = 1 << (lb0 + s)
                    if rev:
                        other_v = _shfl(lw, incl, "down", ll.Constant(I32, delta))
                        ok = b.icmp_unsigned("<", lidx, ll.Constant(I32, (1 << nl) - (1 << s)))
                    else:
                        other_v = _shfl(lw, incl, "up", ll.Constant(I32, delta))
                        ok = b.icmp_unsigned(">=", lidx, ll.Constant(I32, 1 << s))
                    incl = b.select(ok, comb(other_v, incl), incl)
                # exclusive prefix from the neighbouring lane
                d1 = 1 << lb0
                if rev:
                    ex = _shfl(lw, incl, "down", ll.Constant(I32, d1))
                    has = b.icmp_unsigned("<", lidx, ll.Constant(I32, (1 << nl) - 1))
                else:
                    ex = _shfl(lw, incl, "up", ll.Constant(I32, d1))
                    has = b.icmp_unsigned(">", lidx, ll.Constant(I32, 0))
                for lo in range(n_lo):
                    r = reg_of(o, lo, h)
                    regs[r] = b.select(has, comb(ex, regs[r]), regs[r])
    # 3. across warps and 4. across high register chunks, through shared memory
    if warp_axis or high:
        nwa = 1 << len(warp_axis)
        es = esize(dt)
        mt = mty(dt)
        sl = lay.slice(axis)
        n_other = sl.numel()
        lw.smem_bytes = max(lw.smem_bytes, n_other * n_hi * nwa * es)
        widx = ll.Constant(I32, 0)
        for j, (_, i) in enumerate(warp_axis):
            bit = pb.and_(pb.lshr(lw.warp, ll.Constant(I32, i)), ll.Constant(I32, 1))
            widx = pb.or_(widx, pb.shl(bit, ll.Constant(I32, j)) if j else bit)
        # the warp's chunk total: the value held by the last lane along the axis
        if lane_axis:
            nl = len(lane_axis)
            lb0 = lane_axis[0][1]
            amask = ((1 << nl) - 1) << lb0
            src_lane = pb.and_(lw.lane, ll.Constant(I32, ~amask & 31)) if rev else pb.or_(lw.lane, ll.Constant(I32, amask))
        tv, tm = lw.thread_flat(sl)
        lw.barrier()
        slot = {}
        for o in range(n_o):
            flat = lw.combine_const(tv, tm, sl.flat(sl.reg_coord(o)))
            for h in range(n_hi):
                tot = regs[reg_of(o, last_lo, h)]
                if lane_axis:
                    tot = _shfl(lw, tot, "idx", src_lane)
                base = b.mul(b.add(b.mul(flat, ll.Constant(I32, n_hi)), ll.Constant(I32, h)), ll.Constant(I32, nwa))
                slot[(o, h)] = base
                off = b.mul(b.add(base, widx), ll.Constant(I32, es))
                b.store(b.zext(tot, I8) if dt.name == "i1" else tot, lw.smem_ptr(off), align=es)
        lw.barrier()
        for o in range(n_o):
            carry = None  # combined totals of all earlier (h, w) chunks
            hs = list(range(n_hi))[::-1] if rev else list(range(n_hi))
            for h in hs:
                tots = []
                for w in range(nwa):
                    off = b.mul(b.add(slot[(o, h)], ll.Constant(I32, w)), ll.Constant(I32, es))
                    v = b.load(lw.smem_ptr(off), typ=mt, align=es)
                    tots.append(b.trunc(v, I1) if dt.name == "i1" else v)
                # exclusive prefix over the warps before mine (after mine when reversed)
                ex, has = None, None
                if nwa > 1:
                    order_w = list(range(nwa))[::-1] if rev else list(range(nwa))
                    run, pref = None, {}
                    for w in order_w:
                        run = tots[w] if run is None else comb(run, tots[w])
                        pref[w] = run
                    # ex = pref[widx - 1] (forward) / pref[widx + 1] (reverse)
                    for w in order_w[:-1]:
                        tgt = w - 1 if rev else w + 1
                        sel = b.icmp_unsigned("==", widx, ll.Constant(I32, tgt))
                        ex = pref[w] if ex is None else b.select(sel, pref[w], ex)
                    has = b.icmp_unsigned("<", widx, ll.Constant(I32, nwa - 1)) if rev else b.icmp_unsigned(">", widx, ll.Constant(I32, 0))
                for lo in range(n_lo):
                    r = reg_of(o, lo, h)
                    if ex is not None:
                        pre = b.select(has, comb(carry, ex), carry) if carry is not None else None
                        regs[r] = comb(pre, regs[r]) if pre is not None else b.select(has, comb(ex, regs[r]), regs[r])
                    elif carry is not None:
                        regs[r] = comb(carry, regs[r])
                chunk_total = None
                for w in range(nwa):
                    chunk_total = tots[w] if chunk_total is None else (comb(tots[w], chunk_total) if rev else comb(chunk_total, tots[w]))
                carry = chunk_total if carry is None else (comb(chunk_total, carry) if rev else comb(carry, chunk_total))
    lw.set_block(res, lay, regs)


def _identity(lw, kind, dt):
    t = lty(dt)
    if kind == "sum":
        return ll.Constant(t, 0.0 if dt.is_floating() else 0)
    if kind == "prod":
        return ll.Constant(t, 1.0 if dt.is_floating() else 1)
    if kind in ("max", "min"):
        mx = kind == "max"
        if dt.is_floating():
            return ll.Constant(t, float("-inf") if mx else float("inf")) if dt.name in ("fp32", "fp64") else \
                lw.pb.fptrunc(ll.Constant(F32, float("-inf") if mx else float("inf")), t)
        bits = dt.primitive_bitwidth
        if dt.name == "i1":
            return ll.Constant(t, 0 if mx else 1)
        if _is_signed(dt):
            return ll.Constant(t, -(1 << (bits - 1)) if mx else (1 << (bits - 1)) - 1)
        return ll.Constant(t, 0 if mx else (1 << bits) - 1)
    raise BackendError(f"scan kind {kind}")


# ---- dot -----------------------------------------------------------------------------------

def r_dot(lw, op):
    """FMA dot: A and B go to shared memory (row-major), then for each k every thread loads the
    A values of its C rows and the B values of its C columns (vectorized along k for A and along n
    for B) and does the outer-product FMAs. Register use stays at acc + a few operands.
    fp16/bf16 (and fp32 as tf32) dots go to tensor cores instead (compiler/backend/mma.py)."""
    if mma.mma_kind(op) is not None:
        return mma.lower_dot(lw, op)
    a, bv, c = op.operands
    res = op.result
    m, n = res.shape
    k = a.shape[1]
    cl = lw.want(res)
    al, bl = dot_operand(cl, 0, k), dot_operand(cl, 1, k)
    b = lw.b
    odt, adt = res.dtype, a.dtype
    if adt.is_floating():
        acc_t = F64 if odt.name == "fp64" or adt.name == "fp64" else F32
        up = (lambda x: b.fpext(x, acc_t) if x.type != acc_t else x)
        fma = lambda x, y, z: lw.call(f"llvm.fma.{'f64' if acc_t == F64 else 'f32'}", acc_t, [x, y, z])  # noqa: E731
    else:
        acc_t = I32
        up = (lambda x: b.sext(x, I32) if _is_signed(adt) else b.zext(x, I32)) if adt.primitive_bitwidth < 32 else (lambda x: x)
        fma = lambda x, y, z: b.add(b.mul(x, y), z)  # noqa: E731
    C = lw.block(c, cl)
    acc = [x if x.type == acc_t else (b.fpext(x, acc_t) if adt.is_floating() else x) for x in C]
    mta, esa = mty(adt), esize(adt)
    mtb, esb = mty(bv.dtype), esize(bv.dtype)
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    a_regs, b_regs = lw.block(a, a_lay), lw.block(bv, b_lay)
    off_b = (m * k * esa + 15) // 16 * 16
    lw.smem_bytes = max(lw.smem_bytes, off_b + k * n * esb)
    lw.barrier()
    lw._smem_write(a_regs, a_lay, mta, esa)
    lw._smem_write(b_regs, b_lay, mtb, esb, base_elems=off_b // esb)
    lw.barrier()
    tA, tAm = lw.thread_flat(al)
    tB, tBm = lw.thread_flat(bl)
    coords = [cl.reg_coord(r) for r in range(cl.n_regs)]
    m_parts = sorted({mm for mm, _ in coords})
    n_parts = sorted({nn for _, nn in coords})
    kv = 1
    while kv * 2 <= k and kv * 2 * esa <= 16 and not (tAm & (kv * 2 - 1)):
        kv *= 2
    # runs of consecutive n owned by one thread → vector loads of B rows
    runs, i = [], 0
    while i < len(n_parts):
        j = i
        while j + 1 < len(n_parts) and n_parts[j + 1] == n_parts[j] + 1:
            j += 1
        start, length = n_parts[i], j - i + 1
        while length:
            v = 1
            while v * 2 <= length and v * 2 * esb <= 16 and start % (v * 2) == 0 and not (tBm & (v * 2 - 1)):
                v *= 2
            runs.append((start, v))
            start, length = start + v, length - v
        i = j + 1

    def vload(elem_off, count, mt, es):
        ptr = lw.smem_ptr(b.mul(elem_off, ll.Constant(I32, es)))
        if count == 1:
            return [b.load(ptr, typ=mt, align=es)]
        vv = b.load(ptr, typ=ll.VectorType(mt, count), align=es * count)
        return [b.extract_element(vv, ll.Constant(I32, j)) for j in range(count)]
    for k0 in range(0, k, kv):
        avals = {}
        for mm in m_parts:
            vals = vload(lw.combine_const(tA, tAm, al.flat((mm, k0))), kv, mta, esa)
            avals[mm] = [up(x) for x in vals]
        for kk in range(kv):
            kx = k0 + kk
            bvals = {}
            for start, v in runs:
                vals = vload(lw.combine_const(tB, tBm, bl.flat((kx, start)) + off_b // esb), v, mtb, esb)
                for j, x in enumerate(vals):
                    bvals[start + j] = up(x)
            for r, (mm, nn) in enumerate(coords):
                acc[r] = fma(avals[mm][kk], bvals[nn], acc[r])
    if lty(odt) != acc_t:
        acc = [b.fptrunc(x, lty(odt)) for x in acc]
    lw.set_block(res, cl, acc)


# ---- control flow --------------------------------------------------------------------------

def _slot_layout(lw, v: ir.Value):
    return lw.want(v) if v.is_block else None


def _get_as(lw, v: ir.Value, lay):
    return lw.block(v, lay) if lay is not None else [lw.scalar(v)]


def _bind(lw, v: ir.Value, lay, regs):
    if lay is None:
        lw.vals[v.id] = regs[0]
    else:
        lw.set_block(v, lay, regs)


def _region(lw, block: ir.Block):
    lw.scopes.append({})
    try:
        return lw.lower_block(block)
    finally:
        lw.scopes.pop()


def _region_yields(lw, block: ir.Block, lays: list) -> list:
    """Lower `block` in its own scope; the registers of its terminator's operands, in `lays`."""
    lw.scopes.append({})
    try:
        term = lw.lower_block(block)
        ys = term.operands if term is not None else []
        return [_get_as(lw, y, l) for y, l in zip(ys, lays)]
    finally:
        lw.scopes.pop()


def r_for(lw, op):
    if pipeline.lower_for(lw, op):  # K loops feeding a tensor-core dot: cp.async, num_stages buffers
        return
    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    inits = op.operands[3:]
    body = op.regions[0]
    b = lw.b
    lays = [_slot_layout(lw, a) for a in body.args[1:]]
    init_regs = [_get_as(lw, v, l) for v, l in zip(inits, lays)]
    header, exitb, iv, phis = loop_head(lw, "for", lb, ub, step, init_regs, _is_signed(op.operands[0].dtype))
    lw.vals[body.args[0].id] = iv
    for a, l, ps in zip(body.args[1:], lays, phis):
        _bind(lw, a, l, ps)
    nxt = _region_yields(lw, body, lays)
    loop_back(lw, header, iv, step, phis, nxt)
    b.position_at_end(exitb)
    for r, l, ps in zip(op.results, lays, phis):
        _bind(lw, r, l, ps)


def loop_head(lw, prefix: str, lb, ub, step, reg_lists: list, signed: bool):
    """Branch into a counted loop's header: a phi for the induction variable (from `lb`) and one
    per register of each list in `reg_lists` (their values on entry), the exit test against `ub`,
    and the builder left in the body block. Returns (header, exit block, iv, phis per list)."""
    b = lw.b
    pre = b.block
    header = lw.func.append_basic_block(f"{prefix}.header")
    bodyb = lw.func.append_basic_block(f"{prefix}.body")
    exitb = lw.func.append_basic_block(f"{prefix}.exit")
    b.branch(header)
    b.position_at_end(header)
    iv = b.phi(lb.type, name="iv")
    iv.add_incoming(lb, pre)
    phis = []
    for regs in reg_lists:
        ps = []
        for x in regs:
            p = b.phi(x.type)
            p.add_incoming(x, pre)
            ps.append(p)
        phis.append(ps)
    neg_step = isinstance(step, ll.Constant) and isinstance(step.constant, int) and step.constant < 0
    if signed:
        cond = b.icmp_signed(">" if neg_step else "<", iv, ub)
    else:
        cond = b.icmp_unsigned("<", iv, ub)
    b.cbranch(cond, bodyb, exitb)
    b.position_at_end(bodyb)
    return header, exitb, iv, phis


def loop_back(lw, header, iv, step, phis: list, nexts: list) -> None:
    """Close a loop opened by loop_head: the next values of iv and of every phi, and the back edge."""
    b = lw.b
    iv_next = b.add(iv, step)
    end = b.block
    iv.add_incoming(iv_next, end)
    for ps, regs in zip(phis, nexts):
        for p, x in zip(ps, regs):
            p.add_incoming(x, end)
    b.branch(header)


def r_if(lw, op):
    cond = lw.scalar(op.operands[0])
    b = lw.b
    lays = [_slot_layout(lw, r) for r in op.results]
    thenb = lw.func.append_basic_block("if.then")
    elseb = lw.func.append_basic_block("if.else")
    merge = lw.func.append_basic_block("if.end")
    b.cbranch(cond, thenb, elseb)
    incoming = []
    for region, bb in zip(list(op.regions) + [None] * (2 - len(op.regions)), (thenb, elseb)):
        b.position_at_end(bb)
        vals = []
        if region is not None:
            vals = _region_yields(lw, region, lays)
        incoming.append((b.block, vals))
        b.branch(merge)
    b.position_at_end(merge)
    for i, (r, l) in enumerate(zip(op.results, lays)):
        regs = []
        n = len(incoming[0][1][i])
        for j in range(n):
            p = b.phi(incoming[0][1][i][j].type)
            for blk, vals in incoming:
                p.add_incoming(vals[i][j], blk)
            regs.append(p)
        _bind(lw, r, l, regs)


def r_while(lw, op):
    before, after = op.regions
    b = lw.b
    lays = [_slot_layout(lw, a) for a in before.args]
    init_regs = [_get_as(lw, v, l) for v, l in zip(op.operands, lays)]
    pre = b.block
    header = lw.func.append_basic_block("while.before")
    bodyb = lw.func.append_basic_block("while.after")
    exitb = lw.func.append_basic_block("while.exit")
    b.branch(header)
    b.position_at_end(header)
    phis = []
    for regs in init_regs:
        ps = []
        for x in regs:
            p = b.phi(x.type)
            p.add_incoming(x, pre)
            ps.append(p)
        phis.append(ps)
    for a, l, ps in zip(before.args, lays, phis):
        _bind(lw, a, l, ps)
    # the before-region's values dominate the after-region and the exit: keep its scope open
    lw.scopes.append({})
    term = lw.lower_block(before)
    c = lw.scalar(term.operands[0])
    fwd = term.operands[1:]
    flays = [_slot_layout(lw, a) for a in after.args]
    fregs = [_get_as(lw, v, l) for v, l in zip(fwd, flays)]
    b.cbranch(c, bodyb, exitb)
    b.position_at_end(bodyb)
    for a, l, regs in zip(after.args, flays, fregs):
        _bind(lw, a, l, regs)
    nxt = _region_yields(lw, after, lays)
    end = b.block
    for ps, regs in zip(phis, nxt):
        for p, x in zip(ps, regs):
            p.add_incoming(x, end)
    b.branch(header)
    lw.scopes.pop()
    b.position_at_end(exitb)
    for r, l, regs in zip(op.results, flays, fregs):
        _bind(lw, r, l, regs)


# ==============================================================================================
# The table

POLY = {}      # name → rule(lw, op, layout|None) -> regs|scalar
RULES = {}     # every op name → rule


def _register():
    poly = {"const": r_const, "arange": r_arange, "splat": r_splat, "broadcast": r_broadcast,
            "expand_dims": r_expand_dims, "trans": r_trans, "reshape": r_reshape, "assume": r_assume,
            "addptr": r_addptr, "cmp": r_cmp, "select": r_select, "fma": r_fma, "umulhi": r_umulhi,
            "cast": r_cast, "bitcast": r_bitcast, "not": r_not, "neg": r_neg, "abs": r_abs,
            "program_id": r_program_id, "num_programs": r_num_programs}
    for name in ir.BINARY_OPS:
        poly[name] = _binary(name)
    for name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "erf", "tanh"):
        poly[name] = r_unary_math
    POLY.update(poly)
    RULES.update(poly)
    RULES.update({"load": r_load, "store": r_store, "atomic_rmw": r_atomic_rmw, "atomic_cas": r_atomic_cas,
                  "reduce": r_reduce, "scan": r_scan, "dot": r_dot, "barrier": r_barrier,
                  "for": r_for, "if": r_if, "while": r_while, "return": r_return,
                  "print": r_print, "assert": r_assert})


_register()


# ==============================================================================================
# Entry point

def lower_to_llvm(fn: ir.Function, *, num_warps: int, num_stages: int = 1, target: str | None = None,
                  debug: bool = False) -> Lowering:
    if num_warps < 1 or num_warps & (num_warps - 1) or num_warps > 32:
        raise BackendError(f"num_warps must be a power of two between 1 and 32, got {num_warps}")
    mma.configure(target)  # the dot lowering's choice of mma.sync / wgmma depends on the target
    lw = Lowering(fn, num_warps, "")
    lw.num_stages = num_stages  # software pipelining depth of dot loops (compiler/backend/pipeline.py)
    lw.debug = debug            # device_assert is checked on the GPU only in debug mode, as in Triton
    return lw.run()


def module_text(lw: Lowering) -> str:
    """The module's LLVM IR, with `"nvvm.maxntid"` on the kernel (llvmlite cannot spell string
    function attributes)."""
    text = str(lw.module)
    head = f'define ptx_kernel void @"{lw.fn.name}"('
    i = text.index(head)
    j = text.index("\n", i)
    line = text[i:j]
    text = text[:i] + line + f' "nvvm.maxntid"="{32 * lw.num_warps}"' + text[j:]
    nv = sorted(n for n in lw._intrinsics if n.startswith("__nv_"))
    if nv:
        from .llvm_target import libdevice_defs
        keep = [ln for ln in text.split("\n") if not (ln.startswith("declare") and any(f'@"{n}"(' in ln for n in nv))]
        text = "\n".join(keep) + "\n" + libdevice_defs(nv) + \
            '!llvm.module.flags = !{!900}\n!900 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'
    return text


def compile_ir(fn: ir.Function, *, num_warps: int, num_stages: int = 3, target: str = "sm_90",
               debug: bool = False) -> dict:
    """Compile block IR to PTX. Returns {name, llir, ptx, shared, num_warps, params}."""
    cpu = cpu_for(target)
    lw = lower_to_llvm(fn, num_warps=num_warps, num_stages=num_stages, target=target, debug=debug)
    if getattr(lw, "needs_sm90a", False):  # wgmma (compiler/backend/wgmma.py)
        cpu = "sm_90a"
    text = module_text(lw)
    llir, ptx = llir_to_ptx(text, cpu=cpu)
    return {"name": fn.name, "llir": llir, "ptx": ptx, "shared": lw.smem_bytes, "num_warps": num_warps,
            "num_stages": num_stages, "params": lw.params, "target": cpu}
