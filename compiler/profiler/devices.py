"""The hatchet file's device list (proton's: clock, memory clock, bus width, arch, SM count), which
the viewer's `util` metric needs; kernels run by the interpreter list the interpreter instead."""
from __future__ import annotations

import functools

from .data import INTERPRETER_DEVICE, Tree


@functools.lru_cache(maxsize=None)
def cuda_device(device_id: int) -> dict:
    from cuda.bindings import driver as cu  # noqa: PLC0415 - only once a GPU launch was timed

    from ..runtime import driver  # noqa: PLC0415 - driver.init(): cuInit and the error text

    driver.init()
    err, dev = cu.cuDeviceGet(device_id)
    A = cu.CUdevice_attribute

    def attr(name: str) -> int:
        e, v = cu.cuDeviceGetAttribute(getattr(A, name), dev)
        return int(v) if e == cu.CUresult.CUDA_SUCCESS else 0

    return {"clock_rate": attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
            "memory_clock_rate": attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            "bus_width": attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
            "arch": f"{attr('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR')}"
                    f"{attr('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR')}",
            "num_sms": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")}


def describe(tree: Tree) -> None:
    seen = set()
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if node.kernel is not None:
            seen.add(node.kernel)
        stack.extend(node.children.values())
    for device_type, device_id in sorted(seen):
        if device_type == INTERPRETER_DEVICE:
            tree.add_device(device_type, device_id, {"arch": "blocktune interpreter (CPU wall time)"})
        else:
            tree.add_device(device_type, device_id, cuda_device(device_id))
