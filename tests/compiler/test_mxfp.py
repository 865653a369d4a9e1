"""compiler.tools.mxfp (Triton's triton.tools.mxfp): E2M1 and E8M0 encodings checked against values
worked out by hand from the OCP MX spec."""
import math

import pytest
import torch

from compiler.tools.mxfp import MXFP4Tensor, MXScaleTensor

# code 0b SEEM -> value
E2M1 = {0b0000: 0.0, 0b0001: 0.5, 0b0010: 1.0, 0b0011: 1.5, 0b0100: 2.0, 0b0101: 3.0, 0b0110: 4.0, 0b0111: 6.0}


def test_e2m1_every_code_to_float():
    codes = torch.arange(16, dtype=torch.uint8)
    fp4 = MXFP4Tensor(size=16)
    fp4.data = codes
    got = fp4.to(torch.float32)
    expected = [E2M1[c] for c in range(8)] + [-E2M1[c] for c in range(8)]
    assert got.dtype == torch.float32
    assert got.tolist() == expected
    assert math.copysign(1.0, got[8].item()) == -1.0  # 0b1000 is -0.0


def test_e2m1_from_representable_values_is_exact():
    values = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, -0.0])
    fp4 = MXFP4Tensor(data=values)
    assert fp4.data.dtype == torch.uint8
    assert fp4.data.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 8]
    assert torch.equal(fp4.to(torch.float32), values)


@pytest.mark.parametrize("value, expected", [
    # ties go to the code with mantissa bit 0
    (0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0),
    # off the ties: nearest
    (0.26, 0.5), (0.74, 0.5), (1.3, 1.5), (2.6, 3.0), (3.4, 3.0), (5.01, 6.0), (4.99, 4.0), (0.1, 0.0),
    # beyond the range and non-finite: the largest magnitude, the sign kept
    (7.0, 6.0), (1e30, 6.0), (float("inf"), 6.0), (-float("inf"), -6.0), (-100.0, -6.0),
    (-0.25, -0.0), (-2.5, -2.0), (-5.0, -4.0),
])
def test_e2m1_rounds_to_nearest_even(value, expected):
    got = MXFP4Tensor(data=torch.tensor([value])).to(torch.float32).item()
    assert got == expected and math.copysign(1.0, got) == math.copysign(1.0, expected)


def test_e2m1_keeps_shape_and_input():
    values = torch.tensor([[0.3, -2.9, 7.0], [1.1, 0.0, -0.6]])
    before = values.clone()
    fp4 = MXFP4Tensor(data=values)
    assert fp4.data.shape == (2, 3)
    assert fp4.to(torch.float32).tolist() == [[0.5, -3.0, 6.0], [1.0, 0.0, -0.5]]
    assert torch.equal(values, before)


def test_packing_puts_the_even_element_in_the_low_nibble():
    fp4 = MXFP4Tensor(data=torch.tensor([[1.0, -6.0, 0.5, 3.0], [0.0, 4.0, -1.5, 2.0]]))
    # codes [[2, 15, 1, 5], [0, 6, 11, 4]]
    packed = fp4.to_packed_tensor(dim=1)
    assert packed.dtype == torch.uint8
    assert packed.tolist() == [[0xF2, 0x51], [0x60, 0x4B]]
    along_rows = fp4.to_packed_tensor(dim=0)
    assert along_rows.tolist() == [[0x02, 0x6F, 0xB1, 0x45]]
    assert torch.equal(fp4.unpack_packed_tensor(packed, 1, fp4.data.shape), fp4.data)
    assert torch.equal(fp4.unpack_packed_tensor(along_rows, 0, fp4.data.shape), fp4.data)


def test_packing_an_odd_length_pads_with_zero():
    fp4 = MXFP4Tensor(data=torch.tensor([[6.0, 1.0, -0.5]]))  # codes 7, 2, 9
    packed = fp4.to_packed_tensor(dim=1)
    assert packed.tolist() == [[0x27, 0x09]]
    assert torch.equal(fp4.unpack_packed_tensor(packed, 1, (1, 3)), fp4.data)
    with pytest.raises(ValueError):
        fp4.to_packed_tensor(dim=2)


def test_random_fp4_covers_every_code():
    torch.manual_seed(0)
    fp4 = MXFP4Tensor(size=(64, 32), device="cpu").random()
    assert fp4.data.shape == (64, 32) and fp4.data.dtype == torch.uint8
    assert sorted(fp4.data.unique().tolist()) == list(range(16))
    assert torch.isfinite(fp4.to(torch.float32)).all()


def test_needs_data_or_size():
    with pytest.raises(ValueError):
        MXFP4Tensor()
    with pytest.raises(ValueError):
        MXScaleTensor()
    with pytest.raises(ValueError):
        MXFP4Tensor(size=4).random().to(torch.float16)


def test_wrong_arguments_are_also_assertion_errors_as_in_triton():
    """Triton's module asserts its arguments, and its tests expect AssertionError."""
    with pytest.raises(AssertionError, match="dim 2 is out of range for a 2-D tensor"):
        MXFP4Tensor(size=(4, 4)).random().to_packed_tensor(dim=2)
    with pytest.raises(AssertionError, match="float32 only"):
        MXScaleTensor(size=4).random().to(torch.float16)


def test_e8m0_from_float_floors_log2():
    values = torch.tensor([1.0, 2.0, 3.0, 0.5, 0.75, 1e-45, 2.0**127, 3e38, 0.0, -1.0, float("nan"), float("inf")])
    scales = MXScaleTensor(data=values)
    assert scales.data.dtype == torch.uint8
    # 2**-149 (the smallest subnormal) is below 2**-127: clamps to code 0
    assert scales.data.tolist() == [127, 128, 128, 126, 126, 0, 254, 254, 255, 255, 255, 255]


def test_e8m0_to_float():
    scales = MXScaleTensor(size=5)
    scales.data = torch.tensor([127, 130, 120, 0, 255], dtype=torch.uint8)
    got = scales.to(torch.float32)
    assert got[:4].tolist() == [1.0, 8.0, 2.0**-7, 2.0**-127]
    assert math.isnan(got[4].item())


def test_e8m0_random_stays_within_bounds():
    torch.manual_seed(0)
    scales = MXScaleTensor(size=(4000, ), device="cpu").random(high=64.0)
    assert scales.data.max().item() == 127 + 6 and scales.data.min().item() == 0
    values = MXScaleTensor(size=4000).random(low=0.3, high=5.0).to(torch.float32)
    assert sorted(values.unique().tolist()) == [0.5, 1.0, 2.0, 4.0]
    assert not torch.isnan(MXScaleTensor(size=4000).random().to(torch.float32)).any()
    with pytest.raises(ValueError):
        MXScaleTensor(size=2).random(low=8.0, high=2.0)
