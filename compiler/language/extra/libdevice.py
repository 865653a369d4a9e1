"""`triton.language.extra.libdevice`: the libdevice of the target; blocktune targets NVIDIA only."""
from .cuda.libdevice import *  # noqa: F401,F403
from .cuda.libdevice import SIGNATURES  # noqa: F401
