"""numpy models of the tensor-core lowerings, for the tests: what the hardware computes from the
addresses and fragments compiler/backend/mma.py and wgmma.py emit (test_dot_mma.py runs them).

  mma_sim                  mma.sync: swizzled tiles, ldmatrix / scalar fragment loads, the PTX
                           fragment tables, scattered back through the accumulator layout
  read_through_descriptor  wgmma: the operand an instruction reads through a matrix descriptor
"""
from __future__ import annotations

import numpy as np

from compiler.backend.dot_layouts import SmemTile, mma_acc_layout, warps_per_tile
from compiler.backend.layouts import log2
from compiler.backend.mma import SCALAR_A_LANES, SCALAR_B_LANES, ldm_lanes_a, ldm_lanes_b, scalar_a_reg, scalar_b_reg


def mma_sim(A, B, Cin, num_warps: int, kind: str, a_cdim: int, b_cdim: int):
    """Run the lowering's address and fragment arithmetic on numpy arrays: write A [M,K] and
    B [K,N] into swizzled tiles (flat arrays), have every (warp, lane) 'execute' the ldmatrix /
    scalar loads at the addresses lower_dot computes, apply the mma.sync fragment semantics from
    the PTX tables, and scatter the accumulators back through acc_layout. Returns D [M,N] and the
    number of ldmatrix bank-conflict wavefronts beyond the minimum (0 when the swizzle works)."""
    M, K = A.shape
    N = B.shape[1]
    es = {"tf32": 4, "s8": 1}.get(kind, 2)   # s8: m16n8k32, 4 elements a b32 (K-major tiles only)
    kc = 16 // es
    kinstr = 2 * kc
    cl = mma_acc_layout(M, N, num_warps)
    wm, wn = warps_per_tile(M, N, num_warps)
    tm, tn = M // wm, N // wn
    mt_count, nt_count = tm // 16, tn // 8
    pair = nt_count % 2 == 0
    ta, tb = SmemTile((M, K), a_cdim, es), SmemTile((K, N), b_cdim, es)
    sa, sb = np.full(M * K, np.nan), np.full(K * N, np.nan)
    for i in range(M):
        for j in range(K):
            sa[ta.offset((i, j))] = A[i, j]
    for i in range(K):
        for j in range(N):
            sb[tb.offset((i, j))] = B[i, j]
    assert not np.isnan(sa).any() and not np.isnan(sb).any(), "swizzle is not a bijection"
    a_trans, b_trans = a_cdim != 1, b_cdim != 0
    conflicts = 0

    def xor_coord(*cs):
        out = [0, 0]
        for c in cs:
            out[0] ^= c[0]
            out[1] ^= c[1]
        return tuple(out)

    def lane_coord(lanes, L):
        return xor_coord(*[lanes[i] for i in range(5) if L >> i & 1])

    def warp_coord(w, sel):
        return xor_coord(*[sel(cl.warp[i]) for i in range(len(cl.warp)) if w >> i & 1])

    def ldmatrix(smem, tile, addrs, count, trans):
        """addrs[L] = element offset of the row lane L points at; returns regs[L][j] = 2 elements
        (a b16 pair; for 32-bit types 1 element, as a 1-list; for 8-bit types 4)."""
        nonlocal conflicts
        per = 16 // es  # elements per row
        regs = [[None] * count for _ in range(32)]
        for j in range(count):
            rows = [smem[addrs[8 * j + i]: addrs[8 * j + i] + per] for i in range(8)]
            banks = {}
            for i in range(8):
                byte = addrs[8 * j + i] * es
                assert byte % 16 == 0
                banks.setdefault((byte // 16) % 8, set()).add(byte // 128)
            conflicts += max(len(v) for v in banks.values()) - 1
            for L in range(32):
                g, t = L // 4, L % 4
                if es == 1:
                    assert not trans
                    regs[L][j] = list(rows[g][4 * t:4 * t + 4])
                elif es == 2:
                    if not trans:
                        regs[L][j] = [rows[g][2 * t], rows[g][2 * t + 1]]
                    else:
                        regs[L][j] = [rows[2 * t][g], rows[2 * t + 1][g]]
                else:
                    assert not trans
                    regs[L][j] = [rows[g][t]]
        return regs

    D = np.zeros((M, N))
    for w in range(num_warps):
        accw = {}
        for L in range(32):
            for r in range(cl.n_regs):
                accw[(L, r)] = Cin[cl.coord(r, L, w)]
        wa = warp_coord(w, lambda c: (c[0], 0))
        wb = warp_coord(w, lambda c: (0, c[1]))
        for k0 in range(0, K, kinstr):
            afr = {}
            for mi in range(mt_count):
                if kind == "tf32" and a_trans:
                    for L in range(32):
                        afr[(mi, L)] = [[sa[ta.offset(xor_coord(lane_coord(SCALAR_A_LANES, L), wa, (16 * mi, k0), scalar_a_reg(r)))]]
                                        for r in range(4)]
                else:
                    lanes = ldm_lanes_a(a_trans, kc)
                    addrs = [ta.offset(xor_coord(lane_coord(lanes, L), wa, (16 * mi, k0))) for L in range(32)]
                    regs = ldmatrix(sa, ta, addrs, 4, a_trans)
                    for L in range(32):
                        afr[(mi, L)] = regs[L]
            bfr = {}
            step = 2 if pair else 1
            for ni in range(0, nt_count, step):
                if kind == "tf32" and b_trans:
                    for L in range(32):
                        vals = []
                        for t in ((ni, ni + 1) if pair else (ni,)):
                            for r in range(2):
                                vals.append([sb[tb.offset(xor_coord(lane_coord(SCALAR_B_LANES, L), wb, (k0, 8 * t), scalar_b_reg(r)))]])
                        bfr[(ni, L)] = vals[0:2]
                        if pair:
                            bfr[(ni + 1, L)] = vals[2:4]
                else:
                    lanes = ldm_lanes_b(b_trans, kc, pair)
                    addrs = [tb.offset(xor_coord(lane_coord(lanes, L), wb, (k0, 8 * ni))) for L in range(32)]
                    regs = ldmatrix(sb, tb, addrs, 4 if pair else 2, b_trans)
                    for L in range(32):
                        bfr[(ni, L)] = regs[L][0:2]
                        if pair:
                            bfr[(ni + 1, L)] = regs[L][2:4]
            # mma.sync semantics from the fragment tables
            for mi in range(mt_count):
                for ni in range(nt_count):
                    Af = np.zeros((16, kinstr))
                    Bf = np.zeros((kinstr, 8))
                    for L in range(32):
                        g, t = L // 4, L % 4
                        ar, br = afr[(mi, L)], bfr[(ni, L)]
                        if es == 1:   # PTX ISA "Matrix fragments for mma.m16n8k32" (.s8)
                            for q in range(4):
                                Af[g + 8 * (q & 1), 16 * (q >> 1) + 4 * t:16 * (q >> 1) + 4 * t + 4] = ar[q]
                            for q in range(2):
                                Bf[16 * q + 4 * t:16 * q + 4 * t + 4, g] = br[q]
                        elif es == 2:
                            for q in range(4):
                                rr, cc = g + 8 * (q & 1), 8 * (q >> 1) + 2 * t
                                Af[rr, cc], Af[rr, cc + 1] = ar[q]
                            for q in range(2):
                                Bf[8 * q + 2 * t, g], Bf[8 * q + 2 * t + 1, g] = br[q]
                        else:
                            for q in range(4):
                                Af[g + 8 * (q & 1), t + 4 * (q >> 1)] = ar[q][0]
                            for q in range(2):
                                Bf[t + 4 * q, g] = br[q][0]
                    Df = Af @ Bf
                    base = ((mi << log2(nt_count)) | ni) << 2
                    for L in range(32):
                        g, t = L // 4, L % 4
                        for e in range(4):
                            accw[(L, base + e)] += Df[g + 8 * (e >> 1), 2 * t + (e & 1)]
        for L in range(32):
            for r in range(cl.n_regs):
                D[cl.coord(r, L, w)] = accw[(L, r)]
    return D, conflicts


def read_through_descriptor(smem_bytes, desc: int, rows: int, cols: int, es: int, mn_major: bool):
    """The [rows (M or N), 16 (K)] operand an instruction sees, per the canonical layouts: element
    (r, kk) at start + r/8·SBO + (r%8)·swz + kk·es (K-major; the k16 slice stays inside one
    swizzle row) or start + (r / E)·LBO + (kk/8)·SBO + (kk%8)·swz + (r%E)·es (MN-major, E =
    swz/es elements per swizzle row), then the address swizzle bits[4:..] ^= bits[7:..]."""
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    swz = {1: 128, 2: 64, 3: 32}[(desc >> 62) & 3]
    e = swz // es
    out = np.zeros((rows, cols))
    for r in range(rows):
        for kk in range(cols):
            if not mn_major:
                addr = start + (r // 8) * sbo + (r % 8) * swz + kk * es
            else:
                addr = start + (r // e) * lbo + (kk // 8) * sbo + (kk % 8) * swz + (r % e) * es
            bits = {128: 7, 64: 3, 32: 1}[swz]
            addr ^= ((addr >> 7) & bits) << 4
            out[r, kk] = smem_bytes[addr // es]
    return out
