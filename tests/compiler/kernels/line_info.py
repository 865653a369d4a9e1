"""Kernels whose source lines the line-info tests look for in the PTX and the cubin. The tests
find each line by its text (LINE[...]), so editing this file keeps them right."""
import compiler as triton
import compiler.language as tl


@triton.jit
def doubled(x):
    return x + x  # LINE: callee add


@triton.jit
def copy_doubled_kernel(X, Y, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))  # LINE: load
    y = doubled(x)
    tl.store(Y + tl.arange(0, BLOCK), y)  # LINE: store


@triton.jit
def exp_kernel(X, Y, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    tl.store(Y + tl.arange(0, BLOCK), tl.sin(x) + tl.exp(x))  # LINE: libdevice call


@triton.jit
def int8_dot_plus_constant_kernel(Out):
    """Triton's test_line_info[dot_combine]: `+ c` becomes the dot's accumulator, so its line
    leaves the code (the dot's stays)."""
    c = tl.full((32, 32), 4, dtype=tl.int8)
    a = (tl.arange(0, 32)[:, None] + tl.arange(0, 32)[None, :]).to(tl.int8)
    d = tl.dot(a, a)  # LINE: int8 dot
    d = d + c  # LINE: plus constant
    tl.store(Out + tl.arange(0, 32)[:, None] * 32 + tl.arange(0, 32)[None, :], d)


def tagged_line(path: str, tag: str) -> int:
    """The number of the line of `path` that ends with `# LINE: <tag>`."""
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# LINE: {tag}"):
                return i
    raise KeyError(tag)


def line_of(tag: str) -> int:
    return tagged_line(__file__, tag)

