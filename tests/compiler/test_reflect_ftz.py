"""Triton's `enable_reflect_ftz` launch/compile option: True flushes denormal results (ex2.approx.ftz,
libdevice under nvvm-reflect-ftz=1), False keeps them; not given, blocktune's default (exp2 flushes
as Triton's does, libdevice keeps denormals). PTX checks here; GPU results in test_reflect_ftz_gpu.py."""
from __future__ import annotations

import re

import pytest
import torch

from compiler import ptxas
from tests.compiler.kernels import reflect_ftz as K


@pytest.mark.parametrize("ftz", [None, False, True])
def test_exp2_instruction(ftz):
    kw = {} if ftz is None else {"enable_reflect_ftz": ftz}
    ptx = K.exp2_kernel.warmup(torch.float32, torch.float32, BLOCK=128, grid=(1,), **kw).asm["ptx"]
    assert bool(re.search(r"ex2\.approx\.ftz\.f32", ptx)) == (ftz is not False)
    assert bool(re.search(r"ex2\.approx\.f32", ptx)) == (ftz is False)
    ptxas.report(ptx)


@pytest.mark.parametrize("ftz", [None, False, True])
def test_libdevice_reflect_flag(ftz):
    kw = {} if ftz is None else {"enable_reflect_ftz": ftz}
    ck = K.sin_kernel.warmup(torch.float32, torch.float32, BLOCK=128, grid=(1,), **kw)
    flags = re.findall(r'!\{i32 4, !"nvvm-reflect-ftz", i32 (\d)\}', ck.asm["llir"])
    assert flags == (["1"] if ftz is True else ["0"])
    ptxas.report(ck.asm["ptx"])


def test_the_option_is_part_of_the_cache_key():
    a = K.exp2_kernel.warmup(torch.float32, torch.float32, BLOCK=64, grid=(1,), enable_reflect_ftz=False)
    b = K.exp2_kernel.warmup(torch.float32, torch.float32, BLOCK=64, grid=(1,), enable_reflect_ftz=True)
    assert a.hash != b.hash
