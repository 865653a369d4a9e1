"""Triton-style kernels shared by the compiler tests (interpret mode here; the GPU tests may reuse them)."""
