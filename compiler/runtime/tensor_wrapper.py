"""`triton.reinterpret`: pass a tensor to a kernel as another element type of the same size (a
torch int8 tensor as `tl.uint8`, raw bytes as fp8), without a copy. Kernels see a pointer to the
wrapper's `dtype`; everything else (data pointer, strides, device) is the base tensor's."""
from __future__ import annotations


class TensorWrapper:
    """A tensor seen as elements of `dtype` (a `tl.dtype`)."""

    def __init__(self, base, dtype):
        self.dtype = dtype
        self.base = base
        self.data = base.data
        self.device = base.device
        self.shape = self.base.shape

    def data_ptr(self):
        return self.base.data_ptr()

    def stride(self, *args):
        return self.base.stride(*args)

    def __str__(self) -> str:
        return f"TensorWrapper[{self.dtype}]({self.base})"

    def element_size(self):
        return self.base.element_size()

    def cpu(self):
        return TensorWrapper(self.base.cpu(), self.dtype)

    def copy_(self, other):
        self.base.copy_(other.base)

    def clone(self):
        return TensorWrapper(self.base.clone(), self.dtype)

    def to(self, device):
        return TensorWrapper(self.base.to(device), self.dtype)

    def new_empty(self, sizes):
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)


def reinterpret(tensor, dtype):
    """`tensor` seen as elements of `dtype`; reinterpreting a wrapper back to its base's own dtype
    gives the base tensor."""
    if isinstance(tensor, TensorWrapper):
        if dtype == tensor.base.dtype:
            return tensor.base
        return TensorWrapper(tensor.base, dtype)
    if hasattr(tensor, "data_ptr"):
        return TensorWrapper(tensor, dtype)
    raise TypeError(f"Cannot reinterpret a {type(tensor)}.")
