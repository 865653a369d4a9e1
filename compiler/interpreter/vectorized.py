"""The interpreter that runs all programs of a chunk of the grid at once (`VectorizedProgram`), for
straight-line kernels: every value carries a leading program axis.
"""
from __future__ import annotations

import numpy as np

from .. import ir
from ..language.dtypes import block_type, scalar_of, shape_of
from .program import Program, _Return, _State
from .values import InterpreterError, _np, _scalar_from_py


class VectorizedProgram(Program):
    """All programs of a chunk of the grid at once: every value carries a leading program axis.

    Used for straight-line kernels (no control flow regions, atomics, print or assert). Programs
    of a grid run concurrently on the GPU with no ordering between them, so running each op for
    all programs before the next op is one legal schedule; every program still sees its own
    ops in order. Chunks keep each value at about `CHUNK_ELEMENTS` elements.
    """

    BATCH = 1
    CHUNK_ELEMENTS = 1 << 18

    @staticmethod
    def eligible(fn: ir.Function) -> bool:
        for op in fn.walk():
            if op.regions or op.name in ("atomic_rmw", "atomic_cas", "print", "assert", "for", "if", "while"):
                return False
        return True

    def __init__(self, fn):
        super().__init__(fn)
        sizes = [1]
        for op in fn.walk():
            for v in list(op.results) + [o for o in op.operands if o is not None]:
                if isinstance(v.type, block_type):
                    sizes.append(v.type.numel)
        self.max_numel = max(sizes)

    def _checked(self, op, f):
        if len(op.results) != 1:
            return f
        r = op.results[0]
        s, shape, npdt, ty = self._slot(r), shape_of(r.type), _np(scalar_of(r.type)), r.type

        def g(env):
            f(env)
            v = env[s]
            if v.shape[1:] != shape or v.shape[0] != env[0].P or v.dtype != npdt:
                if v.shape[1:] != shape or v.shape[0] != env[0].P:
                    raise InterpreterError(f"{op.loc}: {op.name} produced shape {v.shape[1:]} for "
                                           f"{v.shape[0]} programs, its IR type says {ty}")
                env[s] = v.astype(npdt)
        return g

    def _op_const(self, op):
        ty = op.result.type
        v = _scalar_from_py(op.attrs["value"], scalar_of(ty))
        shape = shape_of(ty)
        base = np.full(shape, v, dtype=v.dtype)
        s = self._rs(op)

        def f(env):
            env[s] = np.broadcast_to(base, (env[0].P,) + shape)
        return f

    def _op_arange(self, op):
        v = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        s = self._rs(op)

        def f(env):
            env[s] = np.broadcast_to(v, (env[0].P,) + v.shape)
        return f

    def _op_num_programs(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].nprog[axis]
        return f

    def _op_splat(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape
        ones = (1,) * len(shape)

        def f(env):
            v = env[x]
            env[s] = np.broadcast_to(v.reshape(v.shape + ones), v.shape + shape)
        return f

    def _op_broadcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape

        def f(env):
            env[s] = np.broadcast_to(env[x], (env[0].P,) + shape)
        return f

    def _op_reshape(self, op):
        x, s, shape = self._slot(op.operands[0]), self._rs(op), shape_of(op.result.type)

        def f(env):
            env[s] = np.reshape(env[x], (env[0].P,) + shape)
        return f

    def _op_load(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, m, o = (self._slot(v) for v in ops[:3])
        s = self._rs(op)
        dt = op.result.dtype
        npdt = _np(dt)
        loc = op.loc
        sshape = shape_of(op.result.type)

        def f(env):
            st = env[0]
            shape = (st.P,) + sshape
            flat = np.ravel(env[p])
            mask = None if m is None else np.ravel(env[m])
            if mask is None or mask.all():
                env[s] = st.mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            if o is None:
                out = np.zeros(flat.size, dtype=npdt)
            else:
                out = np.array(np.broadcast_to(env[o], shape), dtype=npdt).reshape(-1)
            lanes = np.flatnonzero(mask)
            if lanes.size:
                out[lanes] = st.mem.gather(flat[lanes], dt, "load", loc, lanes, shape)
            env[s] = out.reshape(shape)
        return f

    def _op_store(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        loc = op.loc
        sshape = shape_of(op.operands[0].type)

        def f(env):
            st = env[0]
            shape = (st.P,) + sshape
            flat = np.ravel(env[p])
            vals = np.ravel(np.broadcast_to(env[v], shape))
            mask = None if m is None else np.ravel(env[m])
            if mask is None or mask.all():
                st.mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            lanes = np.flatnonzero(mask)
            if lanes.size:
                st.mem.scatter(flat[lanes], vals[lanes], dt, "store", loc, lanes, shape)
        return f

    def launch(self, grid, args):
        grid, values, mem = self._prepare(grid, args)
        total = grid[0] * grid[1] * grid[2]
        if total == 0:
            return
        chunk = max(1, min(total, self.CHUNK_ELEMENTS // self.max_numel))
        state = _State()
        state.mem = mem
        state.grid = tuple(np.int32(g) for g in grid)
        env = [None] * self.nslots
        env[0] = state
        fns = self.body.fns
        with np.errstate(all="ignore"):
            for start in range(0, total, chunk):
                q = np.arange(start, min(total, start + chunk), dtype=np.int64)
                P = q.size
                state.P = P
                state.pid = ((q % grid[0]).astype(np.int32), ((q // grid[0]) % grid[1]).astype(np.int32),
                             (q // (grid[0] * grid[1])).astype(np.int32))
                state.nprog = tuple(np.full(P, g, dtype=np.int32) for g in grid)
                mem.vec_pids = state.pid
                for sl, v in zip(self.arg_slots, values):
                    env[sl] = np.full(P, v, dtype=v.dtype)
                try:
                    for g in fns:
                        g(env)
                except _Return:
                    pass
