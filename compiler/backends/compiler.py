"""Triton's `triton.backends.compiler`: the target description (`GPUTarget("cuda", 90, 32)`)."""
from ..runtime.driver import GPUTarget

__all__ = ["GPUTarget"]
