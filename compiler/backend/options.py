"""What one compile asks of the lowering: an explicit options object, fixed for the whole compile.

The codegen knobs (compiler.knobs.codegen, part of the compile cache key) are read once, here, when
the compile starts; nothing in the backend reads the environment or thread-local state.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import knobs


@dataclass(frozen=True)
class LoweringOptions:
    num_warps: int
    num_stages: int = 1           # software pipelining depth of dot loops (pipeline.py)
    target: str = "sm_90"
    debug: bool = False           # device_assert is checked on the GPU only in debug mode, as in Triton
    wgmma: str = "async"          # knobs.codegen.wgmma: "async" | "sync" | "off"
    pipeline: bool = True         # knobs.codegen.pipeline
    fp_fusion: bool = True        # knobs.codegen.fp_fusion, or the launch's enable_fp_fusion
    maxnreg: int | None = None    # the launch's maxnreg: the kernel's .maxnreg (registers per thread)
    warp_specialize: bool = False  # knobs.codegen.warp_specialize: every TMA-fed wgmma loop (warp_specialize.py)
    line_info: bool = True        # knobs.codegen.line_info: .loc source lines in the PTX
    pointer_tma: bool = False     # knobs.codegen.pointer_tma and knobs.codegen.tma (pointer_tma.py)
    # the launch's enable_reflect_ftz (Triton's): True flushes denormals in libdevice and exp2,
    # False keeps them in both; None (not given): exp2 flushes, libdevice keeps them
    reflect_ftz: bool | None = None
    # shared memory multi_dot.py leaves free above a loop's stages for the body's own scratch
    # (reductions, layout changes): none at first, as Triton, whose stages fill what the tiles
    # allow; nvptx.lower_to_llvm lowers again with multi_dot.TRANSIENT_MARGIN when that did not fit
    smem_margin: int = 0
    # Triton's num_ctas: each program still runs as one CTA (runtime/num_ctas.py); device-side
    # descriptors' global scratch keeps Triton's layout of num_ctas slots a program (tma.py)
    num_ctas: int = 1

    @classmethod
    def from_knobs(cls, *, num_warps: int, num_stages: int = 1, target: str | None = None,
                   debug: bool = False, enable_fp_fusion: bool | None = None,
                   maxnreg: int | None = None, enable_reflect_ftz: bool | None = None,
                   num_ctas: int | None = None) -> "LoweringOptions":
        """The knobs' values, and the launch's compile options (Triton's enable_fp_fusion, which
        overrides the knob, and maxnreg)."""
        fp_fusion = knobs.codegen.fp_fusion if enable_fp_fusion is None else bool(enable_fp_fusion)
        return cls(num_warps=num_warps, num_stages=num_stages, target=target or "", debug=debug,
                   wgmma=knobs.codegen.wgmma, pipeline=knobs.codegen.pipeline, fp_fusion=fp_fusion,
                   maxnreg=None if maxnreg is None else int(maxnreg), line_info=knobs.codegen.line_info,
                   reflect_ftz=None if enable_reflect_ftz is None else bool(enable_reflect_ftz),
                   warp_specialize=knobs.codegen.warp_specialize,
                   pointer_tma=knobs.codegen.pointer_tma and knobs.codegen.tma, num_ctas=int(num_ctas or 1))

    @property
    def wgmma_target(self) -> bool:
        """wgmma (sm_90a) instead of mma.sync for the dots that fit it."""
        return self.wgmma != "off" and (self.target or "").lower() in ("sm_90", "sm_90a")
