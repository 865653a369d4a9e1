"""torch references for the shape-op kernels (kernels/shape_ops.py), shared by the interpret-mode
tests and the GPU tests."""
from __future__ import annotations

import torch


def scan_ref(x, axis, op, reverse):
    """What scan_kernel computes for OP 0 (add), 1 (cumprod), 2 (max), 3 (cumsum), in float64."""
    xd = x.double().flip(axis) if reverse else x.double()
    r = xd.cumsum(axis) if op in (0, 3) else xd.cumprod(axis) if op == 1 else xd.cummax(axis).values
    return r.flip(axis) if reverse else r


def linear_recurrence_ref(a, b, reverse, axis=0):
    """h[i] = a[i] * h[i-1] + b[i] along `axis` (from the end when reversed), in float64 on the CPU."""
    ad, bd = (t.double().cpu().movedim(axis, 0) for t in (a, b))
    ref, acc = torch.empty_like(ad), torch.zeros_like(ad[0])
    for i in (range(ad.shape[0] - 1, -1, -1) if reverse else range(ad.shape[0])):
        acc = ad[i] * acc + bd[i]
        ref[i] = acc
    return ref.movedim(0, axis)


def check_join_split_interleave(x, y, joined, a, b, inter):
    m, n = x.shape
    assert torch.equal(joined, torch.stack([x, y], -1))
    assert torch.equal(a, x) and torch.equal(b, y)
    assert torch.equal(inter, torch.stack([x, y], -1).reshape(m, 2 * n))


def check_cat(x, y, z, total):
    """tl.cat may reorder: z holds exactly the elements of x and y (as a multiset)."""
    both = torch.cat([x, y])
    assert torch.equal(torch.sort(z.cpu().double()).values, torch.sort(both.cpu().double()).values)
    assert total.item() == both.double().sum().item()


def check_flip_sort(x, flipped, srt, dim, descending):
    assert torch.equal(flipped, x.flip(dim))
    assert torch.equal(srt, torch.sort(x, dim, descending=descending).values)
