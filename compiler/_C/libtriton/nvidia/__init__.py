"""`triton._C.libtriton.nvidia`: the cuBLASLt binding (`cublas.CublasLt`)."""
from . import cublas  # noqa: F401

__all__ = ["cublas"]
