"""tl.atomic_* with masks, sem and scope, on blocks and scalars, returning the old values:
interpret mode against a sequential (program order, then lane order) reference, as Triton's
interpreter does them; the PTX `atom` qualifiers; compile errors; and GPU runs (marked `gpu`)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import compiler as triton
from compiler.errors import CompilationError
from tests.compiler.kernels import atomics as A
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401

SLOTS, BLOCK = 4, 64
N = 150  # 3 programs, the last one partly masked

_COMBINE = {
    "add": lambda a, v, c: a + v, "max": lambda a, v, c: max(a, v), "min": lambda a, v, c: min(a, v),
    "and": lambda a, v, c: a & v, "or": lambda a, v, c: a | v, "xor": lambda a, v, c: a ^ v,
    "xchg": lambda a, v, c: v, "cas": lambda a, v, c: v if a == c else a,
}
CASES = [("add", torch.float32), ("add", torch.float16), ("add", torch.int32), ("add", torch.int64), ("add", torch.uint32),
         ("max", torch.float32), ("max", torch.int32), ("max", torch.int64), ("max", torch.uint32),
         ("min", torch.float32), ("min", torch.int32), ("min", torch.int64), ("min", torch.uint32),
         ("and", torch.int32), ("and", torch.int64), ("or", torch.int32), ("or", torch.uint32), ("xor", torch.int32),
         ("xor", torch.int64), ("xchg", torch.float32), ("xchg", torch.int32), ("xchg", torch.int64),
         ("cas", torch.int32), ("cas", torch.int64), ("cas", torch.float32)]


def _inputs(g, op, dt, device="cpu"):
    if dt.is_floating_point:
        vals = rand(g, (N,), dt, -4, 4)
        acc = rand(g, (SLOTS,), dt, -4, 4)
        if op == "add":  # quarters: every partial sum is exact, so the order of additions cannot matter
            vals, acc = torch.round(vals.float() * 4).to(dt) / 4, torch.round(acc.float() * 4).to(dt) / 4
    else:
        lo = 0 if dt == torch.uint32 else -1000
        vals = rand(g, (N,), dt, lo, 1000 if op not in ("and", "or", "xor") else 2 ** 20)
        acc = rand(g, (SLOTS,), dt, lo, 1000)
    # some lanes match; through int64, since torch has no where() for uint32 on every version
    wide = torch.int64 if dt == torch.uint32 else dt
    cmp = torch.where(torch.arange(N) % 3 == 0, acc.to(wide).repeat(N // SLOTS + 1)[:N], vals.to(wide)).to(dt)
    if op == "cas":  # small values so later lanes often compare equal to an earlier lane's swap
        vals = (torch.arange(N) % 3).to(dt)
        cmp = ((torch.arange(N) + 1) % 3).to(dt)
        acc = torch.zeros(SLOTS + 1, dtype=dt)  # the kernel points masked-off lanes at the last slot
    return [t.to(device) for t in (acc, vals, cmp)]


def _sequential(op, acc, vals, cmp):
    acc = [x.item() for x in acc[:SLOTS]]
    old = []
    for i in range(N):
        s = i % SLOTS
        old.append(acc[s])
        acc[s] = _COMBINE[op](acc[s], vals[i].item(), cmp[i].item())
    return acc, old


def _as_float64(t):
    return t.to(torch.float64) if t.dtype != torch.uint32 else t.to(torch.int64).to(torch.float64)


@pytest.mark.parametrize("op,dt", CASES, ids=[f"{o}-{str(d)[6:]}" for o, d in CASES])
def test_block_atomics_interpret(interpret, gen, op, dt):
    acc, vals, cmp = _inputs(gen, op, dt)
    old = poisoned((N,), dt)
    ref_acc, ref_old = _sequential(op, acc.clone(), vals, cmp)
    A.atomic_block_kernel[(triton.cdiv(N, BLOCK),)](acc, vals, cmp, old, N, OP=op, SEM="acq_rel", SCOPE="gpu",
                                                     SLOTS=SLOTS, BLOCK=BLOCK)
    assert _as_float64(acc[:SLOTS]).tolist() == [float(x) for x in ref_acc]
    assert _as_float64(old).tolist() == [float(x) for x in ref_old]


@pytest.mark.parametrize("sem", ["acquire", "release", "acq_rel", "relaxed"])
@pytest.mark.parametrize("scope", ["gpu", "cta", "sys"])
def test_scalar_tickets_interpret(interpret, sem, scope):
    counter = torch.zeros(1, dtype=torch.int32)
    tickets = poisoned((9,), torch.int32)
    A.ticket_kernel[(9,)](counter, tickets, SEM=sem, SCOPE=scope)
    assert counter.item() == 9 and tickets.tolist() == list(range(9))  # program order


# -- PTX ------------------------------------------------------------------------------------------

def _compile(op, dt="i32", sem="acq_rel", scope="gpu"):
    sig = {"Acc": f"*{dt}", "Vals": f"*{dt}", "Cmp": f"*{dt}", "Old": f"*{dt}", "n": "i32"}
    return triton.compile(A.atomic_block_kernel, signature=sig,
                          constexprs=dict(OP=op, SEM=sem, SCOPE=scope, SLOTS=SLOTS, BLOCK=BLOCK), num_warps=2, target="sm_90")


@pytest.mark.parametrize("sem", ["acquire", "release", "acq_rel", "relaxed"])
@pytest.mark.parametrize("scope", ["gpu", "cta", "sys"])
def test_sem_and_scope_qualifiers(sem, scope):
    from tests.compiler.test_ptx import ptxas_report
    ptx = _compile("add", sem=sem, scope=scope).asm["ptx"]
    ptxas_report(ptx)
    assert re.search(rf"atom\.global\.{scope}\.{sem}\.add\.u32", ptx)    # Triton's qualifier order


@pytest.mark.parametrize("op,dt,instr", [("add", "fp32", "add.f32"), ("add", "fp16", "add.noftz.f16"), ("add", "i64", "add.u64"),
                                         ("max", "u32", "max.u32"), ("min", "i64", "min.s64"), ("max", "fp32", "max.s32"),
                                         ("xor", "i64", "xor.b64"), ("xchg", "fp32", "exch.b32"), ("cas", "i64", "cas.b64")])
def test_atom_instruction(op, dt, instr):
    from tests.compiler.test_ptx import ptxas_report
    ptx = _compile(op, dt).asm["ptx"]
    ptxas_report(ptx)
    # Triton's qualifier orders (its tests look for them): compare-and-swap puts the ordering first
    prefix = "atom.global.acq_rel.gpu" if op == "cas" else "atom.global.gpu.acq_rel"
    assert f"{prefix}.{instr}" in ptx


@pytest.mark.parametrize("op,dt,sem,scope,message", [
    ("add", "i32", "seq_cst", "gpu", "memory semantic 'seq_cst' is not supported"),
    ("add", "i32", "acq_rel", "block", "memory scope 'block' is not supported"),
    ("and", "fp32", "acq_rel", "gpu", "tl.atomic_and needs an integer pointer"),
    ("max", "fp16", "acq_rel", "gpu", "tl.atomic_max is not supported on fp16"),
])
def test_atomic_errors(op, dt, sem, scope, message):
    with pytest.raises(CompilationError, match=re.escape(message)) as e:
        _compile(op, dt, sem, scope)
    assert re.search(r"kernels[/\\]atomics\.py:\d+:\d+", str(e.value))


# -- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("op,dt", CASES, ids=[f"{o}-{str(d)[6:]}" for o, d in CASES])
def test_block_atomics_gpu(op, dt):
    seed = int(np.random.SeedSequence().entropy % 2 ** 31)
    print(f"seed={seed}")
    g = torch.Generator().manual_seed(seed)
    acc, vals, cmp = _inputs(g, op, dt)
    ref_acc, _ = _sequential(op, acc.clone(), vals, cmp)
    acc_d, vals_d, cmp_d = acc.cuda(), vals.cuda(), cmp.cuda()
    old = poisoned((N,), dt).cuda()
    A.atomic_block_kernel[(triton.cdiv(N, BLOCK),)](acc_d, vals_d, cmp_d, old, N, OP=op, SEM="acq_rel", SCOPE="gpu",
                                                     SLOTS=SLOTS, BLOCK=BLOCK)
    torch.cuda.synchronize()
    old = old.cpu()
    if op not in ("cas", "xchg"):  # lanes run in no fixed order on the GPU: only a commutative end state is fixed
        assert _as_float64(acc_d.cpu()[:SLOTS]).tolist() == [float(x) for x in ref_acc]
    for s in range(SLOTS):  # the old values of one slot chain: each is the slot after another lane's update
        lanes = list(range(s, N, SLOTS))
        olds = {float(_as_float64(old[i:i + 1]).item()) for i in lanes}
        reachable = {float(_as_float64(acc[s:s + 1]).item())}
        reachable |= {float(_COMBINE[op](old[i].item(), vals[i].item(), cmp[i].item())) for i in lanes}
        assert olds <= reachable, (s, olds, reachable)


@pytest.mark.gpu
@pytest.mark.parametrize("sem", ["acquire", "release", "acq_rel", "relaxed"])
@pytest.mark.parametrize("scope", ["gpu", "cta", "sys"])
def test_scalar_tickets_gpu(sem, scope):
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    tickets = torch.full((1000,), -1, dtype=torch.int32, device="cuda")
    A.ticket_kernel[(1000,)](counter, tickets, SEM=sem, SCOPE=scope)
    assert counter.item() == 1000
    assert sorted(tickets.cpu().tolist()) == list(range(1000))
