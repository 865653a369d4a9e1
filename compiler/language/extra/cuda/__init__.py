"""`tl.extra.cuda`: NVIDIA's libdevice (`triton.language.extra.cuda.libdevice`)."""
from . import libdevice  # noqa: F401
