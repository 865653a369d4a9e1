"""CUtensorMaps of host tensor descriptors, encoded with the driver's `cuTensorMapEncodeTiled`
(through the native launcher module, launch.c, else cuda-python) when a launch first sees a
descriptor and cached, so that a launch with the same tensor and block costs one dictionary look-up.

The box and swizzle follow tensor_map.py (the tile layout the kernel's shared memory expects);
out-of-bounds elements of a load are zero, or NaN for `padding="nan"`. The key is everything the
map encodes: the base address, shape, strides, element type, block and padding (a new tensor at a
freed tensor's address with the same shape gets the same, still correct, map).
"""
from __future__ import annotations

import functools
import threading

from .. import tensor_map
from ..language import dtypes as T

_CACHE_LIMIT = 4096
_cache: dict = {}
_lock = threading.Lock()

_DATA_TYPES = {  # blocktune element type → CUtensorMapDataType member (bits are what matter)
    "fp16": "FLOAT16", "bf16": "BFLOAT16", "fp32": "FLOAT32", "fp64": "FLOAT64",
    "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64",
    "int16": "UINT16", "uint16": "UINT16", "int8": "UINT8", "uint8": "UINT8", "int1": "UINT8",
    "fp8e4nv": "UINT8", "fp8e5": "UINT8", "fp8e4b15": "UINT8", "fp8e4b8": "UINT8", "fp8e5b16": "UINT8",
}
_SWIZZLE = {128: "128B", 64: "64B", 32: "32B", 16: "NONE"}
# how far the copy engine widens a box row's L2 fetch (CUtensorMapL2promotion member); a module
# setting so that bench/matmul_tma_timing.py can compare it with Triton's 128B without a rebuild
L2_PROMOTION = "L2_256B"


def address(desc) -> int:
    """The host address of `desc`'s 128-byte CUtensorMap (what the kernel's `d.tmap` takes)."""
    base = desc.base
    key = (base.data_ptr(), tuple(desc.shape), tuple(desc.strides), base.dtype, tuple(desc.block_shape),
           desc.padding)
    hit = _cache.get(key)
    if hit is not None:
        return hit[1]
    entry = encode(desc)
    with _lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()   # cuLaunchKernel copies parameters at the call: no launch holds one
        _cache[key] = entry
    return entry[1]


def encode(desc) -> tuple:
    """The CUtensorMap of `desc` as (owner, host address of its 128 bytes): the owner keeps them
    alive (raises ValueError with the driver's reason)."""
    return encode_raw(desc.base.data_ptr(), T.from_host_dtype(desc.base.dtype), desc.shape, desc.strides,
                      desc.block_shape, desc.padding)


@functools.lru_cache(maxsize=None)
def _encoding(elt_name: str, es: int, block: tuple, padding: str, promotion: str):
    """(data type, box innermost first, swizzle, L2 promotion, fill) as the driver's enum values, per
    element type, block, padding and promotion (a launch that encodes a map for a new address does
    not work them out again)."""
    from cuda.bindings import driver as cu  # noqa: PLC0415 - import time: the GPU path only
    dtype = int(getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DATA_TYPES[elt_name]))
    swizzle = int(getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + _SWIZZLE[tensor_map.swizzle_bytes(block, es)]))
    promo = int(getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + promotion))
    fill = cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA if padding == "nan" \
        else cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
    return dtype, tuple(int(b) for b in tensor_map.box(block, es)), swizzle, promo, int(fill)


@functools.lru_cache(maxsize=1)
def _native_encoder():
    """(launch.c's encode_tiled, the address of libcuda's cuTensorMapEncodeTiled), or None (no native
    module: cuda-python encodes)."""
    import ctypes  # noqa: PLC0415

    from . import driver, native  # noqa: PLC0415
    mod = native.module()
    if mod is None or not hasattr(mod, "encode_tiled"):
        return None
    try:
        return mod.encode_tiled, ctypes.cast(driver.libcuda().cuTensorMapEncodeTiled, ctypes.c_void_p).value
    except (driver.NoGPUError, AttributeError):   # no libcuda here (or one without TMA): cuda-python says why
        return None


def encode_raw(address: int, elt, shape, strides, block_shape, padding: str = "") -> tuple:
    """encode() from the parts: a device address, the element type, shape and strides (elements).
    Through launch.c's encode_tiled (about a microsecond) where the native module is built, else
    through cuda-python (its argument objects cost some 15 µs a map)."""
    es = max(1, elt.primitive_bitwidth // 8)
    block = tuple(map(int, block_shape))
    dims = tuple(map(int, reversed(shape)))
    if min(dims) <= 0 or max(dims) > 1 << 32:
        raise ValueError(f"tensor descriptor shape {list(reversed(dims))}: TMA needs every dim between 1 and 2**32")
    dtype, box, swizzle, promotion, fill = _encoding(elt.name, es, block, padding or "", L2_PROMOTION)
    byte_strides = tuple(int(s) * es for s in tuple(strides)[-2::-1])
    native = _native_encoder()
    if native is not None:
        encode_tiled, fn = native
        storage, ptr = encode_tiled(fn, dtype, int(address), dims, byte_strides, box, swizzle, promotion, fill)
        if storage is None:
            from . import driver  # noqa: PLC0415
            _fail(driver._error_text(ptr)[0], dims, byte_strides, es, block, elt)
        return storage, ptr
    from cuda.bindings import driver as cu  # noqa: PLC0415 - import time: the GPU path only
    err, tmap = cu.cuTensorMapEncodeTiled(cu.CUtensorMapDataType(dtype), len(dims), address,
                                          [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in byte_strides],
                                          [cu.cuuint32_t(b) for b in box], [cu.cuuint32_t(1)] * len(dims),
                                          cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          cu.CUtensorMapSwizzle(swizzle), cu.CUtensorMapL2promotion(promotion),
                                          cu.CUtensorMapFloatOOBfill(fill))
    if err != cu.CUresult.CUDA_SUCCESS:
        _fail(err.name, dims, byte_strides, es, block, elt)
    return tmap, tmap.getPtr()


def _fail(reason: str, dims, byte_strides, es: int, block, elt):
    raise ValueError(f"cuTensorMapEncodeTiled failed ({reason}) for a tensor descriptor of shape {list(reversed(dims))}, "
                     f"strides {[s // es for s in reversed(byte_strides)]}, block {list(block)}, {elt.name}")
