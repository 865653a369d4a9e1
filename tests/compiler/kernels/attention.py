"""Triton's tutorial 06 (fused attention, forward and backward) under blocktune: one copy of the
text, bench/attention_kernels.py, which the benchmark also runs under Triton."""
from . import bench_kernels

attention_kernels = bench_kernels("attention_kernels.py")
