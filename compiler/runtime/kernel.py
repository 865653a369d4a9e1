"""`CompiledKernel`: one compiled specialization — its PTX (and cubin), metadata, and the checked launch.

    ck.asm["ptx"]; ck.metadata["shared"]; ck.launch((nblocks, 1, 1), [x, n])

Picklable: the loaded CUDA module is not part of the state. The @jit runner launches through
`make_launcher` directly; `launch` is the checked path (the tuner's GPU child, users of
`compiler.compile`).
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from .. import knobs, ptxas
from . import cache, driver, pointer_maps
from ..language.descriptor_type import GLOBAL_SCRATCH
from .descriptors import with_global_scratch
from .launcher import make_launcher

_load_lock = threading.Lock()

# Triton's stages that have no counterpart here, and why
_NOT_HERE = {"ttir": "Triton's MLIR", "ttgir": "Triton's MLIR", "source": "Triton's MLIR",
             "amdgcn": "AMD GPUs", "hsaco": "AMD GPUs"}


class KernelAsm(dict):
    """`ck.asm`: the kernel's stages by name: "ir" (blocktune's block IR), "llir", "ptx", "cubin".
    The cubin, when there is none yet, is assembled with ptxas when first asked for
    (`asm["cubin"]`: Triton's compiled kernels always carry one); `.get("cubin")` and `in` only say
    whether it is there. A stage blocktune does not have is a KeyError that says so."""

    def __init__(self, stages: dict, target: str | None):
        super().__init__(stages)
        self.target = target

    def __missing__(self, key):
        if key == "cubin" and "ptx" in self and self.target:
            cubin = self["cubin"] = ptxas.assemble(self["ptx"], self.target, exe=_ptxas_for_this_machine())
            return cubin
        stages = ", ".join(sorted({*self, "cubin"}))
        if key in _NOT_HERE:
            raise KeyError(f"{key!r}: blocktune has no {key} stage (it compiles Python to its block IR, then LLVM IR "
                           f"and PTX, without {_NOT_HERE[key]}); this kernel's stages: {stages}")
        raise KeyError(f"{key!r}: no such stage; this kernel's stages: {stages}")


def _ptxas_for_this_machine() -> str:
    """The ptxas whose cubins this machine's driver loads when there is a GPU, else the first one."""
    if driver.has_gpu():
        exe = ptxas.for_driver(driver.device_properties(driver.current_device()).get("cuda_version"))
        if exe:
            return exe
    return ptxas.require()


class CompiledKernel:
    """One compiled specialization. Picklable (the loaded CUDA module is not part of the state).

    `.asm`: {"ir", "llir", "ptx", "cubin"} (KernelAsm: the cubin is assembled when first asked for);
    `.metadata`: name, num_warps, num_stages, shared, target, arg_names, arg_types, passed
    (the parameters the kernel takes at launch, in order), constexprs, divisible_by_16,
    equal_to_1, cache_key, and what the backend reported.
    """

    def __init__(self, name: str, asm: dict, metadata: dict):
        self.name = name
        self.asm = KernelAsm(asm, metadata.get("target"))
        self.metadata = KernelMetadata(metadata)
        self._loaded: dict[int, Any] = {}
        self._launchers: dict[tuple, Any] = {}
        self._plans: dict[int, tuple] = {}

    # Triton-compatible conveniences
    @property
    def hash(self) -> str:
        """The compile cache key (Triton's kernel hash): one specialization, one hash."""
        return self.metadata.get("cache_key", "")

    @property
    def num_warps(self) -> int:
        return self.metadata["num_warps"]

    @property
    def num_stages(self) -> int:
        return self.metadata["num_stages"]

    @property
    def shared(self) -> int:
        return self.metadata.get("shared", 0)

    @property
    def n_regs(self) -> int | None:
        lf = next(iter(self._loaded.values()), None)
        return lf.num_regs if lf is not None else None

    def _init_handles(self) -> None:
        """Triton's: load the kernel into the current device, so `n_regs` is known."""
        self.load()

    def __getstate__(self):
        return {"name": self.name, "asm": dict(self.asm), "metadata": dict(self.metadata)}

    def __setstate__(self, state):
        self.name, self.metadata = state["name"], KernelMetadata(state["metadata"])
        self.asm = KernelAsm(state["asm"], self.metadata.get("target"))
        self._loaded, self._launchers, self._plans = {}, {}, {}

    def __repr__(self) -> str:
        m = self.metadata
        return (f"<CompiledKernel {self.name} {m.get('target')} num_warps={m.get('num_warps')} "
                f"num_stages={m.get('num_stages')} shared={m.get('shared')}>")

    # -- loading --------------------------------------------------------------------------------
    def _image(self):
        """What to hand to the driver: a cubin when one is there (or BLOCKTUNE_PTXAS_AOT=1 and a
        ptxas whose cubins this driver loads exists — then it is made once and kept in the disk
        cache), else the PTX."""
        cubin = self.asm.get("cubin")
        if cubin:
            return cubin
        if knobs.runtime.ptxas_aot:
            exe = ptxas.for_driver(driver.device_properties(driver.current_device()).get("cuda_version"))
            if exe:
                cubin = ptxas.assemble(self.asm["ptx"], self.metadata["target"], exe=exe)
                self.asm["cubin"] = cubin
                key = self.metadata.get("cache_key")
                if key:
                    cache.store_cubin(key, cubin)
                return cubin
        return self.asm["ptx"]

    def load(self, device: int | None = None):
        """Load into `device`'s context (the current one by default); cached per device."""
        dev = driver.current_device() if device is None else int(device)
        lf = self._loaded.get(dev)
        if lf is None:
            with _load_lock:
                lf = self._loaded.get(dev)
                if lf is None:
                    lf = driver.load_module(self._image(), self.name, self.metadata.get("shared", 0), dev)
                    self._loaded[dev] = lf
        return lf

    def make_launcher(self, device: int, call_names: list[str]):
        """A fast `launch(g0, g1, g2, stream, *values)` taking values for `call_names` (cached)."""
        key = (device, tuple(call_names))
        fn = self._launchers.get(key)
        if fn is None:
            lf = self.load(device)
            m = self.metadata
            passed = {n: m["arg_types"][m["arg_names"].index(n)] for n in m["passed"]}
            fn = make_launcher(lf, list(call_names), passed, m.get("launch_warps", m["num_warps"]), m.get("shared", 0), self.name)
            self._launchers[key] = fn
        return fn

    # -- the public, checked launch -------------------------------------------------------------
    def launch(self, grid, args, stream: int = 0) -> None:
        """Launch on the GPU. `args`: values for every signature parameter (in signature order), or
        for the passed ones only (equal-to-1 integers left out). Tensors (torch CUDA or
        `__cuda_array_interface__`) or raw device addresses for pointers. Raises ValueError when an
        argument breaks the divisibility / equal-to-1 assumptions this kernel was compiled with."""
        plan = self._plans.get(len(args))
        if plan is None:
            plan = self._plan(len(args))
        convs, div_pos, eq1_pos, passed_pos, passed_names = plan
        values = [conv(v) for conv, v in zip(convs, args)]
        for i, n in div_pos:
            if values[i] % 16:
                raise ValueError(f"{self.name}: argument '{n}' = {values[i]:#x} is not divisible by 16, but the "
                                 "kernel was compiled assuming it is")
        for i, n in eq1_pos:
            if values[i] != 1:
                raise ValueError(f"{self.name}: argument '{n}' = {values[i]} but the kernel was compiled for the "
                                 "value 1")
        if type(grid) is not tuple:
            grid = tuple(grid) if isinstance(grid, list) else (grid,)
        n = len(grid)
        if not 1 <= n <= 3:
            raise ValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
        g0 = int(grid[0])
        g1 = int(grid[1]) if n > 1 else 1
        g2 = int(grid[2]) if n > 2 else 1
        if g0 <= 0 or g1 <= 0 or g2 <= 0:
            return
        dev = _current_device()
        fn = self._launchers.get((dev, self._passed_key))
        if fn is None:
            fn = self.make_launcher(dev, self._launch_order())
        scratch = self.metadata.get("global_scratch_size")
        args = [values[i] for i in passed_pos]
        if self.metadata.get("pointer_maps"):   # tensor maps of pointer tiles, from the arguments
            named = dict(zip(passed_names, args))
            args += [pointer_maps.address(s, named) for s in self.metadata["pointer_maps"]]
        if scratch:   # the launcher takes the scratch last; allocated per launch
            with_global_scratch(fn, scratch * self.metadata.get("num_ctas", 1))(g0, g1, g2, stream or 0, *args)
            return
        fn(g0, g1, g2, stream or 0, *args)

    def _plan(self, nargs: int):
        m = self.metadata
        # the global scratch of device-side descriptors is not an argument: the launch allocates it
        names = [n for n in m["arg_names"] if n != GLOBAL_SCRATCH]
        hidden = {GLOBAL_SCRATCH, *pointer_maps.names(m)}   # made by the launch, not arguments
        passed = [n for n in m["passed"] if n not in hidden]
        names = [n for n in names if n not in hidden]
        parameters = m.get("parameters") or names
        if nargs == len(names):
            order = list(names)
        elif nargs == len(passed):
            order = list(passed)
        elif nargs == len(parameters) and set(names) <= set(parameters):
            # Triton's `compiled[grid](*every parameter)`: the constexprs' values are compiled in
            order = [n if n in names else None for n in parameters]
        else:
            raise ValueError(f"{self.name}: expected {len(names)} arguments ({', '.join(names)}) "
                             f"or {len(passed)} ({', '.join(passed)}), got {nargs}")
        convs = [_ignored if n is None else functools.partial(_launch_value, name=n, ty=m["arg_types"][names.index(n)])
                 for n in order]
        div_pos = [(order.index(n), n) for n in m.get("divisible_by_16", ()) if n in order]
        eq1_pos = [(order.index(n), n) for n in m.get("equal_to_1", ()) if n in order]
        passed_pos = [order.index(n) for n in passed]
        plan = (convs, div_pos, eq1_pos, passed_pos, passed)
        self._plans[nargs] = plan
        return plan

    def _launch_order(self) -> list[str]:
        """The launcher's parameters: the arguments, then pointer tiles' tensor maps, then the scratch."""
        passed = self.metadata["passed"]
        maps = pointer_maps.names(self.metadata)
        if not maps:
            return passed
        rest = [n for n in passed if n != GLOBAL_SCRATCH and n not in maps]
        return rest + maps + [n for n in passed if n == GLOBAL_SCRATCH]

    @property
    def _passed_key(self):
        return tuple(self.metadata["passed"])

    def __getitem__(self, grid):
        """Triton-style `compiled[grid](*args)`, on torch's current stream unless `stream=` says."""
        return lambda *args, stream=None: self.launch(grid, args, _current_stream() if stream is None else stream)


class KernelMetadata(dict):
    """The metadata dict, whose keys also read as attributes (Triton's `kernel.metadata.shared`)."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"kernel metadata has no {name!r}") from None


def _ignored(v):
    return v


def _current_device() -> int:
    return driver.current_device()


def _current_stream() -> int:
    """The stream torch launches on now (a tutorial may have set its own), or the default stream
    when torch is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return 0
    return torch.cuda.current_stream().cuda_stream


def _launch_value(v, name: str, ty: str):
    if type(v) is int:
        return v
    if ty.startswith("*"):
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        dp = getattr(v, "data_ptr", None)
        if dp is not None:
            if getattr(v, "is_cuda", True) is False and not getattr(v, "is_pinned", lambda: False)():
                raise ValueError(f"argument '{name}' is a CPU tensor; the GPU needs a CUDA tensor or pinned host memory")
            return int(dp())
        cai = getattr(v, "__cuda_array_interface__", None)
        if cai is not None:
            return int(cai["data"][0])
        raise TypeError(f"argument '{name}' ({ty}): expected a CUDA tensor or a device address, got {type(v).__name__}")
    if ty.startswith("fp") or ty.startswith("bf") or ty.startswith("f"):
        return float(v)
    if hasattr(v, "item") and not isinstance(v, int):
        v = v.item()
    return int(v)
