"""The CUDA driver, through cuda-python (`cuda.bindings.driver`), plus a ctypes fast path for launches.

Everything is lazy: importing this module loads nothing. The first call that needs the GPU runs
`cuInit`, and work happens in the device's *primary* context — the one the CUDA runtime (and so
torch) uses — so tensors allocated by torch and modules loaded here live in the same context.

    has_gpu()                       True when libcuda loads and at least one device exists
    device_properties(device=0)     name, capability, sm_count, total_memory, max_shared_memory, ...
    ensure_context(device=None)     make a context current on this thread (primary context)
    load_module(image, name, shared, device) -> LoadedFunction
    launch(...)                     generic (slow) launch with error checking
    libcuda()                       the ctypes handle used by generated launchers

Module loading: PTX goes through `cuModuleLoadData` (the driver JIT-compiles it, and keeps its own
compute cache under ~/.nv). When the caller has a cubin (from `ptxas`, compiler/ptxas.py) it is
loaded instead, which skips the driver's JIT; `bench/launch.py` measures both. A kernel above
48 KB of shared memory gets the dynamic-size limit it needs and the largest shared-memory carveout
preference (prefer_shared_memory), as Triton's loader gives its kernels.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

from .. import knobs, ptxas
from ..errors import OutOfResources

_lock = threading.RLock()
_cu = None            # cuda.bindings.driver, once imported
_lib = None           # ctypes.CDLL of libcuda, once loaded
_init_error: BaseException | None = None
_initialized = False
_primary: dict[int, object] = {}   # device ordinal → retained primary CUcontext


class CudaError(RuntimeError):
    """A CUDA driver call failed. `.code` is the CUresult value, `.name` its enum name."""

    def __init__(self, code: int, call: str = "", detail: str = ""):
        self.code = int(code)
        self.name, desc = _error_text(self.code)
        self.call = call
        msg = f"{call + ': ' if call else ''}{self.name} ({self.code}): {desc}"
        hint = _HINTS.get(self.name)
        if hint:
            msg += f". {hint}"
        if detail:
            msg += f"\n{detail}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.code, self.call))


class NoGPUError(RuntimeError):
    """No CUDA driver or no device: the GPU path cannot run here (interpret mode can)."""


_HINTS = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": "A kernel accessed memory out of bounds (a missing mask, or a CPU "
                                  "tensor passed as a pointer?). The CUDA context is now unusable: "
                                  "restart the process",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "A pointer was not aligned as the kernel assumed. The CUDA context "
                                     "is now unusable: restart the process",
    "CUDA_ERROR_LAUNCH_FAILED": "The kernel faulted; the CUDA context is now unusable: restart the process",
    "CUDA_ERROR_ASSERT": "A device_assert failed; the CUDA context is now unusable: restart the process",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "Too many registers or threads for this launch: lower num_warps "
                                          "or the block sizes",
    "CUDA_ERROR_INVALID_PTX": "The driver rejected the generated PTX (a backend bug, or a target the "
                              "driver does not know)",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "The PTX needs a newer driver than the one installed",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "The kernel was compiled for another GPU architecture",
    "CUDA_ERROR_INVALID_CONTEXT": "No CUDA context is current on this thread",
    "CUDA_ERROR_NO_DEVICE": "No CUDA device is visible (check CUDA_VISIBLE_DEVICES)",
    "CUDA_ERROR_OUT_OF_MEMORY": "The GPU is out of memory",
    "CUDA_ERROR_INVALID_HANDLE": "A kernel was launched in a context other than the one it was loaded in",
}


def _error_text(code: int) -> tuple[str, str]:
    try:
        cu = _driver()
        err, name = cu.cuGetErrorName(cu.CUresult(code))
        err2, desc = cu.cuGetErrorString(cu.CUresult(code))
        n = name.decode() if isinstance(name, bytes) else str(name)
        d = desc.decode() if isinstance(desc, bytes) else str(desc)
        return n, d
    except Exception:
        return f"CUDA_ERROR_{code}", "unknown error"


def _driver():
    global _cu
    if _cu is None:
        from cuda.bindings import driver as cu  # noqa: PLC0415 - import time: cuda-python loads at the first GPU use
        _cu = cu
    return _cu


def libcuda() -> ctypes.CDLL:
    """The ctypes handle of libcuda (the same library cuda-python uses); raises NoGPUError."""
    global _lib
    if _lib is None:
        last = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as e:
                last = last or e
        else:
            raise NoGPUError(f"the NVIDIA driver library (libcuda) cannot be loaded: {last}")
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                       ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuCtxGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.cuCtxGetDevice.restype = ctypes.c_int
        _lib = lib
    return _lib


def _check(result, call: str = ""):
    """cuda-python returns (CUresult, *values): raise on error, return the values."""
    err = result[0]
    code = int(err.value) if hasattr(err, "value") else int(err)
    if code != 0:
        raise CudaError(code, call)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def init() -> None:
    """cuInit once; raises NoGPUError when there is no driver or no device."""
    global _initialized, _init_error
    if _initialized:
        return
    with _lock:
        if _initialized:
            return
        if _init_error is not None:
            raise NoGPUError(str(_init_error))
        try:
            libcuda()
            cu = _driver()
            _check(cu.cuInit(0), "cuInit")
            n = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
            if n < 1:
                raise NoGPUError("no CUDA device is visible")
        except NoGPUError as e:
            _init_error = e
            raise
        except Exception as e:  # noqa: BLE001 - anything here means "no usable GPU"
            _init_error = e
            raise NoGPUError(f"CUDA is not usable: {e}") from e
        _initialized = True


def has_gpu() -> bool:
    """True when the CUDA driver loads and at least one device is visible. Never raises."""
    try:
        init()
        return True
    except Exception:
        return False


def device_count() -> int:
    init()
    return _check(_driver().cuDeviceGetCount(), "cuDeviceGetCount")


def current_device() -> int:
    """The device of the context current on this thread (making device 0's primary context
    current when there is none)."""
    lib = libcuda()
    d = ctypes.c_int()
    if lib.cuCtxGetDevice(ctypes.byref(d)) == 0:
        return d.value
    return ensure_context(0)


def device_of_current_context(default: int = 0) -> int:
    """The device of the context current on this thread, or `default`; creates no context."""
    d = ctypes.c_int()
    return d.value if libcuda().cuCtxGetDevice(ctypes.byref(d)) == 0 else default


def ensure_context(device: int | None = None) -> int:
    """Make a context current on this thread and return its device ordinal.

    With `device=None`, keep whatever context is current (torch's, usually) and fall back to
    device 0's primary context. With a device, make that device's primary context current unless
    the current context already belongs to it.
    """
    init()
    cu = _driver()
    ctx = _check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        cur = int(_check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
        if device is None or cur == device:
            return cur
    dev_ord = 0 if device is None else int(device)
    with _lock:
        pctx = _primary.get(dev_ord)
        if pctx is None:
            dev = _check(cu.cuDeviceGet(dev_ord), "cuDeviceGet")
            pctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _primary[dev_ord] = pctx
    _check(cu.cuCtxSetCurrent(pctx), "cuCtxSetCurrent")
    return dev_ord


def _driver_version_string() -> str:
    try:
        with open("/proc/driver/nvidia/version") as f:
            text = f.read()
        for tok in text.split():
            parts = tok.split(".")
            if len(parts) >= 2 and all(p.isdigit() for p in parts):
                return tok
    except OSError:
        pass
    return ""


@functools.lru_cache(maxsize=None)
def device_properties(device: int = 0) -> dict:
    """The properties the compiler, the tuner and the service need, as plain values."""
    init()
    cu = _driver()
    dev = _check(cu.cuDeviceGet(int(device)), "cuDeviceGet")
    A = cu.CUdevice_attribute

    def attr(name):
        return int(_check(cu.cuDeviceGetAttribute(getattr(A, name), dev), "cuDeviceGetAttribute"))

    raw = _check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
    cuda_ver = int(_check(cu.cuDriverGetVersion(), "cuDriverGetVersion"))
    major, minor = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"), attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    return {
        "name": name.strip(),
        "capability": (major, minor),
        "sm_count": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        "total_memory": int(_check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
        "max_shared_memory": attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        "max_shared_memory_default": attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
        "max_registers_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
        "warp_size": attr("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
        "driver_version": _driver_version_string() or str(cuda_ver),
        "cuda_version": f"{cuda_ver // 1000}.{(cuda_ver % 1000) // 10}",
        "l2_size": attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        "clock_rate_khz": attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
    }


def target_for_device(device: int = 0) -> str:
    """`sm_XY` for the device (sm_90 on H100)."""
    major, minor = device_properties(device)["capability"]
    return f"sm_{major}{minor}"


def default_target() -> str:
    """The current device's target, or "sm_90" when there is no GPU."""
    if has_gpu():
        # no context is created here (compile workers must not hold one): the current context's
        # device if there is one, else device 0
        return target_for_device(device_of_current_context())
    return "sm_90"


# ---------------------------------------------------------------------------------------------
# Modules and functions

class LoadedFunction:
    """A kernel loaded into one device's context: keeps the module alive."""

    __slots__ = ("module", "function", "handle", "device", "shared", "num_regs", "name", "__weakref__")

    def __init__(self, module, function, device: int, shared: int, name: str, num_regs: int):
        self.module, self.function, self.device = module, function, device
        self.handle = int(function)
        self.shared, self.name, self.num_regs = shared, name, num_regs


def load_module(image: bytes | str, name: str, shared: int = 0, device: int | None = None) -> LoadedFunction:
    """Load PTX (str, or NUL-terminated bytes) or a cubin (bytes) into `device`'s context and get
    function `name`. Sets the dynamic shared memory limit above 48 KB; raises OutOfResources when
    `shared` exceeds what the device allows."""
    dev = ensure_context(device)
    cu = _driver()
    props = device_properties(dev)
    limit = props["max_shared_memory"]
    if shared > limit:
        raise OutOfResources(shared, limit, "shared memory")
    data = image.encode() + b"\0" if isinstance(image, str) else bytes(image)
    is_ptx = isinstance(image, str) or data[:4] != b"\x7fELF"
    if is_ptx and not data.endswith(b"\0"):
        data += b"\0"
    err, module = cu.cuModuleLoadData(data)
    code = int(err.value) if hasattr(err, "value") else int(err)
    if code != 0:
        detail = ""
        if is_ptx and ptxas.find():
            # The driver does not say why; ptxas does.
            try:
                ptxas.assemble(data.rstrip(b"\0").decode(), target_for_device(dev), timeout=60)
            except Exception as e:  # noqa: BLE001
                detail = str(e)
        raise CudaError(code, "cuModuleLoadData", detail)
    function = _check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
    FA = cu.CUfunction_attribute
    if shared > 48 * 1024:
        _check(cu.cuFuncSetAttribute(function, FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared)),
               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        prefer_shared_memory(function)
    static_shared = int(_check(cu.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                               "cuFuncGetAttribute"))
    if static_shared + shared > limit:
        raise OutOfResources(static_shared + shared, limit, "shared memory")
    num_regs = int(_check(cu.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "cuFuncGetAttribute"))
    return LoadedFunction(module, function, dev, int(shared), name, num_regs)


def prefer_shared_memory(function, prefer: bool = True) -> None:
    """Ask the driver for the largest shared-memory carveout of the SM's L1/shared storage when it
    runs `function` (a CUfunction), as Triton's loader does for every kernel above 48 KB
    (cuFuncSetCacheConfig PREFER_SHARED; here the carveout attribute that says the same and can be
    read back). Without a preference the driver sizes the carveout by its own rule, which may leave
    room for fewer programs per SM than the kernel's shared memory allows: a 99 KB matmul tile runs
    two to an H100 SM only in a carveout of at least 2 × (99 + 1) KB. `prefer=False` takes the
    preference back (bench/matmul_tma_timing.py compares the two)."""
    cu = _driver()
    carveout = cu.CUshared_carveout.CU_SHAREDMEM_CARVEOUT_MAX_SHARED if prefer else cu.CUshared_carveout.CU_SHAREDMEM_CARVEOUT_DEFAULT
    _check(cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                 int(carveout)), "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")


def max_threads_for(fn: LoadedFunction) -> int:
    cu = _driver()
    return int(_check(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                            fn.function), "cuFuncGetAttribute"))


def raise_launch_error(code: int, name: str = "", num_warps: int | None = None, lf: LoadedFunction | None = None):
    """Turn a cuLaunchKernel result into an exception."""
    cu_name, _ = _error_text(code)
    if cu_name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" and lf is not None:
        regs = lf.num_regs * (num_warps or 1) * 32
        raise OutOfResources(regs, device_properties(lf.device)["max_registers_per_block"], "registers")
    raise CudaError(code, f"cuLaunchKernel({name})" if name else "cuLaunchKernel")


def launch(fn: LoadedFunction, grid, block_x: int, shared: int, stream: int, params_array) -> None:
    """Generic launch: `params_array` is a ctypes `void*[n]` of pointers to argument storage."""
    lib = libcuda()
    g = tuple(grid) + (1, 1)
    r = lib.cuLaunchKernel(fn.handle, g[0], g[1], g[2], block_x, 1, 1, shared, stream or None,
                           params_array, None)
    if r == 201:  # no context current on this thread (a new thread): make it current and retry
        ensure_context(fn.device)
        r = lib.cuLaunchKernel(fn.handle, g[0], g[1], g[2], block_x, 1, 1, shared, stream or None,
                               params_array, None)
    if r:
        raise_launch_error(r, fn.name, block_x // 32, fn)


def synchronize() -> None:
    ensure_context()
    _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")


# ---------------------------------------------------------------------------------------------
# Triton's `triton.runtime.driver.active`: the calls kernel libraries and Triton's tests make

@dataclass(frozen=True)
class GPUTarget:
    """Triton's target triple: backend name, architecture (90 for sm_90), warp size."""
    backend: str
    arch: int
    warp_size: int


class _Utils:
    @staticmethod
    def get_device_properties(device: int | None = 0) -> dict:
        """Triton's names for the device's properties (device None: the current one)."""
        p = device_properties(current_device() if device is None else device)
        return {"max_shared_mem": p["max_shared_memory"], "multiprocessor_count": p["sm_count"],
                "max_num_regs": p["max_registers_per_block"], "warpSize": p["warp_size"],
                "sm_clock_rate": p["clock_rate_khz"]}


def _interpreting_without_gpu() -> bool:
    return knobs.runtime.interpret and not has_gpu()


class ActiveDriver:
    """`triton.runtime.driver.active` for the CUDA driver blocktune launches through.

    In interpret mode on a machine without a GPU, kernels run on the CPU: the active torch device is
    the CPU, and the target is the one kernels compile for there (`default_target()`, sm_90), whose
    semantics the interpreter follows. The device's properties stay a GPU's: asking for them
    without one raises NoGPUError."""
    utils = _Utils()

    @staticmethod
    def get_current_target() -> GPUTarget:
        if _interpreting_without_gpu():
            return GPUTarget("cuda", int(default_target().removeprefix("sm_").rstrip("a")), 32)
        major, minor = device_properties(current_device())["capability"]
        return GPUTarget("cuda", major * 10 + minor, 32)

    @staticmethod
    def get_active_torch_device():
        """The torch device kernels take their tensors on: the current CUDA device, or the CPU in
        interpret mode without a GPU (as Triton's, whose interpreter runs on CUDA tensors)."""
        import torch  # noqa: PLC0415 - torch is optional for the compiler
        if _interpreting_without_gpu():
            return torch.device("cpu")
        if not has_gpu():
            raise NoGPUError("no CUDA GPU: there is no active torch device for kernels (set BLOCKTUNE_INTERPRET=1 "
                             "to run them on the CPU)")
        return torch.device("cuda", current_device())

    @staticmethod
    def get_current_device() -> int:
        return current_device()

    @staticmethod
    def get_current_stream(device: int | None = None) -> int:
        import torch  # noqa: PLC0415 - the stream torch launches on, as Triton's launcher uses
        return torch.cuda.current_stream(device).cuda_stream

    @staticmethod
    def get_device_interface():
        import torch  # noqa: PLC0415
        return torch.cuda

    @staticmethod
    def is_active() -> bool:
        return has_gpu()


active = ActiveDriver()
