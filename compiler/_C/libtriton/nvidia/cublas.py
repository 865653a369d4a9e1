"""`CublasLt(workspace)`: Triton's binding to NVIDIA's cuBLASLt, through ctypes.

`matmul(a, b, c)` computes c = a @ b.T (a: M×K, b: N×K, c: M×N, row-major and contiguous, one
dtype: float16, bfloat16, float32 (TF32 tensor cores) or float8_e4m3fn (fp32 accumulation with
cuBLASLt's fast accumulation, fp8 output)); `gemm(a, b, c, d, alpha, beta)` computes
d = alpha · a @ b.T + beta · c. Both as Triton's (third_party/nvidia/include/cublas_instance.h):
the heuristic's first algorithm with the given workspace, on torch's current stream of the
tensors' device (Triton launches on the legacy default stream, which is torch's default too).

The library is the libcublasLt torch's CUDA build loads (already in the process, or from the
nvidia-cublas wheel's lib folder next to torch), or BLOCKTUNE_CUBLASLT=/path/to/libcublasLt.so.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

from .... import knobs
from ....runtime.driver import NoGPUError

_STATUS = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
           7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
           13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
           15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}

# cudaDataType_t, cublasComputeType_t, attribute and operation enums (cublasLt.h / library_types.h)
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUDA_R_8F_E4M3 = 0, 2, 14, 28
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
DESC_TRANSA, DESC_TRANSB, DESC_FAST_ACCUM = 3, 4, 25
PREF_MAX_WORKSPACE_BYTES = 1
OP_N, OP_T = 0, 1

_DTYPES = {"float16": CUDA_R_16F, "bfloat16": CUDA_R_16BF, "float32": CUDA_R_32F, "float8_e4m3fn": CUDA_R_8F_E4M3}


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_LIB = None


def _candidates() -> list[str]:
    names = []
    if knobs.tools.cublaslt:
        return [knobs.tools.cublaslt]
    for base in sys.path:
        for pattern in ("nvidia/cublas/lib/libcublasLt.so*", "nvidia/cu1*/lib/libcublasLt.so*",
                        "torch/lib/libcublasLt.so*"):
            names += sorted(glob.glob(os.path.join(base, pattern)), reverse=True)
    return names + ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"]


def library() -> ctypes.CDLL:
    """libcublasLt: the copy already loaded (torch's), else the first found (see the module doc)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    tried = _candidates()
    for mode in (os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL, ctypes.RTLD_GLOBAL):
        for name in tried:
            try:
                lib = ctypes.CDLL(name, mode=mode)
            except OSError:
                continue
            if hasattr(lib, "cublasLtMatmul"):
                _LIB = lib
                return lib
    raise RuntimeError("cuBLASLt not found: install torch's CUDA build (its nvidia-cublas wheel holds "
                       "libcublasLt) or set BLOCKTUNE_CUBLASLT to the path of libcublasLt.so. Tried: "
                       + ", ".join(tried))


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS Error: {call} returned {status} ({_STATUS.get(status, 'unknown status')})")


def _dtype_name(t) -> str:
    return str(t.dtype).rsplit(".", 1)[-1]


def _require_cuda(what: str, t) -> None:
    if not getattr(t, "is_cuda", False):
        raise NoGPUError(f"cublas.CublasLt: {what} must be a CUDA tensor (cuBLASLt runs on the GPU only; "
                         f"got a tensor on {getattr(t, 'device', '?')})")


class CublasLt:
    """A cuBLASLt handle with its workspace (a CUDA tensor: its bytes are the workspace)."""

    def __init__(self, workspace):
        _require_cuda("the workspace", workspace)
        self._lib = library()
        self._workspace = workspace          # kept alive: cuBLASLt writes into it
        self._workspace_ptr = ctypes.c_void_p(workspace.data_ptr())
        self._workspace_size = workspace.numel() * workspace.element_size()
        self._handle = ctypes.c_void_p()
        self._preference = ctypes.c_void_p()
        _check(self._lib.cublasLtCreate(ctypes.byref(self._handle)), "cublasLtCreate")
        _check(self._lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self._preference)),
               "cublasLtMatmulPreferenceCreate")
        size = ctypes.c_size_t(self._workspace_size)
        _check(self._lib.cublasLtMatmulPreferenceSetAttribute(
            self._preference, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(size), ctypes.c_size_t(ctypes.sizeof(size))),
            "cublasLtMatmulPreferenceSetAttribute")

    def __del__(self):
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        if self._preference:
            lib.cublasLtMatmulPreferenceDestroy(self._preference)
        if self._handle:
            lib.cublasLtDestroy(self._handle)

    # -- the public calls ---------------------------------------------------------------------------
    def matmul(self, A, B, C) -> None:
        """C = A @ B.T (A: M×K, B: N×K, C: M×N, all one dtype)."""
        dtype = self._check_operands("matmul", A, B, [("C", C)])
        self._gemm(B.shape[0], A.shape[0], A.shape[1], B, A, None, C, dtype, 1.0, 0.0)

    def gemm(self, A, B, C, D, alpha: float, beta: float) -> None:
        """D = alpha · A @ B.T + beta · C (C and D: M×N)."""
        dtype = self._check_operands("gemm", A, B, [("C", C), ("D", D)])
        self._gemm(B.shape[0], A.shape[0], A.shape[1], B, A, C, D, dtype, float(alpha), float(beta))

    # -- internals ----------------------------------------------------------------------------------
    def _check_operands(self, call: str, A, B, outputs: list) -> int:
        """Triton's checks (checkMatmulConstraints), and row-major contiguity (the layouts assume it)."""
        tensors = [("A", A), ("B", B)] + outputs
        for name, t in tensors:
            _require_cuda(name, t)
        names = {_dtype_name(t) for _, t in tensors}
        if len(names) != 1:
            raise RuntimeError(f"cublasLt.{call}: data types do not match ({', '.join(sorted(names))})")
        name = names.pop()
        if name not in _DTYPES:
            raise RuntimeError(f"Unsupported dtype for cublasLt.{call}: torch.{name} "
                               f"(float16, bfloat16, float32, float8_e4m3fn)")
        if any(t.dim() != 2 for _, t in tensors):
            raise RuntimeError("Only 2D matrices are supported.")
        (m, k), (n, kb) = A.shape, B.shape
        if k != kb:
            raise RuntimeError(f"Matrix dimensions do not match. A is [{m}, {k}], B is [{n}, {kb}]. Expected "
                               "A.shape[1] == B.shape[1]. Note that B needs to be transposed.")
        for name_t, t in tensors[2:]:
            if tuple(t.shape) != (m, n):
                raise RuntimeError(f"Matrix dimensions do not match. {name_t} is {list(t.shape)}, expected "
                                   f"[{m}, {n}] (A is [{m}, {k}], B is [{n}, {k}])")
        for name_t, t in tensors:
            if not t.is_contiguous():
                raise RuntimeError(f"cublasLt.{call}: {name_t} must be contiguous (row-major)")
        if len({t.device for _, t in tensors}) != 1:
            raise RuntimeError(f"cublasLt.{call}: the tensors are on different devices")
        return _DTYPES[name]

    def _layout(self, dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
        desc = ctypes.c_void_p()
        _check(self._lib.cublasLtMatrixLayoutCreate(ctypes.byref(desc), dtype, ctypes.c_uint64(rows),
                                                    ctypes.c_uint64(cols), ctypes.c_int64(ld)),
               "cublasLtMatrixLayoutCreate")
        return desc

    def _gemm(self, m, n, k, A, B, C, D, dtype, alpha, beta) -> None:
        """Column-major D (m×n) = alpha · op(A) · B + beta · C with A k×m transposed: Triton's
        gemm_impl, called with the operands swapped (row-major a@b.T is column-major b·aᵀ)."""
        import torch  # noqa: PLC0415 - the tensors are torch's

        lib = self._lib
        compute = CUBLAS_COMPUTE_32F_FAST_TF32 if dtype == CUDA_R_32F else CUBLAS_COMPUTE_32F
        c_dtype = CUDA_R_16F if dtype == CUDA_R_8F_E4M3 else dtype
        matmul_desc = ctypes.c_void_p()
        layouts = []
        try:
            _check(lib.cublasLtMatmulDescCreate(ctypes.byref(matmul_desc), compute, CUDA_R_32F),
                   "cublasLtMatmulDescCreate")
            for attr, value in ((DESC_TRANSA, ctypes.c_int(OP_T)), (DESC_TRANSB, ctypes.c_int(OP_N))):
                _check(lib.cublasLtMatmulDescSetAttribute(matmul_desc, attr, ctypes.byref(value),
                                                          ctypes.c_size_t(ctypes.sizeof(value))),
                       "cublasLtMatmulDescSetAttribute")
            if dtype == CUDA_R_8F_E4M3:
                fast = ctypes.c_int8(1)
                _check(lib.cublasLtMatmulDescSetAttribute(matmul_desc, DESC_FAST_ACCUM, ctypes.byref(fast),
                                                          ctypes.c_size_t(ctypes.sizeof(fast))),
                       "cublasLtMatmulDescSetAttribute")
            a_desc, b_desc = self._layout(dtype, k, m, k), self._layout(dtype, k, n, k)
            c_desc, d_desc = self._layout(c_dtype, m, n, m), self._layout(dtype, m, n, m)
            layouts = [a_desc, b_desc, c_desc, d_desc]
            result = _HeuristicResult()
            returned = ctypes.c_int(0)
            _check(lib.cublasLtMatmulAlgoGetHeuristic(self._handle, matmul_desc, a_desc, b_desc, c_desc, d_desc,
                                                      self._preference, 1, ctypes.byref(result),
                                                      ctypes.byref(returned)), "cublasLtMatmulAlgoGetHeuristic")
            if returned.value == 0:
                raise RuntimeError("No valid algorithm found by cublasLtMatmulAlgoGetHeuristic")
            alpha_c, beta_c = ctypes.c_float(alpha), ctypes.c_float(beta)
            stream = torch.cuda.current_stream(D.device).cuda_stream
            c_ptr = ctypes.c_void_p(C.data_ptr() if C is not None else 0)
            with torch.cuda.device(D.device):
                _check(lib.cublasLtMatmul(self._handle, matmul_desc, ctypes.byref(alpha_c),
                                          ctypes.c_void_p(A.data_ptr()), a_desc, ctypes.c_void_p(B.data_ptr()),
                                          b_desc, ctypes.byref(beta_c), c_ptr, c_desc,
                                          ctypes.c_void_p(D.data_ptr()), d_desc, ctypes.byref(result.algo),
                                          self._workspace_ptr, ctypes.c_size_t(self._workspace_size),
                                          ctypes.c_void_p(stream)), "cublasLtMatmul")
        finally:
            for desc in layouts:
                lib.cublasLtMatrixLayoutDestroy(desc)
            if matmul_desc:
                lib.cublasLtMatmulDescDestroy(matmul_desc)
