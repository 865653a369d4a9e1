"""The kernels of test_random.py, test_dropout.py and test_libdevice_math.py compiled for sm_90 and
assembled with ptxas (no GPU): Philox, libdevice calls and inline assembly must assemble, without
spills, and keep the code shape they are meant to have."""
from __future__ import annotations

import re

import pytest

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.backend import nvptx
from compiler.ptxas import require as find_ptxas
from compiler.language.extra import libdevice
from tests.compiler.kernels import dropout as D
from tests.compiler.kernels import extern_math as E
from tests.compiler.kernels import random_kernels as R

find_ptxas()  # CI installs ptxas: without it these tests must fail, not skip

P32 = "*fp32"
# name → (kernel, signature, constexprs, num_warps)
CASES = {
    "philox32": (R.philox_block_kernel, {"counter_ptr": "*i32", "key_ptr": "*i32", "out_ptr": "*i32"},
                 {"BLOCK": 256, "WORD": tl.uint32}, 4),
    "philox64": (R.philox_block_kernel, {"counter_ptr": "*i64", "key_ptr": "*i64", "out_ptr": "*i64"},
                 {"BLOCK": 128, "WORD": tl.uint64}, 4),
    "randint_i32": (R.randint_kernel, {"X": "*i32", "N": "i32", "seed": "i64"}, {"BLOCK": 1024}, 4),
    "randint_i64": (R.randint_kernel, {"X": "*i64", "N": "i32", "seed": "i32"}, {"BLOCK": 1024}, 4),
    "randint_const_seed": (R.randint_const_seed_kernel, {"X": "*i32", "N": "i32"}, {"seed": 0xFFFFFFFF, "BLOCK": 1024}, 4),
    "randint4x": (R.randint4x_kernel, {"X": "*i32", "N": "i32", "seed_ptr": "*i64"}, {"BLOCK": 1024}, 4),
    "rand": (R.rand_kernel, {"X": P32, "N": "i32", "seed": "i32"}, {"OFFSET_DTYPE": tl.int32, "BLOCK": 1024}, 4),
    "randn": (R.randn_kernel, {"X": P32, "N": "i32", "seed": "i64"}, {"OFFSET_DTYPE": tl.int64, "BLOCK": 1024}, 4),
    "rand4x_randn4x": (R.rand4x_randn4x_kernel, {"U": P32, "Z": P32, "N": "i32", "seed": "i32"}, {"BLOCK": 512}, 4),
    "dropout": (D.dropout_kernel, {"x_ptr": P32, "x_keep_ptr": "*i1", "output_ptr": P32, "n_elements": "i32", "p": "fp32"},
                {"BLOCK_SIZE": 1024}, 4),
    "seeded_dropout": (D.seeded_dropout_kernel, {"x_ptr": P32, "output_ptr": P32, "n_elements": "i32", "p": "fp32", "seed": "i32"},
                       {"BLOCK_SIZE": 1024}, 4),
    "seeded_dropout_fp16": (D.seeded_dropout_kernel, {"x_ptr": "*fp16", "output_ptr": "*fp16", "n_elements": "i32", "p": "fp32",
                                                       "seed": "i32"}, {"BLOCK_SIZE": 2048}, 8),
    "asin_tutorial_07": (E.asin_kernel, {"x_ptr": P32, "y_ptr": P32, "n_elements": "i32"}, {"BLOCK_SIZE": 1024}, 4),
    "libdevice_pow": (E.pow_scalar_exponents_kernel, {"X": P32, "Y": P32, "N": "i32"}, {"BLOCK": 1024}, 4),
    "extern_elementwise": (E.extern_elementwise_kernel, {"X": P32, "Y": P32, "N": "i32"}, {"BLOCK": 512}, 4),
    "libdevice_classify": (E.classify_kernel, {"X": P32, "Y": "*i32", "N": "i32"}, {"BLOCK": 1024}, 4),
    "libdevice_erfinv_fp64": (E.apply1_kernel, {"X": "*fp64", "Y": "*fp64", "N": "i32"}, {"FN": libdevice.erfinv, "BLOCK": 256}, 4),
    "libdevice_add_rz": (E.apply2_kernel, {"X": P32, "Z": P32, "Y": P32, "N": "i32"}, {"FN": libdevice.add_rz, "BLOCK": 1024}, 4),
    "libdevice_brev_i64": (E.apply1_kernel, {"X": "*i64", "Y": "*i64", "N": "i32"}, {"FN": libdevice.brev, "BLOCK": 512}, 4),
    "tl_math": (E.math_kernel, {"X": P32, "Z": P32, "Y": P32, "N": "i32"}, {"BLOCK": 512}, 4),
    "clamp_nan": (E.clamp_kernel, {"X": P32, "Lo": P32, "Hi": P32, "Y": P32, "N": "i32"},
                  {"PROPAGATE_NAN": tl.PropagateNan.ALL, "BLOCK": 1024}, 4),
    "umulhi_i64": (E.umulhi_kernel, {"X": "*i64", "Z": "*i64", "Y": "*i64", "N": "i32"}, {"BLOCK": 512}, 4),
    "asm_packed": (E.asm_shift_packed_kernel, {"X": "*u8", "Y": "*i8"}, {"BLOCK": 1024}, 4),
    "asm_funnel": (E.asm_funnel_shift_kernel, {"X": "*u32", "Z": "*u32", "Y": "*u32", "N": "i32"}, {"SHIFT": 7, "BLOCK": 512}, 4),
    "asm_two_outputs": (E.asm_two_outputs_kernel, {"X": "*u32", "Lo": "*u32", "Hi": "*u32", "N": "i32"}, {"BLOCK": 512}, 4),
    "asm_float": (E.asm_float_kernel, {"X": P32, "Y": P32, "N": "i32"}, {"BLOCK": 512}, 4),
    "special_registers": (E.special_registers_kernel, {"Sm": "*i32", "Times": "*i64", "Out": "*i32"}, {"BLOCK": 128}, 4),
    "asm_impure_store": (E.asm_impure_store_kernel, {"X": "*u8", "Y": "*u8"}, {"BLOCK": 512}, 4),
    "asm_packed_two_outputs": (E.asm_packed_two_outputs_kernel, {"A": "*u8", "B": P32, "C": "*i32", "D": P32},
                               {"BLOCK": 512}, 4),
}
_compiled = {}


def ptx_of(name):
    if name not in _compiled:
        kern, sig, cx, nw = CASES[name]
        pointers = tuple(k for k, v in sig.items() if v.startswith("*"))
        _compiled[name] = triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, target="sm_90",
                                         divisible_by_16=pointers).asm["ptx"]
    return _compiled[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_assembles_without_spills(name):
    rep = ptxas.report(ptx_of(name))
    assert int(re.search(r"(\d+) bytes spill stores", rep).group(1)) == 0, rep


def test_philox_rounds_are_32_bit_high_multiplies():
    ptx = ptx_of("randint_i32")
    assert "mul.hi.u32" in ptx and "mul.lo.s64" not in ptx  # no 64-bit emulation of 32-bit Philox
    # int64 offsets: still Philox4x32, over the offset's two 32-bit words (Triton 3.6)
    assert "mul.hi.u32" in ptx_of("randint_i64") and "mul.hi.u64" not in ptx_of("randint_i64")


def test_libdevice_is_inlined_not_called():
    for name in ("asin_tutorial_07", "libdevice_pow", "libdevice_erfinv_fp64"):
        assert not re.search(r"call(\.uni)?\s.*__nv_", ptx_of(name)), name


def test_rounding_mode_and_inline_asm_reach_the_ptx():
    assert "add.rz.f32" in ptx_of("libdevice_add_rz")
    assert ptx_of("asm_packed").count("shl.b32") == 2  # 8 bytes per thread, 4 per asm instance
    assert "shf.l.wrap.b32" in ptx_of("asm_funnel")
    assert "mul.hi.u32" in ptx_of("asm_two_outputs") and "fma.rn.f32" in ptx_of("asm_float")
    # tl.extra.cuda's special registers: the timer is read twice (impure), the SM id once
    regs = ptx_of("special_registers")
    assert regs.count("%globaltimer") == 2 and regs.count("%smid") == 1
    # an impure asm whose result is unused still runs: 512 bytes over 128 threads, 4 instances each
    assert ptx_of("asm_impure_store").count("st.global.b8") == 4
    # Triton's packing: per instance one register for four uint8, one per float32 and per output
    # (4 elements a thread: one instance)
    packed = ptx_of("asm_packed_two_outputs")
    assert packed.count("max.f32") == 4 and packed.count("cvt.u32.u8") == 4


def test_nan_propagating_clamp_uses_the_nan_instructions():
    ptx = ptx_of("clamp_nan")
    assert "max.NaN.f32" in ptx and "min.NaN.f32" in ptx
