"""Triton's tutorials 05 (layer-norm backward), 08 (grouped GEMM) and 09 (persistent matmul with
device-side tensor descriptors), and tutorial 03 as a persistent kernel: the kernel text lives in bench/ (the benchmarks run the same file
under Triton and blocktune); here it is loaded under blocktune."""
from . import bench_kernels

layernorm_bwd = bench_kernels("layernorm_bwd_kernels.py")
grouped_gemm = bench_kernels("grouped_gemm_kernels.py")
persistent_matmul = bench_kernels("persistent_matmul_kernels.py")
matmul_persistent = bench_kernels("matmul_persistent_kernels.py")
