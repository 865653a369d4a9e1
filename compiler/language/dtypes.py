"""Element types, pointer types and block types — shared by the `tl` surface and the block IR.

Names follow Triton (`tl.float32.name == "fp32"`, `tl.uint8.name == "uint8"`, `ptr.dtype.element_ty`),
so kernels and tests that inspect types keep working (Triton's tests look numpy types up by
`dtype.name`), and the IR prints them the way Triton users read them. Signatures and cache keys
spell the integer types short (`"*u8"`, `"i32"`) as Triton's signatures do: `dtype.sig_name`.
"""
from __future__ import annotations

import numpy as np


# The integer types' names are spelled in full ("int8", "uint32", "int1"), their signature names
# short ("i8", "u32", "i1"). `tl.dtype("i8")` is `tl.int8` either way.
_SIG_INT_NAMES = {"int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                  "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_FULL_INT_NAMES = {short: full for full, short in _SIG_INT_NAMES.items()}


class dtype:
    """A scalar element type. Instances are interned: compare with `==` or `is`."""

    SINT, UINT, FLOAT, BOOL = "int", "uint", "fp", "bool"
    # Triton's lists of type names, by kind (tests build every type with `map(tl.dtype, ...)`)
    SINT_TYPES = ["int8", "int16", "int32", "int64"]
    UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
    FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
    STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
    OTHER_TYPES = ["void"]
    _registry: dict[str, "dtype"] = {}

    def __new__(cls, name: str, kind: str | None = None, bits: int | None = None):
        name = _FULL_INT_NAMES.get(name, name)
        if name in cls._registry:
            return cls._registry[name]
        if kind is None:
            raise ValueError(f"unknown dtype {name!r}")
        self = super().__new__(cls)
        self.name, self.kind, self.primitive_bitwidth = name, kind, bits
        cls._registry[name] = self
        return self

    def __getnewargs__(self):  # pickling keeps the interning
        return (self.name,)

    # Triton's predicates --------------------------------------------------------------------
    def is_floating(self) -> bool: return self.kind == self.FLOAT
    def is_int(self) -> bool: return self.kind in (self.SINT, self.UINT, self.BOOL)
    def is_int_signed(self) -> bool: return self.kind == self.SINT
    def is_int_unsigned(self) -> bool: return self.kind in (self.UINT, self.BOOL)
    def is_bool(self) -> bool: return self.kind == self.BOOL
    def is_int1(self) -> bool: return self.kind == self.BOOL
    def is_fp16(self) -> bool: return self.name == "fp16"
    def is_bf16(self) -> bool: return self.name == "bf16"
    def is_fp32(self) -> bool: return self.name == "fp32"
    def is_fp64(self) -> bool: return self.name == "fp64"
    def is_fp8(self) -> bool: return self.name in _FP8_NAMES
    def is_fp8e4nv(self) -> bool: return self.name == "fp8e4nv"
    def is_fp8e4b8(self) -> bool: return self.name == "fp8e4b8"
    def is_fp8e4b15(self) -> bool: return self.name == "fp8e4b15"
    def is_fp8e5(self) -> bool: return self.name == "fp8e5"
    def is_fp8e5b16(self) -> bool: return self.name == "fp8e5b16"
    def is_standard_floating(self) -> bool: return self.name in self.STANDARD_FP_TYPES
    def is_ptr(self) -> bool: return False
    def is_block(self) -> bool: return False
    def is_void(self) -> bool: return self.name == "void"

    @property
    def sig_name(self) -> str:
        """The name in signature strings and cache keys: "i32", "u8", "fp16" (`name` is "int32")."""
        return _SIG_INT_NAMES.get(self.name, self.name)
    @property
    def int_bitwidth(self) -> int: return self.primitive_bitwidth
    @property
    def fp_mantissa_width(self) -> int: return self._fp_format()[0]
    @property
    def exponent_bias(self) -> int: return self._fp_format()[1]

    def _fp_format(self) -> tuple[int, int]:
        if self.name not in _FP_FORMATS:  # as in Triton, only floating-point types have these
            raise AttributeError(f"{self.name} is not a floating-point type: it has no mantissa width or exponent bias")
        return _FP_FORMATS[self.name]
    @property
    def int_signedness(self) -> str: return "signed" if self.kind == self.SINT else "unsigned"
    @property
    def scalar(self) -> "dtype": return self
    @property
    def element_ty(self) -> "dtype": return self  # so `x.dtype.element_ty` works on scalars too
    @property
    def itemsize(self) -> int: return max(1, self.primitive_bitwidth // 8)

    def to_ir(self): return self
    def __repr__(self) -> str: return f"triton.language.{_PY_NAMES.get(self.name, self.name)}"
    def __str__(self) -> str: return self.name
    def __hash__(self) -> int: return hash(self.name)
    def __eq__(self, other) -> bool: return isinstance(other, dtype) and self.name == other.name and type(self) is type(other)
    def __ne__(self, other) -> bool: return not self.__eq__(other)

    @property
    def np(self):
        """The numpy dtype that holds values of this type (bf16 is held in float32)."""
        return _NP[self.name]


class pointer_type(dtype):
    """A pointer to `element_ty` in global memory (address space 1)."""

    def __new__(cls, element_ty: dtype, address_space: int = 1, const: bool = False):
        # a pointer to constant data (a `tl.const` parameter) is its own type, as in Triton: it
        # cannot be stored through, and it does not mix with a plain pointer in an if or a return
        key = ("const_" if const else "") + f"ptr<{element_ty.sig_name}>" + \
            (f"@{address_space}" if address_space != 1 else "")
        if key in dtype._registry:
            return dtype._registry[key]
        self = object.__new__(cls)
        self.name, self.kind, self.primitive_bitwidth = key, "ptr", 64
        self._element_ty, self.address_space, self.const = element_ty, address_space, bool(const)
        dtype._registry[key] = self
        return self

    def __getnewargs__(self):
        return (self._element_ty, self.address_space, self.const)

    @property
    def element_ty(self) -> dtype: return self._element_ty
    def is_ptr(self) -> bool: return True
    def is_const(self) -> bool: return self.const
    def is_floating(self) -> bool: return False
    def is_int(self) -> bool: return False
    def __repr__(self) -> str: return f"{'const_' if self.const else ''}pointer<{self._element_ty.sig_name}>"
    def __str__(self) -> str: return to_signature(self)
    __hash__ = dtype.__hash__

    @property
    def np(self):
        return np.dtype(np.int64)


class block_type:
    """The type of a block value: a shape (powers of two) of scalars of one dtype."""

    __slots__ = ("element_ty", "shape")

    def __init__(self, element_ty: dtype, shape):
        self.element_ty, self.shape = element_ty, tuple(int(s) for s in shape)

    @property
    def scalar(self) -> dtype: return self.element_ty
    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n
    def is_block(self) -> bool: return True
    def is_ptr(self) -> bool: return False
    def is_floating(self) -> bool: return self.element_ty.is_floating()
    def is_int(self) -> bool: return self.element_ty.is_int()
    def __eq__(self, other) -> bool:
        return isinstance(other, block_type) and self.shape == other.shape and self.element_ty == other.element_ty
    def __hash__(self) -> int: return hash((self.element_ty, self.shape))
    def __repr__(self) -> str: return f"<{'x'.join(map(str, self.shape))}x{to_signature(self.element_ty)}>"
    __str__ = __repr__


def scalar_of(ty) -> dtype:
    return ty.element_ty if isinstance(ty, block_type) else ty


def shape_of(ty) -> tuple:
    return ty.shape if isinstance(ty, block_type) else ()


void = dtype("void", "void", 0)
int1 = dtype("int1", dtype.BOOL, 1)
int8 = dtype("int8", dtype.SINT, 8)
int16 = dtype("int16", dtype.SINT, 16)
int32 = dtype("int32", dtype.SINT, 32)
int64 = dtype("int64", dtype.SINT, 64)
uint8 = dtype("uint8", dtype.UINT, 8)
uint16 = dtype("uint16", dtype.UINT, 16)
uint32 = dtype("uint32", dtype.UINT, 32)
uint64 = dtype("uint64", dtype.UINT, 64)
float16 = dtype("fp16", dtype.FLOAT, 16)
bfloat16 = dtype("bf16", dtype.FLOAT, 16)
float32 = dtype("fp32", dtype.FLOAT, 32)
float64 = dtype("fp64", dtype.FLOAT, 64)
float8e4nv = dtype("fp8e4nv", dtype.FLOAT, 8)
float8e5 = dtype("fp8e5", dtype.FLOAT, 8)
# Triton's other fp8 formats. e4m3 with exponent bias 15 has no hardware conversions: they are
# Triton's bit manipulations (frontend/semantic.py), on the GPU and in interpret mode alike. The
# "fnuz" formats are AMD's: interpret mode runs them (as Triton's interpreter does), the NVPTX
# backend refuses them (`unsupported`, in Triton's words "not supported in this architecture").
float8e4b15 = dtype("fp8e4b15", dtype.FLOAT, 8)
float8e4b8 = dtype("fp8e4b8", dtype.FLOAT, 8)
float8e5b16 = dtype("fp8e5b16", dtype.FLOAT, 8)
_UNSUPPORTED = {"fp8e4b8": "float8e4b8 (AMD's fp8 e4m3 fnuz) is not supported in this architecture (NVIDIA GPUs); "
                           "use tl.float8e4nv",
                "fp8e5b16": "float8e5b16 (AMD's fp8 e5m2 fnuz) is not supported in this architecture (NVIDIA GPUs); "
                            "use tl.float8e5"}


_FP8_NAMES = ("fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16")


def unsupported(ty) -> str | None:
    """Why values of `ty` cannot be made (None when they can)."""
    return _UNSUPPORTED.get(scalar_of(ty).name)

# (mantissa bits, exponent bias) of each floating-point type, Triton's values
_FP_FORMATS = {"fp8e4b15": (3, 15), "fp8e4nv": (3, 7), "fp8e4b8": (3, 8), "fp8e5": (2, 15), "fp8e5b16": (2, 16),
               "fp16": (10, 15), "bf16": (7, 127), "fp32": (23, 127), "fp64": (52, 1023)}

_PY_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}

_NP = {"int1": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
       "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
       "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
       "fp16": np.dtype(np.float16), "bf16": np.dtype(np.float32), "fp32": np.dtype(np.float32),
       "fp64": np.dtype(np.float64)}
_NP.update({name: np.dtype(np.uint8) for name in _FP8_NAMES})  # fp8 values are held as their bits

# Signature strings used by `compiler.compile(signature=...)` and by Triton ("*fp32", "i32").
_SIG_ALIASES = {"fp16": float16, "bf16": bfloat16, "fp32": float32, "fp64": float64,
                "f16": float16, "f32": float32, "f64": float64,
                "i1": int1, "i8": int8, "i16": int16, "i32": int32, "i64": int64,
                "u1": int1, "u8": uint8, "u16": uint16, "u32": uint32, "u64": uint64,
                "fp8e4nv": float8e4nv, "fp8e5": float8e5, "fp8e4b15": float8e4b15, "fp8e4b8": float8e4b8,
                "fp8e5b16": float8e5b16}


def from_signature(text: str) -> dtype:
    """Parse `"*fp32"`, `"i32"`, `"*i8"` … into a type."""
    t = text.strip()
    if t.startswith("*"):
        inner, const = t[1:], False
        if inner.startswith("k"):  # Triton spells const pointers "*kfp32"
            inner, const = inner[1:], True
        return pointer_type(from_signature(inner), const=const)
    if t not in _SIG_ALIASES:
        raise ValueError(f"unknown type {text!r} in signature (expected e.g. '*fp32', 'i32', 'fp16')")
    return _SIG_ALIASES[t]


def to_signature(ty: dtype) -> str:
    if ty.is_ptr():
        return ("*k" if ty.const else "*") + to_signature(ty.element_ty)
    return ty.sig_name


_TORCH_NAMES = {"float16": float16, "half": float16, "bfloat16": bfloat16, "float32": float32,
                "float": float32, "float64": float64, "double": float64, "int8": int8, "int16": int16,
                "int32": int32, "int": int32, "int64": int64, "long": int64, "uint8": uint8,
                "uint16": uint16, "uint32": uint32, "uint64": uint64, "bool": int1,
                "float8_e4m3fn": float8e4nv, "float8_e5m2": float8e5, "float8_e4m3fnuz": float8e4b8,
                "float8_e5m2fnuz": float8e5b16}


def from_host_dtype(d) -> dtype:
    """The element type of a torch dtype, numpy dtype or a `typestr` of `__cuda_array_interface__`."""
    if isinstance(d, dtype):
        return d
    name = str(d)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name in _TORCH_NAMES:
        return _TORCH_NAMES[name]
    npd = np.dtype(d)
    if npd == np.bool_:
        return int1
    return _TORCH_NAMES[npd.name]


# Triton's spelling of each type name → its signature name (`triton.runtime.jit`'s
# `type_canonicalisation_dict`: torch/numpy names and the short names both map to "fp16", "i32"...).
type_canonicalisation_dict = {
    "bool": "u1", "int1": "u1", "uint1": "u1", "i1": "u1",
    "float8e4nv": "fp8e4nv", "float8_e4m3fn": "fp8e4nv", "float8e5": "fp8e5", "float8_e5m2": "fp8e5",
    "float8e4b15": "fp8e4b15", "float8e4b8": "fp8e4b8", "float8_e4m3fnuz": "fp8e4b8",
    "float8e5b16": "fp8e5b16", "float8_e5m2fnuz": "fp8e5b16",
    "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
    "double": "fp64", "float64": "fp64",
    "int8": "i8", "int16": "i16", "int": "i32", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "void": "void",
}
type_canonicalisation_dict.update({v: v for v in list(type_canonicalisation_dict.values())})
