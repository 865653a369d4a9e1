"""What Triton's tutorials ask of the runtime besides kernels (scripts/triton-tutorials.sh runs them):
`triton.runtime.driver.active.get_active_torch_device()` / `get_current_target()` at import, and
tutorial 02's compiled-kernel handling: `fn.warmup(...)`, `kernel._init_handles()`,
`kernel.n_regs`, `kernel.metadata.shared` and `kernel[grid](*every parameter)`."""
from __future__ import annotations

import pickle

import pytest
import torch

import compiler as triton
from compiler.runtime import driver

from tests.compiler.kernels.tutorials import softmax_kernel

SOFTMAX_SIGNATURE = {"output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": "i32",
                     "output_row_stride": "i32", "n_rows": "i32", "n_cols": "i32"}


def test_the_active_device_is_the_cpu_when_interpreting_without_a_gpu(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    if driver.has_gpu():  # as Triton's interpreter: tensors stay on the CUDA device
        assert triton.runtime.driver.active.get_active_torch_device() == torch.device("cuda", driver.current_device())
        return
    assert triton.runtime.driver.active.get_active_torch_device() == torch.device("cpu")
    target = triton.runtime.driver.active.get_current_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)  # what kernels compile for here
    with pytest.raises(driver.NoGPUError):  # a GPU's numbers are never made up
        triton.runtime.driver.active.utils.get_device_properties(None)


def test_without_interpret_mode_or_gpu_there_is_no_active_device(monkeypatch):
    if driver.has_gpu():
        pytest.skip("this machine has a GPU")
    monkeypatch.delenv("BLOCKTUNE_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(driver.NoGPUError, match="BLOCKTUNE_INTERPRET=1"):
        triton.runtime.driver.active.get_active_torch_device()


def test_compiled_kernel_metadata_reads_as_attributes_and_takes_every_parameter(monkeypatch):
    ck = triton.compile(softmax_kernel, signature=SOFTMAX_SIGNATURE, constexprs={"BLOCK_SIZE": 1024, "num_stages": 2},
                        num_warps=8, target="sm_90")
    assert ck.metadata.shared == ck.metadata["shared"] and ck.metadata.num_warps == 8
    with pytest.raises(AttributeError, match="no 'n_regs_per_thread'"):
        ck.metadata.n_regs_per_thread
    assert ck.metadata.parameters == ["output_ptr", "input_ptr", "input_row_stride", "output_row_stride", "n_rows",
                                      "n_cols", "BLOCK_SIZE", "num_stages"]
    again = pickle.loads(pickle.dumps(ck))
    assert again.metadata.shared == ck.metadata.shared

    launched = []
    monkeypatch.setattr(triton.runtime.kernel, "_current_device", lambda: 0)
    monkeypatch.setattr(ck, "make_launcher", lambda dev, names: lambda *a: launched.append((dev, names, a)))
    # tutorial 02: the runtime arguments and the constexprs' values, in the kernel's order
    ck[(3, 1, 1)](0x1000, 0x2000, 781, 781, 1823, 781, 1024, 2, stream=7)
    assert launched == [(0, ck.metadata.passed, (3, 1, 1, 7, 0x1000, 0x2000, 781, 781, 1823, 781))]
    with pytest.raises(ValueError, match="expected 6 arguments"):
        ck[(1,)](0x1000, 0x2000, 781, 781, 1823, 781, 1024)


@pytest.mark.gpu
def test_tutorial_02_persistent_softmax_through_its_compiled_kernel():
    """Tutorial 02's host code: warm up, read registers and shared memory, size the persistent grid
    from the occupancy, launch the compiled kernel with every parameter on torch's current stream."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(1823, 781, device="cuda", generator=gen)
    y = torch.full_like(x, float("nan"))
    props = triton.runtime.driver.active.utils.get_device_properties(x.device.index)
    kernel = softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), *x.shape, BLOCK_SIZE=1024, num_stages=4,
                                   num_warps=8, grid=(1,))
    kernel._init_handles()
    assert kernel.n_regs > 0 and kernel.metadata.shared >= 0
    occupancy = props["max_num_regs"] // (kernel.n_regs * props["warpSize"] * 8)
    if kernel.metadata.shared:
        occupancy = min(occupancy, props["max_shared_mem"] // kernel.metadata.shared)
    programs = min(props["multiprocessor_count"] * max(occupancy, 1), x.shape[0])
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel[(programs, 1, 1)](y, x, x.stride(0), y.stride(0), *x.shape, 1024, 4)
    stream.synchronize()
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-5)
