"""tl functions of Triton's `triton.language.standard` written in kernel Python (inlined where
they are called, like random.py)."""
from . import core as tl
from .library import library


@library
def swizzle2d(i, j, size_i, size_j, size_g):
    """The (row, column) that element (i, j) of a row-major size_i × size_j matrix moves to when
    each group of size_g rows is walked column-major instead (the last group may be shorter):
    the launch order of tiles that keeps a group of rows of A in the L2 cache."""
    linear = i * size_j + j
    per_group = size_g * size_j
    first_row = (linear // per_group) * size_g
    rows = tl.minimum(size_i - first_row, size_g)
    within = linear % per_group
    return first_row + within % rows, within // rows
