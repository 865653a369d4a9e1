"""Kernels for the atomics tests: every tl.atomic_* on blocks (with masks, sem and scope) and on
scalars, returning the old values."""
import compiler as triton
import compiler.language as tl


@triton.jit
def atomic_block_kernel(Acc, Vals, Cmp, Old, n, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr,
                        SLOTS: tl.constexpr, BLOCK: tl.constexpr):
    """old[i] = atomic_OP(Acc + i % SLOTS, Vals[i]) for i < n (several lanes share a slot)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(Vals + offs, mask=mask)
    p = Acc + offs % SLOTS
    if OP == "add":
        old = tl.atomic_add(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "max":
        old = tl.atomic_max(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "min":
        old = tl.atomic_min(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "and":
        old = tl.atomic_and(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "or":
        old = tl.atomic_or(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "xor":
        old = tl.atomic_xor(p, v, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        old = tl.atomic_xchg(p, v, mask=mask, sem=SEM, scope=SCOPE)
    else:  # cas: lanes whose Cmp matches the slot's current value swap in Vals
        c = tl.load(Cmp + offs, mask=mask)
        old = tl.atomic_cas(tl.where(mask, p, Acc + SLOTS), c, v, sem=SEM, scope=SCOPE)
    tl.store(Old + offs, old, mask=mask)


@triton.jit
def ticket_kernel(Counter, Tickets, SEM: tl.constexpr, SCOPE: tl.constexpr):
    """Each program takes a ticket with a scalar atomic_add; the tickets are a permutation."""
    t = tl.atomic_add(Counter, 1, sem=SEM, scope=SCOPE)
    tl.debug_barrier()
    tl.store(Tickets + tl.program_id(0), t)
