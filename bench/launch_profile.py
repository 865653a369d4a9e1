"""Where the host time of one launch goes: each step of the generated runner timed alone.

    python bench/launch_profile.py     (GPU machine)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load_twice  # noqa: E402
from launch import _batch_us  # noqa: E402

import torch  # noqa: E402

_, bt = load_twice("tutorial_kernels.py")
x = torch.rand(1024, device="cuda")
y = torch.rand_like(x)
out = torch.empty_like(x)
k = bt.add_kernel
N = 200000


def per_call(fn, n=N, batch=256):
    """Best of 3 of the mean host µs per call (launch.py's batches: a sync outside the timing)."""
    for _ in range(1000):
        fn()
    torch.cuda.synchronize()
    return min(_batch_us(fn, n, batch) for _ in range(3))


grid = (1,)
k[grid](x, y, out, 1024, BLOCK_SIZE=1024)
run = k[grid]
entry = next(iter(k._launchers.values()))
launch = entry[0]
stream = torch._C._cuda_getCurrentRawStream(0)
p0, p1, p2 = x.data_ptr(), y.data_ptr(), out.data_ptr()
key_parts = (x.dtype, True, y.dtype, True, out.dtype, True, "i32", True, 1024, 4, 3, 0)
table = {}
rows = [
    ("empty lambda", lambda: None),
    ("x.data_ptr()", lambda: x.data_ptr()),
    ("x.is_cuda", lambda: x.is_cuda),
    ("x.dtype", lambda: x.dtype),
    ("type(x) is Tensor", lambda: type(x) is torch.Tensor),
    ("getDevice + getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())),
    ("key tuple + dict.get", lambda: k._launchers.get((x.dtype, True, y.dtype, True, out.dtype, True, "i32", True, 1024, 4, 3, 0))),
    ("k[grid] (getitem)", lambda: k[grid]),
    (f"launcher alone ({type(launch).__name__})", lambda: launch(1, 1, 1, stream, p0, p1, p2, 1024)),
    ("runner (after getitem)", lambda: run(x, y, out, 1024, BLOCK_SIZE=1024)),
    ("k[grid](...) full", lambda: k[grid](x, y, out, 1024, BLOCK_SIZE=1024)),
    ("torch.add(out=)", lambda: torch.add(x, y, out=out)),
]
# the same launch through cuda-python's Cython binding, params array passed as an address
try:
    from cuda.bindings import driver as cu
    lf = entry[1]._loaded if hasattr(entry[1], "_loaded") else None
    fn_obj = None
    for v in getattr(launch, "__globals__", {}).values():
        if type(v).__name__ == "LoadedFunction":
            fn_obj = v.function
    pa = launch.__globals__["_pa"]
    import ctypes
    pa_addr = ctypes.addressof(pa)
    s_obj = cu.CUstream(stream)
    if fn_obj is not None:
        rows.append(("cuda-python cuLaunchKernel (params by address)",
                     lambda: cu.cuLaunchKernel(fn_obj, 1, 1, 1, 128, 1, 1, 0, s_obj, pa_addr, 0)))
except Exception as exc:  # noqa: BLE001
    print("cuda-python variant unavailable:", exc)
for name, fn in rows:
    table[name] = per_call(fn, N if "launch" not in name and "k[" not in name and "runner" not in name and "torch" not in name else 20000)
    print(f"  {name:42s} {table[name]:7.3f} us", flush=True)
