"""Tensor descriptors through Hopper's bulk tensor copy engine (TMA): `tma_load` and `tma_store`.

The front end makes these ops for a host descriptor that takes a CUtensorMap (tensor_map.py says
which); the map is a 128-byte kernel parameter passed `byval` and marked `"nvvm.grid_constant"`
(module_text), whose generic address the copies name. A block lands in shared memory as the
swizzled tile of tensor_map.py (BoxTile: dot_layouts.SmemTile, panels of the swizzle width, rows
the block's leading dims flattened), one copy per panel, so wgmma can read it as it is.

  tma_load   (outside a pipelined loop) bar.sync; thread 0: mbarrier.init(1), fence; bar.sync;
             thread 0: mbarrier.arrive.expect_tx(tile bytes) and the copies; every thread waits for
             phase 0 (try_wait.parity loop), reads its registers from the tile; bar.sync;
             thread 0 invalidates the barrier (its memory is reused).
  tma_store  bar.sync; every thread writes its registers into the tile — a 16-bit wgmma/mma
             accumulator (the usual `acc.to(fp16)`) with `stmatrix.m8n8.x4`, four 8×8 blocks an
             instruction (fragment_convert.write_stmatrix; Triton's epilogue), anything else with
             vector stores — fence.proxy.async (ordinary stores become visible to the copy
             engine); bar.sync; thread 0: the copies, commit_group, wait_group.read 0 (the tile
             is read); bar.sync. In a persistent tile loop whose other shared-memory uses are the
             K loop's stages alone (lw.defer_store_wait: persistent.py), the wait moves to the
             start of the next store to the tile (and the loop's end), so that the copy engine
             reads the tile while the next tile's K loop runs, as Triton's.
Out-of-bounds elements of a load are zero (or NaN: the map's fill mode, from the padding option);
those of a store are not written — by the hardware, so no masks here.

  make_tensor_map  (a device-side descriptor, `tl.make_tensor_descriptor`) writes the 128-byte map
             into this program's slot of the kernel's global scratch memory: warp 0 zeroes a
             template in shared memory, thread 0 fills its fields (tensormap.replace), warp 0
             copies it out with a release fence for the tensor-map proxy
             (tensormap.cp_fenceproxy), then acquires it (fence.proxy.tensormap::generic.acquire);
             bar.sync. Its result is the map's generic address, which the copies name as they
             name a parameter's.

In a dot's K loop the loads are pipelined instead (multi_dot.py through pipeline.pipelined_loop):
one mbarrier per stage, armed and filled by thread 0 (issue_copies), waited for with the parity of
the stage's use count (wait). All PTX here is inline assembly: LLVM's TMA intrinsics change
signature between versions, the instructions do not.
"""
from __future__ import annotations

import math

from llvmlite import ir as ll

from .. import tensor_map
from .dot_layouts import SmemTile
from .llvm_types import I32, I64, lty
from .smem_tiles import read_tile, write_tile
from . import fragment_convert, wgmma

VOID = ll.VoidType()
MBARRIER_BYTES = 8


class BoxTile(SmemTile):
    """The shared-memory tile of an N-D TMA box: SmemTile [prod(block[:-1]), block[-1]], row-major
    with panels, addressed with N-D coordinates (the leading dims are the row, bit-concatenated:
    each is a power of two, so offsets stay XOR-linear in the coordinate bits)."""

    def __init__(self, block: tuple, es: int, base: int = 0):
        super().__init__((math.prod(block[:-1]), block[-1]), 1, es, base=base, panels=True)
        self.block = tuple(block)

    def offset(self, coord: tuple) -> int:
        if len(coord) == 2 and len(self.block) == 2:
            return super().offset(coord)
        row = 0
        for d in range(len(self.block) - 1):
            row = row * self.block[d] + coord[d]
        return super().offset((row, coord[-1]))

    @property
    def panels(self) -> int:
        return self.cols // self.panel_cols

    def copies(self):
        """(panel, row chunk, byte offset in the tile) of each copy of the box: a panel holds the
        rows one after the other, a chunk tensor_map.MAX_BOX of the first dim's."""
        chunk_rows = min(self.block[0], tensor_map.MAX_BOX) * math.prod(self.block[1:-1])
        for p in range(self.panels):
            for j in range(tensor_map.row_chunks(self.block)):
                yield p, j, (p * self.rows + j * chunk_rows) * self.panel_cols * self.es


def tile_for(v, base: int = 0) -> BoxTile:
    """The tile a tma_load's result (or a tma_store's value) occupies."""
    es = v.dtype.itemsize
    tile = BoxTile(v.shape, es, base)
    assert tile.panel_cols == tensor_map.panel_cols(tuple(v.shape), es)
    return tile


# -- inline PTX ---------------------------------------------------------------------------------

def _asm(lw, text: str, cons: str, args: list, ret=VOID):
    fty = ll.FunctionType(ret, [a.type for a in args])
    return lw.b.call(ll.InlineAsm(fty, text, cons, side_effect=True), args)


def smem_address(lw, byte):
    """The 32-bit shared-memory address of absolute byte offset `byte` (int or i32)."""
    base = lw.b.ptrtoint(lw.smem, I32)
    return lw.b.add(base, byte if not isinstance(byte, int) else ll.Constant(I32, byte))


def map_address(lw, tmap):
    """The tensor map's generic address (the byval parameter, cvta.param'd by LLVM)."""
    return lw.b.ptrtoint(tmap, I64)


def prefetch_pointer_maps(lw) -> None:
    """At the kernel's entry thread 0 asks for the descriptors of the maps the launch built for
    pointer tiles (pointer_tma.py), as CUTLASS's kernels do: the copy engine otherwise fetches
    the 128 bytes at the first copy, in series with that copy's own latency, in every program
    whose SM has not seen the map yet; a decode-shape matmul (32 programs, ~30 µs) pays it once
    per program."""
    fn = lw.fn
    maps = [a for i, a in enumerate(fn.args) if i < len(fn.arg_attrs) and fn.arg_attrs[i].get("pointer_map")]
    for a in maps:   # predicated, not branched around: ptxas keeps it ahead of the index arithmetic
        _asm(lw, "{\n\t.reg .pred p;\n\tsetp.eq.u32 p, $1, 0;\n\t@p prefetch.tensormap [$0];\n\t}", "l,r",
             [map_address(lw, lw.vals[a.id]), lw.tid])


def init_barriers(lw, first, count: int) -> None:
    """Thread 0 initializes `count` mbarriers (arrival count 1) from absolute byte `first`, made
    visible to the copy engine; a bar.sync before (the memory may still be in use) and after."""
    lw.barrier()
    with lw.b.if_then(elected(lw)):
        for i in range(count):
            _asm(lw, "mbarrier.init.shared::cta.b64 [$0], 1;", "r",
                 [smem_address(lw, first + i * MBARRIER_BYTES)])
        _asm(lw, "fence.mbarrier_init.release.cluster;", "", [])
    lw.barrier()


def invalidate_barriers(lw, first, count: int) -> None:
    """After a bar.sync that every waiter has passed: thread 0 invalidates them (their memory is
    reused), then a bar.sync."""
    with lw.b.if_then(elected(lw)):
        for i in range(count):
            _asm(lw, "mbarrier.inval.shared::cta.b64 [$0];", "r", [smem_address(lw, first + i * MBARRIER_BYTES)])
    lw.barrier()


def elected(lw):
    """i1: this is thread 0, the one that arms barriers and issues copies."""
    return lw.b.icmp_unsigned("==", lw.tid, ll.Constant(I32, 0))


def elected_by_warp0(lw):
    """i1: the one lane `elect.sync` picks in warp 0 (every lane of the warp must run it): as a
    predicate of issue_copies, ptxas knows a single lane issues and needs no loop over the lanes."""
    one = _asm(lw, "{\n\t.reg .pred e;\n\telect.sync _|e, 0xffffffff;\n\tselp.u32 $0, 1, 0, e;\n\t}", "=r", [], ret=I32)
    return lw.b.and_(lw.b.icmp_unsigned("<", lw.tid, ll.Constant(I32, 32)), lw.b.icmp_unsigned("!=", one, ll.Constant(I32, 0)))


def _coordinates(lw, offsets: list, tile: BoxTile, panel: int, chunk: int = 0) -> list:
    """The copy's coordinates, innermost dim first, of panel `panel`, row chunk `chunk` of the
    block at `offsets`."""
    b = lw.b
    inner = offsets[-1]
    if panel:
        inner = b.add(inner, ll.Constant(I32, panel * tile.panel_cols))
    outer = list(reversed(offsets[:-1]))
    if chunk:
        outer[-1] = b.add(outer[-1], ll.Constant(I32, chunk * tensor_map.MAX_BOX))
    return [inner] + outer


def _copy_text(rank: int, direction: str) -> str:
    coords = ", ".join(f"${i}" for i in range(2, 2 + rank))
    if direction == "load":
        return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                f"[$0], [$1, {{{coords}}}], [${2 + rank}];")
    return f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [$1, {{{coords}}}], [$0];"


def issue_copies(lw, loads: list, bar, pred=None) -> None:
    """From the elected thread (the caller's branch, or every thread with `pred`, an i1 true in the
    elected one: each instruction predicated, no branch — ptxas then issues the copies once from the
    warp, without its per-lane loops around them): arm mbarrier `bar` (i32 address) with the bytes
    of every tile and start each copy. `loads`: (tensor map, i32 offsets, tile, i32 address of the
    tile's first byte)."""
    nbytes = sum(tile.nbytes for _, _, tile, _ in loads)

    def emit(text, cons, args):
        if pred is None:
            return _asm(lw, text, cons, args)
        return _asm(lw, f"{{\n\t.reg .pred q;\n\tsetp.ne.b32 q, ${len(args)}, 0;\n\t@q {text}\n\t}}", cons + ",r",
                    args + [lw.b.zext(pred, I32)])
    emit("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r", [bar, ll.Constant(I32, nbytes)])
    for tmap, offsets, tile, dst in loads:
        rank = len(tile.block)
        addr = map_address(lw, tmap)
        for p, j, at in tile.copies():
            d = lw.b.add(dst, ll.Constant(I32, at)) if at else dst
            coords = _coordinates(lw, offsets, tile, p, j)
            emit(_copy_text(rank, "load"), ",".join(["r", "l"] + ["r"] * rank + ["r"]), [d, addr] + coords + [bar])


def wait(lw, bar, parity) -> None:
    """Every thread spins on mbarrier `bar` until the phase of parity `parity` (i32 0/1) completes."""
    b = lw.b
    fn = b.function
    loop = fn.append_basic_block("tma_wait")
    done = fn.append_basic_block("tma_ready")
    b.branch(loop)
    b.position_at_end(loop)
    ok = _asm(lw, "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\t"
                  "selp.u32 $0, 1, 0, p;\n\t}", "=r,r,r", [bar, parity], ret=I32)
    b.cbranch(b.icmp_unsigned("!=", ok, ll.Constant(I32, 0)), done, loop)
    b.position_at_end(done)


# -- the rules ----------------------------------------------------------------------------------

def _end(tile: BoxTile) -> int:
    return (tile.base + tile.nbytes + 1023) // 1024 * 1024


def lower_tma_load(lw, op) -> None:
    res = op.result
    tile = tile_for(res)
    bar_rel = _end(tile)
    lw.smem_bytes = max(lw.smem_bytes, bar_rel + MBARRIER_BYTES)
    reserved = lw.smem_reserved
    bar_abs = reserved + bar_rel
    init_barriers(lw, bar_abs, 1)
    bar = smem_address(lw, bar_abs)
    offsets = [lw.scalar(o) for o in op.operands[1:]]
    with lw.b.if_then(elected(lw)):
        issue_copies(lw, [(lw.scalar(op.operands[0]), offsets, tile, smem_address(lw, reserved + tile.base))], bar)
    wait(lw, bar, ll.Constant(I32, 0))
    lay = lw.want(res)
    lw.set_block(res, lay, read_tile(lw, lay, tile, lty(res.dtype)))
    lw.barrier()
    invalidate_barriers(lw, bar_abs, 1)


def lower_tma_store(lw, op) -> None:
    value = op.operands[-1]
    tile = tile_for(value)
    lw.smem_bytes = max(lw.smem_bytes, tile.nbytes)
    lay = lw.layout_of(value)
    regs = lw.block(value, lay)
    deferred = lw.defer_store_wait
    if deferred:   # the previous store from this tile may still be reading it
        wait_stores_read(lw)
    lw.barrier()   # the tile's memory may still be read by an earlier use
    if fragment_convert.stmatrix_applies(lay, tile.es, lw.options.target):
        fragment_convert.write_stmatrix(lw, regs, lay, tile)
    else:
        write_tile(lw, regs, lay, tile, lty(value.dtype))
    wgmma.proxy_fence(lw)
    lw.barrier()
    offsets = [lw.scalar(o) for o in op.operands[1:-1]]
    rank = len(tile.block)
    with lw.b.if_then(elected(lw)):
        addr = map_address(lw, lw.scalar(op.operands[0]))
        src = smem_address(lw, lw.smem_reserved + tile.base)
        for p, j, at in tile.copies():
            s = lw.b.add(src, ll.Constant(I32, at)) if at else src
            _asm(lw, _copy_text(rank, "store"), ",".join(["r", "l"] + ["r"] * rank),
                 [s, addr] + _coordinates(lw, offsets, tile, p, j))
        _asm(lw, "cp.async.bulk.commit_group;", "", [])
        if not deferred:
            _asm(lw, "cp.async.bulk.wait_group.read 0;", "", [])
    if not deferred:
        lw.barrier()


def wait_stores_read(lw) -> None:
    """The elected thread (the one that issued them) waits until every bulk store has read its
    shared memory; the caller's bar.sync then tells the others."""
    with lw.b.if_then(elected(lw)):
        _asm(lw, "cp.async.bulk.wait_group.read 0;", "", [])


# -- device-side descriptors ----------------------------------------------------------------------

MAP_BYTES = 128
# tensormap.replace's field values (PTX ISA, "Tensor-map": elemtype, swizzle_mode, fill_mode)
_ELEMTYPE = {"bf16": 10, "fp16": 6, "fp32": 7, "fp64": 9}
_SWIZZLE_MODE = {16: 0, 32: 1, 64: 2, 128: 3}


def _elemtype(dt) -> int:
    if dt.name in _ELEMTYPE:
        return _ELEMTYPE[dt.name]
    es = dt.primitive_bitwidth // 8
    signed = dt.is_int() and dt.is_int_signed()
    return {1: 0, 2: 1, 4: 3 if signed else 2, 8: 5 if signed else 4}[es]


def tensor_maps_per_program(fn) -> int:
    """Maps a program of `fn` writes into its global scratch (Triton's metadata: global_scratch_size
    is 128 bytes a map)."""
    slots = tensor_map_slots(fn)
    return max(slots.values()) + 1 if slots else 0


def tensor_map_slots(fn) -> dict:
    """The scratch slot of each make_tensor_map (by op id): one a distinct map. Creations of the same
    map (the same base, shape, strides, block and padding — a descriptor made again in a loop) share
    their slot, as Triton's CSE and loop-invariant code motion leave one creation of it; re-writing
    a slot writes the bytes it holds."""
    slots, keys = {}, {}
    for op in fn.walk():
        if op.name == "make_tensor_map":
            key = (tuple(_value_key(v) for v in op.operands[1:]), tuple(op.attrs["block"]), op.attrs.get("padding"))
            slots[id(op)] = keys.setdefault(key, len(keys))
    return slots


def _value_key(v) -> tuple:
    """What `v` is, structurally: a constant by its value, a cast by what it casts, else itself."""
    op = v.owner
    if op is not None and op.name == "const" and not v.is_block:
        return ("const", v.dtype.name, repr(op.attrs.get("value")))
    if op is not None and op.name == "cast" and len(op.operands) == 1:
        return ("cast", v.dtype.name, _value_key(op.operands[0]))
    return ("value", v.id)


def _program_index(lw):
    """The linear program id (x fastest), as i64."""
    b = lw.b
    sreg = [lw.call(f"llvm.nvvm.read.ptx.sreg.{r}", I32, []) for r in
            ("ctaid.x", "ctaid.y", "ctaid.z", "nctaid.x", "nctaid.y")]
    x, y, z, nx, ny = (b.zext(v, I64) for v in sreg)
    return b.add(x, b.mul(nx, b.add(y, b.mul(ny, z))))


def lower_make_tensor_map(lw, op) -> None:
    b = lw.b
    lw.needs_sm90a = True   # tensormap.replace
    scratch, base = op.operands[0], op.operands[1]
    block = tuple(op.attrs["block"])
    rank = len(block)
    shape = [lw.scalar(v) for v in op.operands[2:2 + rank]]
    strides = [lw.scalar(v) for v in op.operands[2 + rank:2 + 2 * rank]]
    elt = base.dtype.element_ty
    es = elt.primitive_bitwidth // 8
    # Triton's layout: CTA r of program p's cluster owns slot p * num_ctas + r; the one CTA that
    # runs a program here is its rank 0
    per_program = tensor_maps_per_program(lw.fn) * lw.options.num_ctas
    slot = b.add(b.mul(_program_index(lw), ll.Constant(I64, per_program)),
                 ll.Constant(I64, tensor_map_slots(lw.fn)[id(op)]))
    gaddr = b.add(b.ptrtoint(lw.scalar(scratch), I64), b.mul(slot, ll.Constant(I64, MAP_BYTES)))
    lw.smem_bytes = max(lw.smem_bytes, MAP_BYTES)
    tmpl = smem_address(lw, lw.smem_reserved)
    lw.barrier()   # the template's shared memory may still be in use
    with b.if_then(b.icmp_unsigned("==", lw.warp, ll.Constant(I32, 0))):
        _asm(lw, "st.shared.b32 [$0], 0;", "r", [b.add(tmpl, b.mul(lw.lane, ll.Constant(I32, 4)))])
        _asm(lw, "bar.warp.sync -1;", "", [])
        with b.if_then(elected(lw)):
            def put(field, value, ord_=None, width=32):
                where = "" if ord_ is None else f" {ord_},"
                if isinstance(value, int):
                    _asm(lw, f"tensormap.replace.tile.{field}.shared::cta.b1024.b32 [$0],{where} {value};", "r", [tmpl])
                else:
                    _asm(lw, f"tensormap.replace.tile.{field}.shared::cta.b1024.b{width} [$0],{where} $1;",
                         "r," + ("l" if width == 64 else "r"), [tmpl, value])
            put("global_address", b.ptrtoint(lw.scalar(base), I64), width=64)
            put("rank", rank - 1)
            for i, extent in enumerate(tensor_map.box(block, es)):
                put("box_dim", ll.Constant(I32, extent), i)
                put("global_dim", shape[rank - 1 - i], i)
                put("element_stride", ll.Constant(I32, 1), i)
            for i in range(rank - 1):
                # in bytes (the H100's driver 580 JIT; Triton shifts right by 4 only for the ptxas
                # of CUDA 12.5 and before, which took the field in 16-byte units)
                put("global_stride", b.mul(strides[rank - 2 - i], ll.Constant(I64, es)), i, width=64)
            put("elemtype", _elemtype(elt))
            put("interleave_layout", 0)
            put("swizzle_mode", _SWIZZLE_MODE[tensor_map.swizzle_bytes(block, es)])
            put("fill_mode", 1 if op.attrs.get("padding") == "nan" else 0)
        _asm(lw, "bar.warp.sync -1;", "", [])
        _asm(lw, "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned "
                 f"[$0], [$1], {MAP_BYTES};", "l,r", [gaddr, tmpl])
        _asm(lw, f"fence.proxy.tensormap::generic.acquire.gpu [$0], {MAP_BYTES};", "l", [gaddr])
        # as Triton does after the acquire: a bulk-group round trip (ptxas misses a fence there otherwise)
        _asm(lw, "cp.async.bulk.commit_group;", "", [])
        _asm(lw, "cp.async.bulk.wait_group.read 0;", "", [])
    lw.barrier()
    lw.vals[op.result.id] = b.inttoptr(gaddr, ll.PointerType())
