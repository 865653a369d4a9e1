"""NotApplicable: what a Triton feature that checks or feeds Triton's compiler internals (its MLIR
stages) raises in blocktune, which has none of them: the feature cannot apply, and says why."""
from __future__ import annotations


class NotApplicable(RuntimeError):
    """A Triton feature or test helper that needs something blocktune does not have (its MLIR)."""
