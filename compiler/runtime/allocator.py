"""`triton.set_allocator`: the hook that gives kernels global scratch memory.

Triton asks it for the memory that device-side tensor descriptors (`tl.make_tensor_descriptor`)
are written to before a TMA access, and so does blocktune where those descriptors go through TMA
(sm_90, compiler/frontend/block_pointers.py says when; elsewhere they are bounds-checked loads and
stores, which need no scratch memory). With no allocator set, blocktune allocates the scratch with
torch (`default_allocator`), so kernels written for blocktune need not call set_allocator; an
explicit `NullAllocator` makes such a launch fail as in Triton.
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


def default_allocator(size: int, alignment: int, stream: Optional[int]):
    """Scratch from torch's caching allocator on the current device (stream-ordered, so the
    buffer can be dropped once the launch is queued)."""
    try:
        import torch  # noqa: PLC0415 - optional dependency, the GPU path only
    except ImportError:
        return NullAllocator()(size, alignment, stream)
    return torch.empty(size, dtype=torch.int8, device="cuda")
