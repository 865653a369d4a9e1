"""`triton._C.libtriton`: `nvidia.cublas.CublasLt` (tutorial 09's cuBLAS reference)."""
from . import nvidia  # noqa: F401

__all__ = ["nvidia"]
