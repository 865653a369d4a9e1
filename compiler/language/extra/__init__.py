"""`tl.extra`: vendor libraries (`from triton.language.extra import libdevice`)."""
from . import cuda, libdevice  # noqa: F401
