"""`triton.tools` counterparts: host-side helpers for kernels."""
