"""`triton.tools.tensor_descriptor.TensorDescriptor`: a tensor, its shape and strides, and the block
shape a kernel reads and writes it in, passed to a kernel as one argument (`desc.load([m, k])`).

As in Triton, the last dim must be contiguous, the base 16-byte aligned and the other strides
multiples of 16 bytes (what a TMA descriptor needs); blocktune checks this at launch
(compiler/runtime/descriptors.py) and lowers the accesses to bounds-checked loads and stores.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List


@dataclass
class TensorDescriptor:
    base: Any
    shape: List[int]
    strides: List[int]
    block_shape: List[int]
    padding: str = "zero"

    def __post_init__(self):
        rank = len(self.shape)
        if rank == 0:
            raise ValueError("a tensor descriptor needs at least one dim")
        if len(self.strides) != rank or len(self.block_shape) != rank:
            raise ValueError(f"shape {list(self.shape)}, strides {list(self.strides)} and block_shape "
                             f"{list(self.block_shape)} must have the same rank")
        if self.strides[-1] != 1:
            raise ValueError(f"the last dimension must be contiguous (stride 1), got strides {list(self.strides)}")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"padding must be 'zero' or 'nan', got {self.padding!r}")

    @staticmethod
    def from_tensor(tensor: Any, block_shape: List[int], padding: str = "zero") -> "TensorDescriptor":
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)
