"""Block IR → LLVM IR (llvmlite) → PTX, for NVIDIA GPUs (sm_80+; tuned for sm_90): the table of
lowering rules, one per op, and the entry point `compile_ir`.

The rules live by family (elementwise.py, memory.py, reduction.py, dot.py, control_flow.py,
debug_ops.py); the state they share is lowering.py's `Lowering`, below them. Rules in `by_layout`
take the wanted output layout and return the registers (lowering.py says why); the `statements`
set their results themselves.

Kernel ABI (what the launcher passes, in order, one per `fn.args` that is not `equal_to_1`):
  pointers            → u64 (`ptr addrspace(1)`)
  i1                  → i32 (0 or 1)
  i8/i16/i32/i64, u*  → the integer of that width
  fp16 / bf16         → 16-bit raw bits (`.b16`, pass the value's bit pattern as uint16)
  fp32 / fp64         → float / double
  tensor maps (`tmap`, a TMA descriptor's CUtensorMap, tma.py) → 128 bytes by value
  pointer tiles' tensor maps (knobs.codegen.pointer_tma, pointer_tma.py: appended to `fn`'s
  arguments by compile_ir, listed in `compile_ir(...)["pointer_maps"]`; the launch builds them from
  the other arguments, runtime/pointer_maps.py) → 128 bytes by value, after every argument
Arguments specialized as `equal_to_1` are not kernel parameters (the kernel uses the constant 1).
`compile_ir(...)["params"]` lists the ABI of each passed parameter.
Block dims: (32 * num_warps, 1, 1), or (32 * launch_warps, 1, 1) when `compile_ir(...)` reports
"launch_warps" (a warp-specialized kernel's producer warpgroup: warp_specialize.py); dynamic shared
memory: `compile_ir(...)["shared"]` bytes.
"""
from __future__ import annotations

import dataclasses

from .. import ir, tensor_map
from . import control_flow, debug_ops, device_calls, dot, elementwise as ew, fp8, histogram, memory, reduction, shape_ops, tma
from . import loop_metadata, multi_dot, pinned_tma, pipeline, pointer_tma, warp_specialize
from .errors import BackendError
from .llvm_target import cpu_for, libdevice_defs, llir_to_ptx
from .llvm_types import I32
from .lowering import Lowering, RuleTable
from .options import LoweringOptions

MATH_FUNCTIONS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "erf", "tanh")

RULES = RuleTable(
    by_layout={
        # constants, indices, shapes
        "const": ew.lower_const, "arange": ew.lower_arange, "splat": ew.lower_splat, "broadcast": ew.lower_broadcast,
        "expand_dims": ew.lower_expand_dims, "trans": ew.lower_trans, "reshape": ew.lower_reshape,
        "program_id": ew.lower_program_id, "num_programs": ew.lower_num_programs,
        # elementwise
        **{name: ew.binary(name) for name in ir.BINARY_OPS},
        "assume": ew.lower_assume, "addptr": ew.lower_addptr, "cmp": ew.lower_cmp, "select": ew.lower_select,
        "fma": ew.lower_fma, "umulhi": ew.lower_umulhi, "cast": ew.lower_cast, "bitcast": ew.lower_bitcast,
        "not": ew.lower_not, "neg": ew.lower_neg, "abs": ew.lower_abs,
        **dict.fromkeys(MATH_FUNCTIONS, ew.lower_math),
        "extern_elementwise": ew.lower_extern_elementwise,
        # shape ops, scans, sorts
        "join": shape_ops.lower_join,
    },
    statements={
        # memory
        "load": memory.lower_load, "store": memory.lower_store,
        "atomic_rmw": memory.lower_atomic_rmw, "atomic_cas": memory.lower_atomic_cas,
        # across threads
        "reduce": reduction.lower_reduce, "scan": reduction.lower_scan, "dot": dot.lower_dot,
        "barrier": control_flow.lower_barrier,
        # PTX written by the user
        "inline_asm": ew.lower_inline_asm,
        "map_elementwise": ew.lower_map_elementwise,
        # control flow
        "for": control_flow.lower_for, "if": control_flow.lower_if, "while": control_flow.lower_while,
        "return": control_flow.lower_return,
        # debugging
        "print": debug_ops.lower_print, "assert": debug_ops.lower_assert,
        # shape ops, scans, sorts
        "split": shape_ops.lower_split,
        # tensor descriptors through TMA
        "tma_load": pinned_tma.lower_tma_load, "tma_store": tma.lower_tma_store, "make_tensor_map": tma.lower_make_tensor_map,
        "reduce_combine": reduction.lower_reduce_combine, "scan_combine": reduction.lower_scan_combine,
        "gather": shape_ops.lower_gather, "flip": shape_ops.lower_flip, "sort": shape_ops.lower_sort, "histogram": histogram.lower_histogram,
        # noinline @jit functions: device functions of their own
        "call": device_calls.lower_call,
    },
)


def lower_to_llvm(fn: ir.Function, *, num_warps: int, num_stages: int = 1, target: str | None = None,
                  debug: bool = False, enable_fp_fusion: bool | None = None, maxnreg: int | None = None,
                  enable_reflect_ftz: bool | None = None, num_ctas: int | None = None) -> Lowering:
    if num_warps < 1 or num_warps & (num_warps - 1) or num_warps > 32:
        raise BackendError(f"num_warps must be a power of two between 1 and 32, got {num_warps}")
    options = LoweringOptions.from_knobs(num_warps=num_warps, num_stages=num_stages, target=target, debug=debug,
                                         enable_fp_fusion=enable_fp_fusion, maxnreg=maxnreg,
                                         enable_reflect_ftz=enable_reflect_ftz, num_ctas=num_ctas)
    if fn.gpu_refusals:
        raise fn.gpu_refusals[0]
    fp8.check_types(fn, options.target)
    dot.check_dot_shapes(fn)
    lw = _lower(fn, options)
    if lw.stages_past_margin and lw.smem_total > pipeline.SMEM_LIMIT:
        # a loop's stages left its body's own scratch no room: again, with room kept above the stages
        lw = _lower(fn, dataclasses.replace(options, smem_margin=multi_dot.TRANSIENT_MARGIN))
    return lw


def _lower(fn: ir.Function, options: LoweringOptions) -> Lowering:
    lw = Lowering(fn, options, RULES)
    tma.prefetch_pointer_maps(lw)
    warp_specialize.prepare(lw)
    lw.run()
    warp_specialize.finish(lw)
    return lw


def module_text(lw: Lowering) -> str:
    """The module's LLVM IR, with `"nvvm.maxntid"` on the kernel (llvmlite cannot spell string
    function attributes) and the definitions of the libdevice functions it calls."""
    nv = lw.libdevice_functions()
    if nv and not _has_module_flag(lw.module, "nvvm-reflect-ftz"):
        # behaviour 4 (override): libdevice's __nvvm_reflect("__CUDA_FTZ") reads 0 (denormals kept)
        # unless the launch asked for enable_reflect_ftz=True
        ftz = 1 if lw.options.reflect_ftz is True else 0
        lw.module.add_named_metadata("llvm.module.flags", [I32(4), "nvvm-reflect-ftz", I32(ftz)])
    text = loop_metadata.finish(str(lw.module))
    head = f'define ptx_kernel void @"{lw.fn.name}"('
    i = text.index(head)
    j = text.index("\n", i)
    line = text[i:j]
    dbg = line.find(" !dbg ")     # function attributes go before the metadata attachment
    if dbg >= 0:
        line, j = line[:dbg], i + dbg
    line = _tensor_map_params(line, lw)
    maxnreg = f' "nvvm.maxnreg"="{lw.options.maxnreg}"' if lw.options.maxnreg is not None else ""
    text = text[:i] + line + f' "nvvm.maxntid"="{32 * launch_warps(lw)}"' + maxnreg + \
        (' "nvvm.minctasm"="1"' if lw.ws is not None else "") + text[j:]   # setmaxnreg needs that cap
    if nv:
        keep = [ln for ln in text.split("\n") if not (ln.startswith("declare") and any(f'@"{n}"(' in ln for n in nv))]
        text = "\n".join(keep) + "\n" + libdevice_defs(nv)
    return text


def launch_warps(lw: Lowering) -> int:
    """The warps a program is launched with: num_warps, and a producer warpgroup beside them in a
    warp-specialized kernel (warp_specialize.py)."""
    return lw.num_warps + (warp_specialize.PRODUCER_WARPS if lw.ws is not None else 0)


def _tensor_map_params(line: str, lw: Lowering) -> str:
    """The kernel's CUtensorMap parameters (tma.py) become `byval` 128-byte, 64-byte aligned
    `"nvvm.grid_constant"` parameters (llvmlite cannot spell parameter attributes with types)."""
    for k in lw.tensor_map_params:
        name = lw.func.args[k].name
        plain = f'ptr %"{name}"'
        assert line.count(plain) == 1, line
        line = line.replace(plain, f'ptr byval([128 x i8]) align 64 "nvvm.grid_constant" %"{name}"')
    return line


def _has_module_flag(module, name: str) -> bool:
    flags = module.namedmetadata.get("llvm.module.flags")
    return flags is not None and any(f'"{name}"' in str(md) for md in flags.operands)


def compile_ir(fn: ir.Function, *, num_warps: int, num_stages: int = 3, target: str = "sm_90",
               debug: bool = False, enable_fp_fusion: bool | None = None, maxnreg: int | None = None,
               enable_reflect_ftz: bool | None = None, num_ctas: int | None = None) -> dict:
    """Compile block IR to PTX. Returns {name, llir, ptx, shared, num_warps, params} (and
    pointer_maps where knobs.codegen.pointer_tma rewrote loads of `fn`, in place)."""
    cpu = cpu_for(target)
    pointer_maps = _pointer_tma(fn, target, num_warps, num_stages)
    lw = lower_to_llvm(fn, num_warps=num_warps, num_stages=num_stages, target=target, debug=debug,
                       enable_fp_fusion=enable_fp_fusion, maxnreg=maxnreg, enable_reflect_ftz=enable_reflect_ftz,
                       num_ctas=num_ctas)
    if lw.needs_sm90a:  # wgmma (wgmma.py)
        cpu = "sm_90a"
    text = module_text(lw)
    llir, ptx = llir_to_ptx(text, cpu=cpu)
    out = {"name": fn.name, "llir": llir, "ptx": ptx, "shared": lw.smem_total, "num_warps": num_warps,
           "num_stages": num_stages, "params": lw.params, "target": cpu}
    if lw.ws is not None:   # the launch's block: 32 * launch_warps threads (num_warps stays the user's)
        out["launch_warps"] = launch_warps(lw)
    if pointer_maps:   # the launch builds these tensor maps from the kernel's arguments
        out["pointer_maps"] = pointer_maps
    maps = tma.tensor_maps_per_program(fn)
    if maps:   # device-side descriptors: the launch allocates this much global scratch per CTA slot
        out["global_scratch_size"] = maps * tma.MAP_BYTES
    if lw.options.num_ctas > 1:   # Triton's metadata: the launch asks for num_ctas scratch slots a program
        out["num_ctas"] = lw.options.num_ctas
    return out


def _pointer_tma(fn: ir.Function, target: str, num_warps: int, num_stages: int) -> list:
    """knobs.codegen.pointer_tma: pointer tiles of wgmma K loops through TMA (pointer_tma.py)."""
    opts = LoweringOptions.from_knobs(num_warps=num_warps, num_stages=num_stages, target=target)
    if not (opts.pointer_tma and opts.pipeline and opts.wgmma == "async" and opts.wgmma_target
            and tensor_map.eligible((8, 8), 2, target)):
        return []
    return pointer_tma.rewrite(fn, opts)
