"""Triton's runtime names that its own tests and kernel libraries import: `triton.reinterpret` /
`TensorWrapper`, `triton.runtime.errors`, `tl.str_to_ty` and `type_canonicalisation_dict`."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler
import compiler.language as tl
from compiler.runtime import jit as jit_module
from tests.compiler.kernels.util import gen, interpret  # noqa: F401


@compiler.jit
def shift_right_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) >> 4)


def test_reinterpret_runs_a_kernel_on_the_wrapped_dtype(interpret, gen):
    x = torch.randint(-128, 128, (64,), generator=gen, dtype=torch.int8)
    x[0] = -16  # 0xF0: >> 4 is 15 as uint8, -1 as int8
    y = torch.full((64,), 0x5A, dtype=torch.int8)
    shift_right_kernel[(1,)](compiler.reinterpret(x, tl.uint8), compiler.reinterpret(y, tl.uint8), N=64)
    expected = x.numpy().view(np.uint8) >> 4
    assert np.array_equal(y.numpy().view(np.uint8), expected)
    assert y[0].item() == 15
    # the same storage as int8: an arithmetic shift
    shift_right_kernel[(1,)](x, y, N=64)
    assert np.array_equal(y.numpy(), x.numpy() >> 4) and y[0].item() == -1


def test_reinterpret_wraps_and_unwraps():
    x = torch.zeros(8, dtype=torch.int8)
    w = compiler.reinterpret(x, tl.uint8)
    assert isinstance(w, compiler.TensorWrapper) and w.dtype is tl.uint8 and w.base is x
    assert w.data_ptr() == x.data_ptr() and w.shape == x.shape and w.element_size() == 1
    assert compiler.reinterpret(w, tl.float8e4nv).base is x
    assert compiler.reinterpret(w, torch.int8) is x  # back to the base's own dtype: the base
    with pytest.raises(TypeError, match="Cannot reinterpret"):
        compiler.reinterpret(3, tl.uint8)
    assert jit_module.TensorWrapper is compiler.TensorWrapper and jit_module.reinterpret is compiler.reinterpret


def test_a_wrapped_argument_specializes_as_a_pointer_to_its_dtype():
    w = compiler.reinterpret(torch.zeros(16, dtype=torch.int8), tl.uint8)
    key, aligned, ptr = jit_module.spec_arg(w, 0, "x", interpret=True)
    assert jit_module.key_to_type(key) == "*u8" and ptr == w.data_ptr() and aligned == (ptr % 16 == 0)
    with pytest.raises(ValueError, match="CPU tensor"):
        jit_module.spec_arg(w, 0, "x", interpret=False)


def test_runtime_errors_module():
    from compiler.interpreter import InterpreterError
    from compiler.runtime import errors
    assert errors.InterpreterError is InterpreterError and errors.OutOfResources is compiler.OutOfResources


def test_str_to_ty_and_type_canonicalisation():
    canon = jit_module.type_canonicalisation_dict
    assert tl.str_to_ty("*fp32") is tl.pointer_type(tl.float32)
    assert tl.str_to_ty(canon["float8_e4m3fn"]) is tl.float8e4nv
    assert tl.str_to_ty(canon["bool"]) is tl.int1 and tl.str_to_ty(canon["uint16"]) is tl.uint16
    for name, short in canon.items():
        assert canon[short] == short  # the short names map to themselves
        if short != "void":
            assert tl.str_to_ty(short) is tl.str_to_ty(canon[name])
    assert tl.str_to_ty("*fp8e4b15") is tl.pointer_type(tl.float8e4b15)  # a signature type (interpret mode runs it)
    assert tl.str_to_ty(canon["float8_e5m2fnuz"]) is tl.float8e5b16
    with pytest.raises(ValueError, match="unknown type"):
        tl.str_to_ty("fp7e4")


@pytest.mark.gpu
def test_reinterpret_on_the_gpu(gen):
    x = torch.randint(-128, 128, (64,), generator=gen, dtype=torch.int8).cuda()
    y = torch.full((64,), 0x5A, dtype=torch.int8, device="cuda")
    shift_right_kernel[(1,)](compiler.reinterpret(x, tl.uint8), compiler.reinterpret(y, tl.uint8), N=64)
    assert np.array_equal(y.cpu().numpy().view(np.uint8), x.cpu().numpy().view(np.uint8) >> 4)


@compiler.jit
def to_fp8e4b15_kernel(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr).to(tl.float8e4b15).to(tl.float32))


def test_other_fp8_formats_by_their_triton_names(monkeypatch):
    assert tl.float8e4b15.primitive_bitwidth == 8 and tl.float8e4b8.is_floating() and tl.float8e5b16.name == "fp8e5b16"
    x = torch.tensor([1.3])
    y = torch.empty(1)
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    to_fp8e4b15_kernel[(1,)](x, y)  # e4m3 with bias 15: 1.3 rounds to 1.25
    assert y.item() == 1.25
    # Triton's software conversions compile for the GPU (test_fp8.py checks them bit for bit)
    compiler.compile(to_fp8e4b15_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32"}, target="sm_90")


def test_dtype_by_triton_names():
    names = tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.FP_TYPES + tl.dtype.OTHER_TYPES
    types = list(map(tl.dtype, names))
    assert types[:4] == [tl.int8, tl.int16, tl.int32, tl.int64]
    assert tl.dtype("int1") is tl.int1 and tl.dtype("uint32") is tl.uint32 and tl.dtype("bf16") is tl.bfloat16
    assert all(t.is_int_signed() for t in map(tl.dtype, tl.dtype.SINT_TYPES))
    assert all(t.is_floating() for t in map(tl.dtype, tl.dtype.FP_TYPES))
    with pytest.raises(ValueError, match="unknown dtype 'int7'"):
        tl.dtype("int7")


def test_dtype_names_are_triton_s_and_signatures_stay_short():
    full = {tl.int1: "int1", tl.int8: "int8", tl.int16: "int16", tl.int32: "int32", tl.int64: "int64",
            tl.uint8: "uint8", tl.uint16: "uint16", tl.uint32: "uint32", tl.uint64: "uint64",
            tl.float16: "fp16", tl.bfloat16: "bf16", tl.float32: "fp32", tl.float64: "fp64"}
    for ty, name in full.items():
        assert ty.name == name and str(ty) == name
        assert tl.dtype(name) is ty and tl.dtype(ty.sig_name) is ty
        assert tl.str_to_ty(ty.sig_name) is ty
    # Triton's tests look numpy types up by the name (triton._internal_testing.to_numpy)
    assert getattr(np, tl.uint8.name) is np.uint8 and getattr(np, tl.int64.name) is np.int64
    assert repr(tl.uint16) == "triton.language.uint16"
    assert (tl.uint8.sig_name, tl.int1.sig_name, tl.float32.sig_name) == ("u8", "i1", "fp32")
    assert str(tl.pointer_type(tl.uint8)) == "*u8" and str(tl.pointer_type(tl.int1)) == "*i1"
    w = compiler.reinterpret(torch.zeros(4, dtype=torch.int8), tl.uint32)
    assert jit_module.key_to_type(jit_module.spec_arg(w, 0, "x", interpret=True)[0]) == "*u32"


@pytest.mark.parametrize("ty, torch_dtype", [(tl.float16, torch.float16), (tl.bfloat16, torch.bfloat16),
                                              (tl.float32, torch.float32), (tl.float8e4nv, torch.float8_e4m3fn),
                                              (tl.float8e5, torch.float8_e5m2)])
def test_fp_format_fields_decode_every_normal_value(ty, torch_dtype):
    """(-1)**s * 2**(e - exponent_bias) * (1 + m / 2**fp_mantissa_width) for each normal bit pattern."""
    bits = ty.primitive_bitwidth
    patterns = torch.arange(0, 2**bits, dtype=torch.int64) if bits <= 16 else \
        torch.randint(0, 2**32, (1 << 16,), dtype=torch.int64)
    m_width, exp_width = ty.fp_mantissa_width, bits - ty.fp_mantissa_width - 1
    sign, exp = (patterns >> (bits - 1)) & 1, (patterns >> m_width) & ((1 << exp_width) - 1)
    frac = patterns & ((1 << m_width) - 1)
    signed_ints = {8: torch.int8, 16: torch.int16, 32: torch.int32}[bits]
    values = patterns.to(signed_ints).view(torch_dtype).double()
    normal = (exp > 0) & torch.isfinite(values) & (exp < (1 << exp_width) - 1 if ty is not tl.float8e4nv else True)
    decoded = (1 - 2 * sign.double()) * torch.pow(2.0, (exp - ty.exponent_bias).double()) * (1 + frac.double() / 2**m_width)
    assert normal.sum() > 0 and torch.equal(decoded[normal], values[normal])


def test_fp_format_fields_are_floating_point_only():
    assert (tl.float8e4b15.exponent_bias, tl.float8e5b16.fp_mantissa_width, tl.float64.exponent_bias) == (15, 2, 1023)
    with pytest.raises(AttributeError, match="int32 is not a floating-point type"):
        tl.int32.exponent_bias


@compiler.jit
def popc_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.extern_elementwise("", "", [x], {(tl.uint32, ): ("__nv_popc", tl.int32), ("i32", ): ("__nv_popc", "i32")},
                              is_pure=True)
    tl.store(y_ptr + offs, y)


def test_extern_elementwise_takes_types_by_object_or_signature_name(interpret, gen):
    x = torch.randint(-2**31, 2**31 - 1, (32,), generator=gen, dtype=torch.int32)
    y = torch.zeros(32, dtype=torch.int32)
    popc_kernel[(1,)](x, y, N=32)
    expected = [bin(v & 0xFFFFFFFF).count("1") for v in x.tolist()]
    assert y.tolist() == expected


def test_errors_are_triton_errors():
    assert issubclass(compiler.CompilationError, compiler.TritonError)
    assert issubclass(compiler.OutOfResources, compiler.TritonError)
    assert issubclass(compiler.AutotunerError, compiler.TritonError)


@compiler.autotune(configs=[compiler.Config({"BLOCK": 16}), compiler.Config({"BLOCK": 32})], key=["N"],
                   prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []})
@compiler.jit
def pruned_to_nothing_kernel(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs, mask=offs < N)


def test_pruning_every_config_is_an_autotuner_error(interpret):
    x = torch.zeros(16, dtype=torch.int32)
    with pytest.raises(compiler.TritonError) as e:
        pruned_to_nothing_kernel[(1,)](x, 16)
    assert isinstance(e.value, compiler.AutotunerError)
    assert str(e.value) == ("Autotuner error: No valid autotuner configs after pruning. `early_config_prune` should "
                            "return at least one config.")
    assert (x == 0).all()


@compiler.autotune(configs=[compiler.Config({"BLOCK": 16}), compiler.Config({"BLOCK": 32})], key=["N"],
                   prune_configs_by={"early_config_prune": lambda configs, nargs, **kw:
                                     [c for c in configs if c.kwargs["BLOCK"] >= nargs["N"]]})
@compiler.jit
def pruned_to_fit_kernel(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs + 1, mask=offs < N)


def test_interpret_mode_runs_a_config_early_config_prune_keeps(interpret):
    x = torch.zeros(32, dtype=torch.int32)
    pruned_to_fit_kernel[(1,)](x, 32)  # BLOCK=16, the first config, would write half of x
    assert pruned_to_fit_kernel.best_config.kwargs["BLOCK"] == 32
    assert torch.equal(x, torch.arange(1, 33, dtype=torch.int32))


@compiler.jit
def member_functions_kernel(x_ptr, y_ptr, s_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    bits = x.cast(tl.int32, bitcast=True)
    (y_ptr + offs).store(bits.cast(tl.float32, bitcast=True).floor())
    tl.store(s_ptr, x.cos().sum(0))


def test_triton_tensor_member_functions(interpret, gen):
    x = torch.rand(32, generator=gen, dtype=torch.float32) * 8 - 4
    y = torch.full((32,), float("nan"))
    s = torch.full((1,), float("nan"))
    member_functions_kernel[(1,)](x, y, s, N=32)
    assert torch.equal(y, torch.floor(x))
    torch.testing.assert_close(s[0].double(), torch.cos(x.double()).sum(), rtol=1e-5, atol=1e-5)


def test_the_active_driver_answers_as_triton_s():
    """`triton.runtime.driver.active`, which Triton's tests and kernel libraries ask for the target
    and the device's limits: the same numbers as blocktune's own device properties."""
    from compiler.runtime import driver
    assert compiler.runtime.driver.active is driver.active
    if not driver.has_gpu():
        assert driver.active.is_active() is False
        return
    props = driver.device_properties(driver.active.get_current_device())
    target = driver.active.get_current_target()
    assert target.backend == "cuda" and target.arch == props["capability"][0] * 10 + props["capability"][1]
    info = driver.active.utils.get_device_properties(driver.active.get_current_device())
    assert info["max_shared_mem"] == props["max_shared_memory"] and info["multiprocessor_count"] == props["sm_count"]
