"""The NVPTX backend: block IR → LLVM IR (llvmlite) → PTX. `nvptx.compile_ir` is the entry point.

From the top down (each module imports only from the ones below it; tests/test_import_structure.py
checks it):

  nvptx           the table of lowering rules (op → rule) and compile_ir
  control_flow    for / if / while / return / barrier
  pipeline        software pipelining of K loops that feed tensor-core dots (cp.async)
  dot             tl.dot: FMAs, or tensor cores through mma / wgmma
  mma, wgmma      mma.sync (sm_80+) and warpgroup MMA (sm_90a)
  shape_ops, histogram     join/split, flip, gather, sort; tl.histogram
  elementwise, memory, reduction, debug_ops     the other rules
  lowering        the lowering state (Lowering) and the RuleTable it runs
  assign_layouts  a layout for every block value
  dot_layouts, axis_info, options, llvm_target, llvm_types
  layouts, errors
"""
