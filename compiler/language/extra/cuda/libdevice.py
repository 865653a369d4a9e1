"""NVIDIA libdevice (`__nv_*`) as Triton exposes it: `libdevice.pow(x, y)`, `libdevice.isnan(x)`, …

Each function picks its libdevice symbol by its arguments' types, as Triton's do: exact types
first, else the arguments' common type (so `pow(x_fp32, 2.0)` works and fp16 arguments are
refused with the list of accepted types: cast them to float32). On the GPU each call is the
libdevice function itself; in interpret mode a numpy implementation of the same function
(compiler/interpreter/libdevice.py).

SIGNATURES: name → {argument dtype names: (symbol, result dtype name)}.
"""
from __future__ import annotations

import inspect

from ...core import builtin

F32, F64, I32, I64, U32, U64 = "fp32", "fp64", "i32", "i64", "u32", "u64"

SIGNATURES: dict[str, dict[tuple, tuple]] = {}
# functions whose int32 result Triton turns into a boolean (`.to(tl.int1)`)
BOOLEAN_RESULT = frozenset({"isnan", "isinf"})


def _float(names, arity=1, result=None):
    for n in names.split():
        SIGNATURES[n] = {(F32,) * arity: (f"__nv_{n}f", result or F32), (F64,) * arity: (f"__nv_{n}", result or F64)}


_float("acos acosh asin asinh atan atanh cbrt ceil cos cosh cospi erf erfc erfcinv erfcx erfinv exp exp10 "
       "exp2 expm1 floor j0 j1 lgamma log log10 log1p log2 logb nearbyint normcdf normcdfinv rcbrt rint round "
       "rsqrt sin sinh sinpi sqrt tan tanh tgamma trunc y0 y1 cyl_bessel_i0 cyl_bessel_i1")
_float("atan2 copysign fdim fmod hypot nextafter remainder rhypot", 2)
_float("fma norm3d rnorm3d", 3)
_float("norm4d rnorm4d", 4)
_float("ilogb", result=I32)
_float("llrint llround", result=I64)
SIGNATURES["abs"] = {(I32,): ("__nv_abs", I32), (I64,): ("__nv_llabs", I64), (F32,): ("__nv_fabsf", F32),
                     (F64,): ("__nv_fabs", F64)}
SIGNATURES["fmin"] = {(F32, F32): ("__nv_fminf", F32), (F64, F64): ("__nv_fmin", F64)}
SIGNATURES["fmax"] = {(F32, F32): ("__nv_fmaxf", F32), (F64, F64): ("__nv_fmax", F64)}
SIGNATURES["pow"] = {(F32, I32): ("__nv_powif", F32), (F64, I32): ("__nv_powi", F64),
                     (F32, F32): ("__nv_powf", F32), (F64, F64): ("__nv_pow", F64)}
SIGNATURES["ldexp"] = {(F32, I32): ("__nv_ldexpf", F32), (F64, I32): ("__nv_ldexp", F64)}
SIGNATURES["scalbn"] = {(F32, I32): ("__nv_scalbnf", F32), (F64, I32): ("__nv_scalbn", F64)}
SIGNATURES["jn"] = {(I32, F32): ("__nv_jnf", F32), (I32, F64): ("__nv_jn", F64)}
SIGNATURES["yn"] = {(I32, F32): ("__nv_ynf", F32), (I32, F64): ("__nv_yn", F64)}
SIGNATURES["isnan"] = {(F32,): ("__nv_isnanf", I32), (F64,): ("__nv_isnand", I32)}
SIGNATURES["isinf"] = {(F32,): ("__nv_isinff", I32), (F64,): ("__nv_isinfd", I32)}
SIGNATURES["signbit"] = {(F32,): ("__nv_signbitf", I32), (F64,): ("__nv_signbitd", I32)}
SIGNATURES["finitef"] = {(F32,): ("__nv_finitef", I32)}
SIGNATURES["isfinited"] = {(F64,): ("__nv_isfinited", I32)}
SIGNATURES["saturatef"] = {(F32,): ("__nv_saturatef", F32)}
SIGNATURES["rcp64h"] = {(F64,): ("__nv_rcp64h", F64)}
SIGNATURES["fast_dividef"] = {(F32, F32): ("__nv_fast_fdividef", F32)}
SIGNATURES["fast_powf"] = {(F32, F32): ("__nv_fast_powf", F32)}
for _n in ("sinf", "cosf", "log2f", "logf", "expf", "tanf", "exp10f", "log10f"):
    SIGNATURES[f"fast_{_n}"] = {(F32,): (f"__nv_fast_{_n}", F32)}
SIGNATURES["rsqrt_rn"] = {(F32,): ("__nv_frsqrt_rn", F32)}

# IEEE operations with an explicit rounding mode (rn: nearest even, rz: toward zero, rd: down, ru: up)
for _r in ("rn", "rz", "rd", "ru"):
    for _op in ("add", "sub", "mul", "div"):
        SIGNATURES[f"{_op}_{_r}"] = {(F32, F32): (f"__nv_f{_op}_{_r}", F32), (F64, F64): (f"__nv_d{_op}_{_r}", F64)}
    SIGNATURES[f"fma_{_r}"] = {(F32, F32, F32): (f"__nv_fmaf_{_r}", F32), (F64, F64, F64): (f"__nv_fma_{_r}", F64)}
    SIGNATURES[f"rcp_{_r}"] = {(F32,): (f"__nv_frcp_{_r}", F32), (F64,): (f"__nv_drcp_{_r}", F64)}
    SIGNATURES[f"sqrt_{_r}"] = {(F32,): (f"__nv_fsqrt_{_r}", F32), (F64,): (f"__nv_dsqrt_{_r}", F64)}
    # conversions (Triton types the unsigned results as int32/int64, as here)
    SIGNATURES[f"double2float_{_r}"] = {(F64,): (f"__nv_double2float_{_r}", F32)}
    for _src, _sname in ((F32, "float"), (F64, "double")):
        SIGNATURES[f"{_sname}2int_{_r}"] = {(_src,): (f"__nv_{_sname}2int_{_r}", I32)}
        SIGNATURES[f"{_sname}2uint_{_r}"] = {(_src,): (f"__nv_{_sname}2uint_{_r}", I32)}
        SIGNATURES[f"{_sname}2ll_{_r}"] = {(_src,): (f"__nv_{_sname}2ll_{_r}", I64)}
        SIGNATURES[f"{_sname}2ull_{_r}"] = {(_src,): (f"__nv_{_sname}2ull_{_r}", I64)}
    for _src, _sname in ((I32, "int"), (U32, "uint"), (I64, "ll"), (U64, "ull")):
        SIGNATURES[f"{_sname}2float_{_r}"] = {(_src,): (f"__nv_{_sname}2float_{_r}", F32)}
        if _sname in ("ll", "ull"):
            SIGNATURES[f"{_sname}2double_{_r}"] = {(_src,): (f"__nv_{_sname}2double_{_r}", F64)}
SIGNATURES["int2double_rn"] = {(I32,): ("__nv_int2double_rn", F64)}
SIGNATURES["uint2double_rn"] = {(U32,): ("__nv_uint2double_rn", F64)}
SIGNATURES["hiloint2double"] = {(I32, I32): ("__nv_hiloint2double", F64)}
SIGNATURES["double2loint"] = {(F64,): ("__nv_double2loint", I32)}
SIGNATURES["double2hiint"] = {(F64,): ("__nv_double2hiint", I32)}
SIGNATURES["int_as_float"] = {(I32,): ("__nv_int_as_float", F32)}
SIGNATURES["float_as_int"] = {(F32,): ("__nv_float_as_int", I32)}
SIGNATURES["uint_as_float"] = {(U32,): ("__nv_uint_as_float", F32)}
SIGNATURES["float_as_uint"] = {(F32,): ("__nv_float_as_uint", I32)}
SIGNATURES["longlong_as_double"] = {(I64,): ("__nv_longlong_as_double", F64)}
SIGNATURES["double_as_longlong"] = {(F64,): ("__nv_double_as_longlong", I64)}

# integer functions
SIGNATURES["clz"] = {(I32,): ("__nv_clz", I32), (I64,): ("__nv_clzll", I32)}
SIGNATURES["popc"] = {(I32,): ("__nv_popc", I32), (I64,): ("__nv_popcll", I32)}
SIGNATURES["ffs"] = {(I32,): ("__nv_ffs", I32), (I64,): ("__nv_ffsll", I32)}
SIGNATURES["brev"] = {(I32,): ("__nv_brev", I32), (I64,): ("__nv_brevll", I64)}
SIGNATURES["byte_perm"] = {(I32, I32, I32): ("__nv_byte_perm", I32)}
SIGNATURES["mulhi"] = {(I32, I32): ("__nv_mulhi", I32), (U32, U32): ("__nv_umulhi", U32),
                       (I64, I64): ("__nv_mul64hi", I64), (U64, U64): ("__nv_umul64hi", U64)}
SIGNATURES["mul24"] = {(I32, I32): ("__nv_mul24", I32), (U32, U32): ("__nv_umul24", U32)}
SIGNATURES["sad"] = {(I32, I32, U32): ("__nv_sad", I32), (U32, U32, U32): ("__nv_usad", U32)}
SIGNATURES["hadd"] = {(I32, I32): ("__nv_hadd", I32), (U32, U32): ("__nv_uhadd", U32)}
SIGNATURES["rhadd"] = {(I32, I32): ("__nv_rhadd", I32), (U32, U32): ("__nv_urhadd", U32)}


def _function(name):
    arity = len(next(iter(SIGNATURES[name])))

    def fn(*args): ...
    fn.__name__ = fn.__qualname__ = name
    fn = builtin(fn)
    fn.__blocktune_builtin__ = f"libdevice.{name}"
    fn.__module__ = __name__
    fn.__signature__ = inspect.Signature(  # Triton's parameter names, for help() and tools
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(arity)])
    fn.__doc__ = "libdevice " + ", ".join(f"{sym}({', '.join(args)}) -> {res}" for args, (sym, res) in SIGNATURES[name].items())
    return fn


for _name in SIGNATURES:
    globals()[_name] = _function(_name)

__all__ = sorted(SIGNATURES)
