"""A kernel above 48 KB of shared memory is loaded with the largest shared-memory carveout
preference (driver.prefer_shared_memory, as Triton's loader asks), so that as many programs share
an SM as their shared memory allows: two programs of just under half an SM's shared memory must
run on one SM at the same time (`pytest -m gpu`)."""
from __future__ import annotations

import ctypes

import pytest

from compiler.runtime import driver

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

# thread 0 of each program notes its SM, then spins on the global timer for `spin_ns` and writes
# (SM, start, end); the programs ask for the launch's dynamic shared memory and touch none of it
RESIDENT_PTX = """.version 8.0
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 smem[];
.visible .entry resident(.param .u64 out, .param .u64 spin_ns)
{
  .reg .pred p;
  .reg .b32 r<3>;
  .reg .b64 rd<9>;
  mov.u32 r0, %tid.x;
  setp.ne.u32 p, r0, 0;
  @p bra DONE;
  mov.u32 r1, %smid;
  mov.u32 r2, %ctaid.x;
  ld.param.u64 rd0, [out];
  ld.param.u64 rd1, [spin_ns];
  mov.u64 rd2, %globaltimer;
SPIN:
  mov.u64 rd3, %globaltimer;
  sub.u64 rd4, rd3, rd2;
  setp.lt.u64 p, rd4, rd1;
  @p bra SPIN;
  mul.wide.u32 rd5, r2, 24;
  add.u64 rd6, rd0, rd5;
  cvt.u64.u32 rd7, r1;
  st.global.u64 [rd6], rd7;
  st.global.u64 [rd6+8], rd2;
  st.global.u64 [rd6+16], rd3;
DONE:
  ret;
}
"""


def _shared_per_sm() -> int:
    from cuda.bindings import driver as cu
    driver.init()
    dev = driver._check(cu.cuDeviceGet(0), "cuDeviceGet")
    attr = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    return int(driver._check(cu.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute"))


def _carveout(lf) -> int:
    from cuda.bindings import driver as cu
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    return int(driver._check(cu.cuFuncGetAttribute(attr, lf.function), "cuFuncGetAttribute"))


def _most_programs_at_once_on_one_sm(lf, programs: int, shared: int) -> int:
    out = torch.zeros(programs * 3, dtype=torch.int64, device="cuda")
    values = [ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(200_000)]   # 200 µs a program
    params = (ctypes.c_void_p * 2)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    torch.cuda.synchronize()
    driver.launch(lf, (programs,), 128, shared, torch.cuda.current_stream().cuda_stream, params)
    torch.cuda.synchronize()
    rows = out.view(programs, 3).tolist()
    assert all(end > start > 0 for _, start, end in rows), "a program did not run"
    most = 0
    for sm in {r[0] for r in rows}:
        spans = [(s, e) for m, s, e in rows if m == sm]
        for s, _ in spans:
            most = max(most, sum(1 for s2, e2 in spans if s2 <= s < e2))
    return most


def test_large_shared_memory_kernels_get_the_largest_carveout():
    per_sm = _shared_per_sm()
    shared = per_sm // 2 - 2048   # two fit on an SM (with the 1 KB a program the system keeps) only at the largest carveout
    if shared <= 48 * 1024:
        pytest.skip(f"{per_sm} bytes of shared memory an SM: no kernel above 48 KB fits twice")
    lf = driver.load_module(RESIDENT_PTX, "resident", shared=shared)
    assert _carveout(lf) == 100
    programs = 2 * driver.device_properties(0)["sm_count"]
    assert _most_programs_at_once_on_one_sm(lf, programs, shared) == 2


def test_small_shared_memory_kernels_keep_the_drivers_choice():
    lf = driver.load_module(RESIDENT_PTX, "resident", shared=16 * 1024)
    assert _carveout(lf) != 100
