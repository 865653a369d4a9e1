"""The allocator hook under Triton's module path (`triton.runtime._allocation`), for code and test
fixtures that import it by that name (e.g. `from triton.runtime._allocation import NullAllocator`)."""
from __future__ import annotations

from .allocator import Allocator, NullAllocator, get_allocator, set_allocator

__all__ = ["Allocator", "NullAllocator", "get_allocator", "set_allocator"]
