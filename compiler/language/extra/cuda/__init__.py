"""`tl.extra.cuda`: NVIDIA's libdevice (`triton.language.extra.cuda.libdevice`) and Triton's reads of
special registers: `smid()` (the SM the program runs on) and `globaltimer()` (nanoseconds), and
the launch's `num_warps()` / `num_threads()` (compile-time values)."""
from ...core import builtin
from . import libdevice  # noqa: F401


@builtin
def smid(): ...


@builtin
def globaltimer(): ...


@builtin
def num_warps(): ...


@builtin
def num_threads(): ...
