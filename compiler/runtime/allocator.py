"""`triton.set_allocator`: the hook that gives kernels global scratch memory.

Triton asks it for the memory that device-side tensor descriptors (`tl.make_tensor_descriptor`)
are written to before a TMA access. blocktune lowers device-side descriptors to masked loads and
stores (compiler/frontend/block_pointers.py), which need no scratch memory, so kernels run with or
without an allocator; the hook is kept (and `get_allocator` returns it) so that code written for
Triton, which calls `triton.set_allocator(...)` before such kernels, runs unchanged.
"""
from __future__ import annotations

from typing import Callable, Optional

Allocator = Callable[[int, int, Optional[int]], object]  # (size, alignment, stream) -> buffer



class NullAllocator:
    """Triton's "no allocator set": a kernel that needs scratch memory fails with a message that
    says to call set_allocator. blocktune's kernels never ask, so installing it is the same as
    removing the allocator."""

    def __call__(self, size: int, alignment: int, stream: Optional[int]):
        raise RuntimeError("Kernel requires a runtime memory allocation, but no allocator was set. "
                           "Use triton.set_allocator to specify an allocator.")


_allocator: Allocator | None = None


def set_allocator(allocator: Allocator | None) -> None:
    """Install `allocator(size: int, alignment: int, stream: int | None)` (None removes it)."""
    global _allocator
    if allocator is not None and not callable(allocator):
        raise TypeError(f"set_allocator expects a callable (size, alignment, stream) -> buffer, got {type(allocator).__name__}")
    _allocator = allocator


def get_allocator() -> Allocator | None:
    return _allocator
