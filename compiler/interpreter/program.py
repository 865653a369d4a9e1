"""The interpreter that runs the programs of a grid one by one: `Program`, an `ir.Function` compiled
into a list of Python closures over a slot array (`env`), executed once per program id.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import fp8, ir
from ..language import dtypes as T
from ..language.dtypes import block_type, pointer_type, scalar_of, shape_of
from .memory import _Memory, _buffer_of, _from_mem, _to_mem
from . import libdevice
from .values import (_CMP, _UNARY_FLOAT, _UNARY_INT, InterpreterError, _float_binary, _fma, _int_binary, _mem_np, _np,
                     _scalar_from_py, _tf32_round, _umulhi, _wrap_int, bf16_round, bitcast_value, cast_value)


class _State:
    """Per-launch state reachable from every closure through env[0]."""
    __slots__ = ("pid", "grid", "mem", "P", "nprog")


class _Return(Exception):
    pass


class _CompiledBlock:
    __slots__ = ("arg_slots", "fns", "term", "term_slots")

    def __init__(self, arg_slots, fns, term, term_slots):
        self.arg_slots, self.fns, self.term, self.term_slots = arg_slots, fns, term, term_slots


def _run_block(blk: _CompiledBlock, env):
    for f in blk.fns:
        f(env)
    return [env[s] for s in blk.term_slots]


class Program:
    """A compiled `ir.Function`: call `.launch(grid, args)`. Runs the programs one by one."""

    BATCH = 0  # 1 in VectorizedProgram: values carry a leading program axis

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.slots: dict[int, int] = {}
        self.nslots = 1  # env[0] is the _State
        self.body = self._block(fn.body)
        self.arg_slots = self.body.arg_slots

    # -- slots ---------------------------------------------------------------------------------
    def _slot(self, v: ir.Value | None):
        if v is None:
            return None
        s = self.slots.get(v.id)
        if s is None:
            s = self.slots[v.id] = self.nslots
            self.nslots += 1
        return s

    def _block(self, block: ir.Block) -> _CompiledBlock:
        arg_slots = [self._slot(a) for a in block.args]
        fns = []
        term, term_slots = None, []
        for op in block.ops:
            if op.name in ir.TERMINATORS:
                term = op.name
                term_slots = [self._slot(v) for v in op.operands]
                if op.name == "return":
                    fns.append(_raise_return)
                break
            f = self._op(op)
            if f is not None:
                fns.append(f)
        return _CompiledBlock(arg_slots, fns, term, term_slots)

    # -- ops -------------------------------------------------------------------------------------
    def _op(self, op: ir.Op):
        name = op.name
        method = getattr(self, "_op_" + name, None)
        if method is None:
            if name in ir.BINARY_OPS:
                method = self._binary
            elif name in ir.UNARY_OPS:
                method = self._unary
            else:
                raise InterpreterError(f"{op.loc}: the interpreter does not know the op {name!r}")
        try:
            f = method(op)
        except InterpreterError:
            raise
        except Exception as e:  # malformed op: say which
            raise InterpreterError(f"{op.loc}: cannot interpret {name}: {e}") from e
        if f is None or not op.results:
            return f
        return self._checked(op, f)

    def _checked(self, op, f):
        """Wrap f so that every result has the shape and numpy dtype its IR type says."""
        checks = []
        for r in op.results:
            checks.append((self._slot(r), shape_of(r.type), _np(scalar_of(r.type)), r.type))
        if len(checks) != 1:
            return f
        s, shape, npdt, ty = checks[0]

        def g(env):
            f(env)
            v = env[s]
            if v.shape != shape or v.dtype != npdt:
                if v.shape != shape:
                    raise InterpreterError(f"{op.loc}: {op.name} produced shape {v.shape}, its IR type says {ty}")
                env[s] = v.astype(npdt)
                if env[s].dtype != npdt:
                    raise InterpreterError(f"{op.loc}: {op.name} produced {v.dtype}, its IR type says {ty}")
        # the check is cheap; keep it on: a mismatch is a compiler bug worth reporting loudly
        return g

    def _rs(self, op):
        return self._slot(op.result)

    def _op_const(self, op):
        ty = op.result.type
        v = _scalar_from_py(op.attrs["value"], scalar_of(ty))
        if isinstance(ty, block_type):
            v = np.full(ty.shape, v, dtype=v.dtype)
            v.flags.writeable = False
        s = self._rs(op)

        def f(env):
            env[s] = v
        return f

    def _op_arange(self, op):
        v = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        v.flags.writeable = False
        s = self._rs(op)

        def f(env):
            env[s] = v
        return f

    def _op_program_id(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].pid[axis]
        return f

    def _op_num_programs(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].grid[axis]
        return f

    def _op_splat(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape, npdt = op.result.type.shape, _np(op.result.dtype)

        def f(env):
            env[s] = np.full(shape, env[x], dtype=npdt)
        return f

    def _op_broadcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape

        def f(env):
            env[s] = np.broadcast_to(env[x], shape)
        return f

    def _op_expand_dims(self, op):
        x, s, axis = self._slot(op.operands[0]), self._rs(op), int(op.attrs["axis"]) + self.BATCH

        def f(env):
            env[s] = np.expand_dims(env[x], axis)
        return f

    def _op_reshape(self, op):
        x, s, shape = self._slot(op.operands[0]), self._rs(op), shape_of(op.result.type)

        def f(env):
            env[s] = np.reshape(env[x], shape)
        return f

    def _op_trans(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        perm = op.attrs.get("perm")
        perm = tuple(perm) if perm is not None else tuple(reversed(range(len(op.operands[0].shape))))
        if self.BATCH:
            perm = (0,) + tuple(p + 1 for p in perm)

        def f(env):
            env[s] = np.transpose(env[x], perm)
        return f

    def _op_join(self, op):
        a, c, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)

        def f(env):
            env[s] = np.stack([env[a], env[c]], axis=-1)
        return f

    def _op_split(self, op):
        x = self._slot(op.operands[0])
        s0, s1 = (self._slot(r) for r in op.results)

        def f(env):
            v = env[x]
            env[s0], env[s1] = v[..., 0][()], v[..., 1][()]
        return f

    def _op_gather(self, op):
        src, index, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        axis = int(op.attrs["axis"]) + self.BATCH
        loc = op.loc

        def f(env):
            v, i = env[src], env[index].astype(np.int64)
            n = v.shape[axis]
            if i.size and (i.min() < 0 or i.max() >= n):
                bad = i[(i < 0) | (i >= n)].ravel()[0]
                raise InterpreterError(f"{loc}: tl.gather index {bad} out of range for a dim of size {n}")
            env[s] = np.take_along_axis(v, i, axis)
        return f

    def _op_flip(self, op):
        x, s, axis = self._slot(op.operands[0]), self._rs(op), int(op.attrs["dim"]) + self.BATCH

        def f(env):
            env[s] = np.flip(env[x], axis)
        return f

    def _op_sort(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        axis, desc = int(op.attrs["dim"]) + self.BATCH, bool(op.attrs["descending"])

        def f(env):
            r = np.sort(env[x], axis=axis)  # NaN last, as the GPU orders it
            env[s] = np.flip(r, axis) if desc else r
        return f

    def _op_histogram(self, op):
        x, m, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        nb = int(op.attrs["num_bins"])

        def f(env):
            v = np.asarray(env[x]).astype(np.int64)
            rows = v.reshape(-1, v.shape[-1])
            keep = (rows >= 0) & (rows < nb)
            if m is not None:
                keep &= np.asarray(env[m]).reshape(rows.shape).astype(bool)
            out = np.zeros((rows.shape[0], nb), dtype=np.int32)
            r, c = np.nonzero(keep)
            np.add.at(out, (r, rows[r, c]), 1)
            env[s] = out.reshape(v.shape[:-1] + (nb,))
        return f

    def _op_cast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        src, dst, rounding = op.operands[0].dtype, op.result.dtype, op.attrs.get("rounding")

        def f(env):
            env[s] = cast_value(env[x], src, dst, rounding)
        return f

    def _op_bitcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        src, dst = op.operands[0].dtype, op.result.dtype

        def f(env):
            env[s] = bitcast_value(env[x], src, dst)
        return f

    def _binary(self, op):
        a, b, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        dt = op.operands[0].dtype
        if dt.is_floating():
            fn = _float_binary(op.name)
        elif isinstance(dt, pointer_type):
            fn = {"add": np.add, "sub": np.subtract}.get(op.name)
        else:
            fn = _int_binary(op.name, dt)
        if fn is None:
            raise InterpreterError(f"{op.loc}: {op.name} is not defined on {dt}")
        if dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(fn(env[a], env[b]))
        else:
            def f(env):
                env[s] = fn(env[a], env[b])
        return f

    def _op_cmp(self, op):
        a, b, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        fn = _CMP[op.attrs["pred"]]

        def f(env):
            env[s] = fn(env[a], env[b])
        return f

    def _unary(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        dt = op.operands[0].dtype
        if dt.is_floating():
            fn = _UNARY_FLOAT.get(op.name)
        else:
            fn = _UNARY_INT.get(op.name)
            if dt.is_bool() and op.name == "neg":
                fn = lambda v: v  # noqa: E731  (-x == x in one bit)
            if dt.is_bool() and op.name == "not":
                fn = np.logical_not
        if fn is None:
            raise InterpreterError(f"{op.loc}: {op.name} is not defined on {dt}")
        if dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(fn(env[x]))
        elif dt is T.float16 and op.name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
                                             "erf", "tanh"):
            def f(env):  # computed in fp32 and rounded once, as the GPU does for fp16 math
                env[s] = fn(np.float32(1) * env[x]).astype(np.float16)
        else:
            def f(env):
                env[s] = fn(env[x])
        return f

    def _op_fma(self, op):
        a, b, c = (self._slot(v) for v in op.operands)
        s, dt = self._rs(op), op.result.dtype
        if dt.is_int():
            def f(env):
                env[s] = env[a] * env[b] + env[c]
        elif dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(_fma(env[a], env[b], env[c], T.float32))
        else:
            def f(env):
                env[s] = _fma(env[a], env[b], env[c], dt)
        return f

    def _op_umulhi(self, op):
        a, b, s, dt = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op), op.result.dtype

        def f(env):
            env[s] = _umulhi(env[a], env[b], dt)
        return f

    def _op_extern_elementwise(self, op):
        slots, s, symbol = [self._slot(v) for v in op.operands], self._rs(op), op.attrs["symbol"]

        def f(env):
            r = libdevice.call(symbol, [env[a] for a in slots])
            env[s] = r if r.shape else r[()]
        return f

    def _op_inline_asm(self, op):
        raise InterpreterError(f"{op.loc}: tl.inline_asm_elementwise cannot run in interpret mode: its PTX runs "
                               "only on an NVIDIA GPU (Triton's interpreter cannot run inline assembly either); "
                               "run the kernel on the GPU, or give interpret mode a tl.* equivalent")

    def _op_select(self, op):
        c, a, b = (self._slot(v) for v in op.operands)
        s = self._rs(op)

        def f(env):
            r = np.where(env[c], env[a], env[b])
            env[s] = r if r.shape else r[()]
        return f

    def _op_addptr(self, op):
        p, o, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        elt = op.operands[0].dtype.element_ty
        size = np.int64(8 if isinstance(elt, pointer_type) else _mem_np(elt).itemsize)

        def f(env):
            env[s] = env[p] + env[o].astype(np.int64) * size
        return f

    def _op_assume(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)

        def f(env):
            env[s] = env[x]
        return f

    def _op_barrier(self, op):
        return None

    # -- memory ----------------------------------------------------------------------------------
    def _op_load(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, m, o = (self._slot(v) for v in ops[:3])
        s = self._rs(op)
        dt = op.result.dtype
        npdt = _np(dt)
        loc = op.loc
        shape = shape_of(op.result.type)

        def f(env):
            mem = env[0].mem
            ptrs = env[p]
            if not shape:  # scalar
                if m is not None and not env[m]:
                    env[s] = env[o] if o is not None else npdt.type(0)
                    return
                env[s] = mem.gather(np.array([ptrs], dtype=np.int64), dt, "load", loc, None, ())[0]
                return
            flat = np.ravel(ptrs)
            if m is None:
                env[s] = mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            mask = np.ravel(env[m])
            if mask.all():
                env[s] = mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            if o is None:
                out = np.zeros(flat.size, dtype=npdt)
            else:
                out = np.array(np.broadcast_to(env[o], shape), dtype=npdt).reshape(-1)
            lanes = np.flatnonzero(mask)
            if lanes.size:
                out[lanes] = mem.gather(flat[lanes], dt, "load", loc, lanes, shape)
            env[s] = out.reshape(shape)
        return f

    def _op_store(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        loc = op.loc
        shape = shape_of(op.operands[0].type)

        def f(env):
            mem = env[0].mem
            ptrs = env[p]
            if not shape:
                if m is not None and not env[m]:
                    return
                mem.scatter(np.array([ptrs], dtype=np.int64), np.array([env[v]]), dt, "store", loc, None, ())
                return
            flat = np.ravel(ptrs)
            vals = np.ravel(np.broadcast_to(env[v], shape))
            if m is None:
                mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            mask = np.ravel(env[m])
            if mask.all():
                mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            lanes = np.flatnonzero(mask)
            if lanes.size:
                mem.scatter(flat[lanes], vals[lanes], dt, "store", loc, lanes, shape)
        return f

    def _atomic(self, op, p, vals_slots, m, combine, what):
        """Shared driver: combine(old, *vals) → new, element by element in lane order."""
        s = self._rs(op)
        dt = op.operands[0].dtype.element_ty
        npdt = _np(dt)
        loc = op.loc
        shape = shape_of(op.result.type)

        def f(env):
            mem = env[0].mem
            ptrs = np.ravel(np.asarray(env[p], dtype=np.int64))
            vals = [np.ravel(np.broadcast_to(env[v], shape)) for v in vals_slots]
            out = np.zeros(ptrs.size, dtype=npdt)
            if m is not None:
                mask = np.ravel(np.broadcast_to(env[m], shape))
                lanes = np.flatnonzero(mask)
            else:
                lanes = np.arange(ptrs.size)
            if lanes.size:
                addrs = ptrs[lanes]
                refs = mem.element_refs(addrs, dt, what, loc, lanes, shape)
                lane_vals = [v[lanes] for v in vals]
                if np.unique(addrs).size == addrs.size:  # no two lanes hit one address: vectorize
                    groups = {}
                    for j, (view, i) in enumerate(refs):
                        groups.setdefault(id(view), (view, [], []))
                        groups[id(view)][1].append(j)
                        groups[id(view)][2].append(i)
                    for view, js, idx in groups.values():
                        js, idx = np.array(js), np.array(idx)
                        old = _from_mem(view[idx], dt)
                        new = combine(old, *[lv[js] for lv in lane_vals])
                        view[idx] = _to_mem(new, dt)
                        out[lanes[js]] = old
                else:
                    for j, (view, i) in enumerate(refs):
                        old = _from_mem(view[i:i + 1].copy(), dt)
                        new = combine(old, *[lv[j:j + 1] for lv in lane_vals])
                        view[i:i + 1] = _to_mem(new, dt)
                        out[lanes[j]] = old[0]
            env[s] = out.reshape(shape) if shape else out[0]
        return f

    def _op_atomic_rmw(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        kind = op.attrs["kind"]
        if dt.is_floating():
            fn = {"add": np.add, "max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b}.get(kind)
        else:
            fn = {"add": np.add, "max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b,
                  "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}.get(kind)
            if dt.is_bool() and kind == "add":
                fn = np.bitwise_xor
        if fn is None:
            raise InterpreterError(f"{op.loc}: atomic {kind} is not defined on {dt}")
        if dt is T.bfloat16:
            base = fn
            fn = lambda a, b: bf16_round(base(a, b))  # noqa: E731
        return self._atomic(op, p, [v], m, fn, f"atomic_{kind}")

    def _op_atomic_cas(self, op):
        ops = list(op.operands) + [None] * (4 - len(op.operands))
        p, c, v, m = (self._slot(x) for x in ops[:4])
        dt = op.operands[0].dtype.element_ty
        if dt.is_floating():  # compare-and-swap compares bits
            def eq(a, b):
                return _to_mem(a, dt).view(_uint_of(dt)) == _to_mem(b, dt).view(_uint_of(dt))
        else:
            eq = np.equal

        def fn(old, cmp, val):
            return np.where(eq(old, cmp), val, old)
        return self._atomic(op, p, [c, v], m, fn, "atomic_cas")

    # -- reductions, scans, dot ---------------------------------------------------------------
    def _op_reduce(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        axis, kind = int(op.attrs["axis"]) + self.BATCH, op.attrs["kind"]
        dt = op.operands[0].dtype
        npdt = _np(dt)
        left = op.attrs.get("tie_break_left", True)
        if kind == "sum":
            if dt is T.bfloat16:
                def fn(v):
                    return bf16_round(np.add.reduce(v, axis=axis, dtype=np.float32))
            else:
                def fn(v):
                    return np.add.reduce(v, axis=axis, dtype=npdt)
        elif kind in ("max", "min"):
            if dt.is_floating():
                red = np.fmax if kind == "max" else np.fmin
            else:
                red = np.maximum if kind == "max" else np.minimum

            def fn(v):
                return red.reduce(v, axis=axis)
        elif kind in ("argmax", "argmin"):
            arg = np.argmax if kind == "argmax" else np.argmin

            def fn(v):
                if left:
                    return arg(v, axis=axis).astype(np.int32)
                n = v.shape[axis]
                return (n - 1 - arg(np.flip(v, axis), axis=axis)).astype(np.int32)
        elif kind == "xor_sum":
            def fn(v):
                return np.bitwise_xor.reduce(v, axis=axis)
        else:
            raise InterpreterError(f"{op.loc}: unknown reduction {kind!r}")

        def f(env):
            r = fn(env[x])
            env[s] = r if np.ndim(r) else r[()]
        return f

    def _op_scan(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        axis, kind, reverse = int(op.attrs["axis"]) + self.BATCH, op.attrs["kind"], bool(op.attrs.get("reverse", False))
        dt = op.operands[0].dtype
        npdt = _np(dt)
        if dt.is_floating():
            acc = {"sum": np.add, "prod": np.multiply, "max": np.fmax, "min": np.fmin}[kind]
        else:
            acc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]

        if dt is T.bfloat16:
            def scan(v):  # round after every step
                v = np.moveaxis(np.array(v, dtype=np.float32), axis, 0)
                for i in range(1, v.shape[0]):
                    v[i] = bf16_round(acc(v[i - 1], v[i]))
                return np.moveaxis(v, 0, axis)
        else:
            def scan(v):
                return acc.accumulate(v, axis=axis, dtype=npdt)

        def f(env):
            v = env[x]
            if reverse:
                env[s] = np.flip(scan(np.flip(v, axis)), axis)
            else:
                env[s] = scan(v)
        return f

    def _op_reduce_combine(self, op):
        """A left fold of the combine region along the axis, over all other elements at once."""
        xs, rs = [self._slot(v) for v in op.operands], [self._slot(r) for r in op.results]
        axis = int(op.attrs["axis"]) + self.BATCH
        comb = _CombineRegion(op.regions[0])

        def f(env):
            cols = [np.moveaxis(env[x], axis, 0) for x in xs]
            acc = [c[0] for c in cols]
            for i in range(1, cols[0].shape[0]):
                acc = comb(acc, [c[i] for c in cols])
            shape = cols[0].shape[1:]
            for sl, v, r in zip(rs, acc, op.results):
                env[sl] = np.array(np.broadcast_to(np.asarray(v, dtype=_np(r.dtype)), shape))[()]
        return f

    def _op_map_elementwise(self, op):
        """tl.map_elementwise: the region on every element at once (per element where it branches);
        with pack > 1 on groups of `pack` consecutive elements of each program's block (the last
        element repeated to fill the last group, its extra results dropped)."""
        xs, rs = [self._slot(v) for v in op.operands], [self._slot(r) for r in op.results]
        pack = int(op.attrs["pack"])
        fn = _CombineRegion(op.regions[0])

        def f(env):
            vals = [np.asarray(env[x]) for x in xs]
            lead = vals[0].shape[:self.BATCH]
            flat = [v.reshape(lead + (-1,)) for v in vals]
            n = flat[0].shape[-1]
            pad = -n % pack
            if pad:
                flat = [np.concatenate([v, np.repeat(v[..., -1:], pad, axis=-1)], axis=-1) for v in flat]
            groups = [v.reshape(lead + (-1, pack)) for v in flat]
            outs = fn.apply([g[..., j] for g in groups for j in range(pack)])
            for k, (sl, r) in enumerate(zip(rs, op.results)):
                y = np.stack([np.broadcast_to(outs[k * pack + j], groups[0].shape[:-1]) for j in range(pack)], axis=-1)
                env[sl] = y.reshape(lead + (-1,))[..., :n].reshape(vals[0].shape).astype(_np(r.dtype), copy=False)
        return f

    def _op_scan_combine(self, op):
        """An inclusive scan with the combine region, element by element along the axis (from the end
        when reversed: combine(later elements, this one))."""
        xs, rs = [self._slot(v) for v in op.operands], [self._slot(r) for r in op.results]
        axis, reverse = int(op.attrs["axis"]) + self.BATCH, bool(op.attrs.get("reverse", False))
        comb = _CombineRegion(op.regions[0])

        def f(env):
            cols = [np.moveaxis(env[x], axis, 0) for x in xs]
            n = cols[0].shape[0]
            outs = [np.empty_like(c) for c in cols]
            order = range(n - 1, -1, -1) if reverse else range(n)
            acc = None
            for i in order:
                cur = [c[i] for c in cols]
                acc = cur if acc is None else comb(acc, cur)
                for o, v in zip(outs, acc):
                    o[i] = v
            for sl, o in zip(rs, outs):
                env[sl] = np.moveaxis(o, 0, axis)
        return f

    def _op_dot(self, op):
        a, b, c = (self._slot(v) for v in op.operands)
        s = self._rs(op)
        adt, rdt = op.operands[0].dtype, op.result.dtype
        prec = op.attrs.get("input_precision", "ieee")
        if adt.is_int():
            def f(env):
                r = np.matmul(env[a].astype(np.int32), env[b].astype(np.int32)) + env[c].astype(np.int32)
                env[s] = r.astype(_np(rdt))
            return f
        if adt is T.float16 and rdt is T.float16 and op.operands[1].dtype is T.float16:
            return self._f16_accumulating_dot(a, b, c, s)
        wide = np.float64 if adt is T.float64 else np.float32
        tf32 = adt is T.float32 and prec == "tf32"
        # fp8 operands (either kind, mixed too) enter as their exact values; products of two fp8
        # values are exact in fp32, as in the tensor cores
        a_of = (lambda v: fp8.to_float32(v, adt)) if fp8.is_fp8(adt) else (lambda v: v.astype(wide))
        bdt = op.operands[1].dtype
        b_of = (lambda v: fp8.to_float32(v, bdt)) if fp8.is_fp8(bdt) else (lambda v: v.astype(wide))

        def f(env):
            av, bv = a_of(env[a]), b_of(env[b])
            if tf32:
                av, bv = _tf32_round(av), _tf32_round(bv)
            r = np.matmul(av, bv) + env[c].astype(wide)
            env[s] = cast_value(r.astype(np.float64 if wide is np.float64 else np.float32),
                                T.float64 if wide is np.float64 else T.float32, rdt)
        return f

    @staticmethod
    def _f16_accumulating_dot(a, b, c, s):
        """fp16 × fp16 → fp16 accumulates in fp16, as the tensor cores do (f16 accumulators: each
        k16 instruction adds its exact products to the accumulator and rounds the sum to fp16):
        the products of every 16 columns of K summed in fp32, then added to the fp16 accumulator
        (starting from `c`) with one rounding."""
        def f(env):
            av, bv = env[a].astype(np.float32), env[b].astype(np.float32)
            acc = env[c].astype(np.float16)
            for k0 in range(0, av.shape[-1], 16):
                part = np.matmul(av[..., k0:k0 + 16], bv[..., k0:k0 + 16, :])
                acc = (acc.astype(np.float32) + part).astype(np.float16)
            env[s] = acc
        return f

    # -- debugging -----------------------------------------------------------------------------
    def _op_print(self, op):
        slots = [self._slot(v) for v in op.operands]
        types = [v.type for v in op.operands]
        prefix = ir.print_text(op.attrs.get("prefix", ""), len(slots))
        hexa = bool(op.attrs.get("hex", False))
        many = len(slots) > 1

        def fmt(v, dt):
            if hexa:
                bits = _to_mem(np.asarray(v).reshape(1), dt).view(_uint_of_np(_mem_np(dt)))[0]
                return f"0x{int(bits):0{_mem_np(dt).itemsize * 2}x}"
            if dt is T.int1:
                return str(int(bool(v)))
            return str(v.item() if hasattr(v, "item") else v)

        def f(env):
            pid = env[0].pid
            head = f"pid ({int(pid[0])}, {int(pid[1])}, {int(pid[2])})"
            lines = []
            for k, (sl, ty) in enumerate(zip(slots, types)):
                v = np.asarray(env[sl])
                dt = scalar_of(ty)
                tag = f"(operand {k}) " if many else ""
                if v.ndim == 0:
                    lines.append(f"{head} idx (){prefix}{tag}{fmt(v[()], dt)}")
                else:
                    for idx in np.ndindex(v.shape):
                        lines.append(f"{head} idx ({', '.join(str(i) for i in idx)}){prefix}{tag}{fmt(v[idx], dt)}")
            if not slots:
                lines.append(f"{head}{prefix}".rstrip())
            sys.stdout.write("\n".join(lines) + "\n")
        return f

    def _op_assert(self, op):
        c = self._slot(op.operands[0])
        msg = str(op.attrs.get("message", ""))
        loc = op.loc
        fname = loc.fn or self.fn.name

        def f(env):
            v = np.asarray(env[c])
            if v.all():
                return
            pid = env[0].pid
            bad = np.unravel_index(int(np.flatnonzero(~v.astype(bool).ravel())[0]), v.shape) if v.ndim else ()
            raise AssertionError(f"{loc}: {fname}: device assertion failed: {msg} "
                                 f"(pid ({int(pid[0])}, {int(pid[1])}, {int(pid[2])}) idx "
                                 f"({', '.join(str(int(i)) for i in bad)}))")
        return f

    # -- control flow --------------------------------------------------------------------------
    def _op_for(self, op):
        lb, ub, step = (self._slot(v) for v in op.operands[:3])
        init = [self._slot(v) for v in op.operands[3:]]
        body = self._block(op.regions[0])
        iv_slot, iter_slots = body.arg_slots[0], body.arg_slots[1:]
        ivtype = _np(op.regions[0].args[0].type).type
        res = [self._slot(r) for r in op.results]
        fns, yslots = body.fns, body.term_slots
        loc = op.loc
        if len(iter_slots) != len(init) or len(yslots) != len(init) or len(res) != len(init):
            raise InterpreterError(f"{loc}: for: {len(init)} init values, {len(iter_slots)} iter args, "
                                   f"{len(yslots)} yielded, {len(res)} results")

        def f(env):
            i, hi, st = int(env[lb]), int(env[ub]), int(env[step])
            if st == 0:
                raise InterpreterError(f"{loc}: loop step is zero")
            vals = [env[x] for x in init]
            while (i < hi) if st > 0 else (i > hi):
                env[iv_slot] = ivtype(i)
                for sl, v in zip(iter_slots, vals):
                    env[sl] = v
                for g in fns:
                    g(env)
                vals = [env[y] for y in yslots]
                i += st
            for sl, v in zip(res, vals):
                env[sl] = v
        return f

    def _op_if(self, op):
        c = self._slot(op.operands[0])
        then = self._block(op.regions[0])
        other = self._block(op.regions[1]) if len(op.regions) > 1 else _CompiledBlock([], [], None, [])
        res = [self._slot(r) for r in op.results]

        def f(env):
            blk = then if env[c] else other
            for g in blk.fns:
                g(env)
            for sl, y in zip(res, blk.term_slots):
                env[sl] = env[y]
        return f

    def _op_while(self, op):
        init = [self._slot(v) for v in op.operands]
        before = self._block(op.regions[0])
        after = self._block(op.regions[1])
        res = [self._slot(r) for r in op.results]

        def f(env):
            vals = [env[x] for x in init]
            while True:
                for sl, v in zip(before.arg_slots, vals):
                    env[sl] = v
                for g in before.fns:
                    g(env)
                cond, *fwd = [env[y] for y in before.term_slots]
                if not cond:
                    break
                for sl, v in zip(after.arg_slots, fwd):
                    env[sl] = v
                for g in after.fns:
                    g(env)
                vals = [env[y] for y in after.term_slots]
            for sl, v in zip(res, fwd):
                env[sl] = v
        return f

    # -- launching -----------------------------------------------------------------------------
    def launch(self, grid, args):
        grid, values, mem = self._prepare(grid, args)
        state = _State()
        state.mem = mem
        state.grid = tuple(np.int32(g) for g in grid)
        env = [None] * self.nslots
        env[0] = state
        for sl, v in zip(self.arg_slots, values):
            env[sl] = v
        fns = self.body.fns
        with np.errstate(all="ignore"):
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        state.pid = (np.int32(x), np.int32(y), np.int32(z))
                        try:
                            for g in fns:
                                g(env)
                        except _Return:
                            pass

    def _prepare(self, grid, args):
        """(grid as 3 ints, per-argument numpy values, the memory table of the buffer arguments)."""
        fn = self.fn
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
        if len(grid) != 3 or any(g < 0 for g in grid):
            raise ValueError(f"grid must have 1 to 3 non-negative sizes, got {grid}")
        args = list(args)
        types = [a.type for a in fn.args]
        attrs = list(fn.arg_attrs or [{}] * len(types))
        if len(args) != len(types):
            # arguments specialized to 1 may be left out by the caller
            skipped = [i for i, a in enumerate(attrs) if a.get("equal_to_1")]
            if len(args) + len(skipped) == len(types):
                it = iter(args)
                args = [1 if i in skipped else next(it) for i in range(len(types))]
            else:
                raise TypeError(f"{fn.name} takes {len(types)} arguments ({', '.join(fn.arg_names)}), "
                                f"got {len(args)}")
        mem = _Memory()
        values = []
        for name, ty, a in zip(fn.arg_names, types, args):
            values.append(self._arg_value(name, ty, a, mem))
        # the buffers stay alive: the caller holds `args` until launch returns
        return grid, values, mem

    @staticmethod
    def _arg_value(name, ty, a, mem):
        if isinstance(ty, block_type):
            raise InterpreterError(f"argument {name!r} has a block type {ty}")
        if isinstance(ty, pointer_type):
            if a is None:
                raise TypeError(f"argument {name!r} is a pointer; got None")
            if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                return np.int64(_wrap_int(int(a), 64, True))
            found = _buffer_of(a, name)
            if found is None:
                raise TypeError(f"argument {name!r} is a pointer; expected a numpy array or a CPU tensor, "
                                f"got {type(a).__name__}")
            buf, ptr = found
            if buf is not None:
                mem.add(*buf, name)
            return np.int64(ptr)
        if hasattr(a, "item") and not isinstance(a, np.ndarray):
            a = a.item()
        elif isinstance(a, np.ndarray) and a.ndim == 0:
            a = a.item()
        if not isinstance(a, (bool, int, float)):
            raise TypeError(f"argument {name!r} has type {ty}; got {type(a).__name__}")
        return _scalar_from_py(a, ty)


class _CombineRegion(Program):
    """The combine region of a custom reduction or scan, compiled on its own: its scalar ops run on
    numpy arrays that hold every element of the other dims at once."""

    def __init__(self, region: ir.Block):
        self.fn = None
        self.slots, self.nslots = {}, 1
        self.block = self._block(region)
        self.types = [a.type for a in region.args]
        self.out_types = [y.type for y in region.terminator.operands]
        # runtime control flow inside the combine function branches per element
        self.per_element = any(op.regions for op in region.walk())

    def _checked(self, op, f):
        return f  # values here are arrays of what the IR types as scalars

    def __call__(self, a: list, b: list) -> list:
        return self.apply(list(a) + list(b))

    def apply(self, args: list) -> list:
        """The region on arrays of its arguments, element by element where it branches."""
        args = [np.asarray(v, dtype=_np(ty)) for v, ty in zip(args, self.types)]
        if not self.per_element:
            return self._run(args)
        shape = np.broadcast_shapes(*(v.shape for v in args))
        args = [np.broadcast_to(v, shape) for v in args]
        outs = [self._run([v[i] for v in args]) for i in np.ndindex(shape)]
        return [np.array([o[k] for o in outs], dtype=_np(ty)).reshape(shape)
                for k, ty in enumerate(self.out_types)]

    def _run(self, args: list) -> list:
        env = [None] * self.nslots
        for sl, v in zip(self.block.arg_slots, args):
            env[sl] = v
        return _run_block(self.block, env)


def _uint_of(dt):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[_mem_np(dt).itemsize]


def _uint_of_np(npdt):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(npdt).itemsize]


def _raise_return(env):
    raise _Return()
