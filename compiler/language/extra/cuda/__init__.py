"""`tl.extra.cuda`: NVIDIA's libdevice (`triton.language.extra.cuda.libdevice`) and Triton's reads of
special registers: `smid()` (the SM the program runs on) and `globaltimer()` (nanoseconds)."""
from ...core import builtin
from . import libdevice  # noqa: F401


@builtin
def smid(): ...


@builtin
def globaltimer(): ...
