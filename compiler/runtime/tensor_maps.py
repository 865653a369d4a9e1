"""CUtensorMaps of host tensor descriptors, encoded with the driver's `cuTensorMapEncodeTiled`
(cuda-python) when a launch first sees a descriptor and cached, so that a launch with the same
tensor and block costs one dictionary look-up.

The box and swizzle follow tensor_map.py (the tile layout the kernel's shared memory expects);
out-of-bounds elements of a load are zero, or NaN for `padding="nan"`. The key is everything the
map encodes: the base address, shape, strides, element type, block and padding (a new tensor at a
freed tensor's address with the same shape gets the same, still correct, map).
"""
from __future__ import annotations

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
    tmap = encode(desc)
    with _lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()   # cuLaunchKernel copies parameters at the call: no launch holds one
        _cache[key] = (tmap, tmap.getPtr())
    return _cache[key][1]


def encode(desc):
    """A cuda.bindings CUtensorMap for `desc` (raises ValueError with the driver's reason)."""
    return encode_raw(desc.base.data_ptr(), T.from_host_dtype(desc.base.dtype), desc.shape, desc.strides,
                      desc.block_shape, desc.padding)


def encode_raw(address: int, elt, shape, strides, block_shape, padding: str = ""):
    """encode() from the parts: a device address, the element type, shape and strides (elements)."""
    from cuda.bindings import driver as cu  # noqa: PLC0415 - import time: the GPU path only

    es = max(1, elt.primitive_bitwidth // 8)
    block = tuple(int(b) for b in block_shape)
    shape = [int(s) for s in shape]
    if any(s <= 0 or s > 1 << 32 for s in shape):
        raise ValueError(f"tensor descriptor shape {shape}: TMA needs every dim between 1 and 2**32")
    rank = len(shape)
    dims = [cu.cuuint64_t(s) for s in reversed(shape)]
    strides = [cu.cuuint64_t(int(s) * es) for s in reversed(list(strides)[:-1])]
    box = [cu.cuuint32_t(b) for b in tensor_map.box(block, es)]
    ones = [cu.cuuint32_t(1)] * rank
    dtype = getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DATA_TYPES[elt.name])
    swizzle = getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + _SWIZZLE[tensor_map.swizzle_bytes(block, es)])
    fill = cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA if padding == "nan" \
        else cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
    err, tmap = cu.cuTensorMapEncodeTiled(dtype, rank, address, dims, strides, box, ones,
                                          cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                          getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + L2_PROMOTION), fill)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeTiled failed ({err.name}) for a tensor descriptor of shape {shape}, "
                         f"strides {list(strides)}, block {list(block)}, {elt.name}")
    return tmap
