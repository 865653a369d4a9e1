"""Triton's `triton.backends` namespace, for code written against Triton: `backends.compiler.GPUTarget`
names what `compiler.compile` compiles for. blocktune has one backend, NVPTX (`compiler.backend`)."""
