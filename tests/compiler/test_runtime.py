"""The runtime: @jit objects, specialization, caches, launchers, jit_from_source, autotune, testing.

GPU-free tests exercise the real launch path against a fake libcuda (a tiny C library built with
the system compiler that records what cuLaunchKernel received); tests marked `gpu` run on a GPU.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
import compiler as triton
import compiler.language as tl
from compiler.runtime import autotune as AT
from compiler.runtime import compile as C
from compiler.runtime import driver, jit as J, launcher
from compiler.runtime import kernel as compiled_kernel

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# Kernels used below (module level: @jit reads their source from this file)

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def _double(x):
    return x * 2


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: "tl.constexpr" = 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, _double(tl.load(x_ptr + offs, mask=m)) * alpha, mask=m)


@triton.jit(do_not_specialize=["n"])
def dns_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(d))
    C.clear_memory_cache()
    yield d
    C.clear_memory_cache()


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    yield


# ---------------------------------------------------------------------------------------------
# Package surface and errors

def test_package_surface():
    for name in ("jit", "autotune", "heuristics", "Config", "compile", "jit_from_source", "cdiv",
                 "next_power_of_2", "CompilationError", "OutOfResources", "testing", "language", "runtime"):
        assert hasattr(compiler, name), name
    assert compiler.__version__ == "0.1.0"
    assert compiler.language is tl
    assert compiler.cdiv(10, 4) == 3 and compiler.cdiv(8, 4) == 2
    assert [compiler.next_power_of_2(n) for n in (0, 1, 2, 3, 5, 1024, 1025)] == [1, 1, 2, 4, 8, 1024, 2048]
    import compiler.runtime.compile as mod
    assert mod is C and compiler.runtime.compile is C  # the module, not shadowed by the function
    assert compiler.runtime.jit is J


def test_import_is_light():
    code = "import sys, compiler; print(sorted(m for m in ('torch', 'llvmlite', 'cuda.bindings.driver') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_compilation_error_format_and_pickle():
    from compiler.ir import Loc
    e = compiler.CompilationError("bad thing", Loc("k.py", 12, 8, "k"), "        x = tl.load(p)")
    s = str(e)
    assert s.splitlines()[0] == "k.py:12:9: error: bad thing"
    assert s.splitlines()[1] == "    x = tl.load(p)"
    assert s.splitlines()[2] == "    ^"
    e2 = pickle.loads(pickle.dumps(e))
    assert str(e2) == s and e2.loc == e.loc
    assert str(compiler.CompilationError("no loc")) == "error: no loc"
    o = compiler.OutOfResources(300000, 232448, "shared memory")
    assert "shared memory" in str(o) and pickle.loads(pickle.dumps(o)).required == 300000


# ---------------------------------------------------------------------------------------------
# JITFunction attributes

def test_jit_attributes():
    k = add_kernel
    assert k.__name__ == "add_kernel"
    assert k.arg_names == ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK_SIZE"]
    assert k.constexpr_names == ["BLOCK_SIZE"]
    assert k.src.startswith("def add_kernel(") and "@triton.jit" not in k.src
    assert k.filename == __file__
    lines = Path(__file__).read_text().splitlines()
    assert lines[k.first_lineno - 1].startswith("def add_kernel(")
    assert k.fn_ast.lineno == k.first_lineno
    store = k.fn_ast.body[-1]
    assert lines[store.lineno - 1].strip().startswith("tl.store(out_ptr")
    assert k.col_offset_shift == 0
    assert k.globals["tl"] is tl
    assert scale_kernel.constexpr_names == ["BLOCK"]          # string annotation
    assert scale_kernel.defaults == {"BLOCK": 128}
    assert dns_kernel.do_not_specialize == ["n"]
    with pytest.raises(RuntimeError, match="cannot be called as a Python function"):
        add_kernel(1, 2, 3, 4, 5)


def test_nested_kernel_dedent_and_closure():
    factor = 3

    @triton.jit(do_not_specialize=[1])
    def inner(x_ptr, n, B: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, B), factor)

    assert inner.src.startswith("def inner(")
    assert inner.col_offset_shift == 4
    lines = Path(__file__).read_text().splitlines()
    assert lines[inner.first_lineno - 1].strip().startswith("def inner(")
    node = inner.fn_ast.body[0]
    assert lines[node.lineno - 1][node.col_offset + inner.col_offset_shift:].startswith("tl.store(")
    assert inner.source_line(node.lineno).strip().startswith("tl.store(")
    assert inner.globals["factor"] == 3 and inner.globals["tl"] is tl
    assert inner.do_not_specialize == ["n"]


def test_fingerprint_stable_and_sensitive():
    fp = add_kernel.fingerprint
    assert len(fp) == 64 and fp == add_kernel.fingerprint
    k2 = compiler.jit_from_source(_kernel_module_text(), "add_kernel", filename=__file__)
    assert k2.fingerprint == fp                                # same code, parsed from text: same fingerprint
    other = compiler.jit_from_source(_kernel_module_text().replace("x + y", "x - y"), "add_kernel")
    assert other.fingerprint != fp
    # a change in a called @jit helper changes the caller's fingerprint
    a = compiler.jit_from_source(_kernel_module_text(), "scale_kernel")
    b = compiler.jit_from_source(_kernel_module_text().replace("return x * 2", "return x * 3"), "scale_kernel")
    assert a.fingerprint == scale_kernel.fingerprint
    assert a.fingerprint != b.fingerprint
    # module-level literal constants read by the kernel are part of it
    s1 = "import triton\nimport triton.language as tl\nC = 1\n@triton.jit\ndef k(p):\n    tl.store(p, C)\n"
    assert compiler.jit_from_source(s1, "k").fingerprint != compiler.jit_from_source(s1.replace("C = 1", "C = 2"), "k").fingerprint


def _kernel_module_text() -> str:
    """The kernels of this file as a standalone module (import lines swapped to Triton's)."""
    src = Path(__file__).read_text()
    body = src[src.index("@triton.jit\ndef add_kernel"):src.index("ADD_SIG =")]
    return "import triton\nimport triton.language as tl\n\n" + body


# ---------------------------------------------------------------------------------------------
# Specialization keys

def test_spec_arg_scalars():
    assert J.spec_arg(7, 0, "n") == ("i32", False, 7)
    assert J.spec_arg(32, 0, "n") == ("i32", True, 32)
    assert J.spec_arg(1, 0, "n") == (1, False, 1)                    # equal to 1
    assert J.spec_arg(1, 0, "n", specialize=False) == ("i32", False, 1)
    assert J.spec_arg(2 ** 31, 0, "n")[0] == "i64"
    assert J.spec_arg(-(2 ** 31), 0, "n")[0] == "i32"
    assert J.spec_arg(2 ** 63, 0, "n")[0] == "u64"
    with pytest.raises(OverflowError):
        J.spec_arg(2 ** 64, 0, "n")
    assert J.spec_arg(1.5, 0, "a") == ("fp32", False, 1.5)
    assert J.spec_arg(True, 0, "b") == ("i1", False, 1)
    assert J.spec_arg(None, 0, "b") == (None, False, None)
    assert J.spec_arg(np.int64(48), 0, "n") == ("i32", True, 48)
    assert J.spec_arg(np.float32(2.0), 0, "a")[0] == "fp32"


def test_spec_arg_arrays():
    a = np.zeros(64, dtype=np.float16)
    with pytest.raises(ValueError, match="numpy array"):
        J.spec_arg(a, 0, "x")                                        # host memory on the GPU path
    k, aligned, ptr = J.spec_arg(a, 0, "x", interpret=True)
    assert J.key_to_type(k) == "*fp16" and ptr == a.ctypes.data and aligned == (ptr % 16 == 0)
    k2, aligned2, _ = J.spec_arg(a[1:], 0, "x", interpret=True)
    assert not aligned2

    class CAI:
        __cuda_array_interface__ = {"data": (0x7F0000000010, False), "typestr": "<f4", "shape": (4,), "version": 3}
    k, aligned, ptr = J.spec_arg(CAI(), 0, "x")
    assert J.key_to_type(k) == "*fp32" and aligned and ptr == 0x7F0000000010


def test_spec_arg_torch():
    torch = pytest.importorskip("torch")
    t = torch.zeros(16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CPU tensor"):
        J.spec_arg(t, 0, "x")
    k, aligned, ptr = J.spec_arg(t, 0, "x", interpret=True)
    assert k is torch.bfloat16 and J.key_to_type(k) == "*bf16" and ptr == t.data_ptr()


def test_specialize_signature():
    x = np.zeros(256, np.float32)
    sig, cx, div16, eq1, names = add_kernel.specialize((x, x[1:], x, 1, 128), interpret=True)
    assert sig == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}
    assert cx == {"BLOCK_SIZE": 128}
    assert "y_ptr" not in div16 and eq1 == ("n_elements",)
    assert names == ["x_ptr", "y_ptr", "out_ptr", "n_elements"]
    sig, cx, div16, eq1, _ = dns_kernel.specialize((x, 1, 64), interpret=True)
    assert eq1 == () and "n" not in div16 and sig["n"] == "i32"
    sig, cx, *_ = scale_kernel.specialize((x, None, 64, 2.0, 128), interpret=True)
    assert cx == {"out_ptr": None, "BLOCK": 128} and sig["alpha"] == "fp32"


def test_reserved_parameter_names():
    src = "import triton\n@triton.jit\ndef k(x, stream):\n    pass\n"
    k = compiler.jit_from_source(src, "k")
    with pytest.raises(compiler.CompilationError, match="reserved"):
        k[(1,)](1, 2)


# ---------------------------------------------------------------------------------------------
# Interpret mode (no GPU)

def test_interpret_vector_add_and_ir_cache(interpret):
    n = 1000
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)
    out = np.zeros_like(x)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)

    before = add_kernel.compile_count
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)
    np.testing.assert_allclose(out, x + y)
    assert seen[0]["BLOCK_SIZE"] == 256 and seen[0]["n_elements"] == n and seen[0]["num_warps"] == 4
    out[:] = 0
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)
    np.testing.assert_allclose(out, x + y)
    assert add_kernel.compile_count == before + 1                 # same specialization: no rebuild
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=128)
    assert add_kernel.compile_count == before + 2                 # new constexpr: rebuild
    ir_fn = add_kernel.warmup(x, y, out, n, BLOCK_SIZE=128, grid=(1,))
    assert ir_fn.arg_names == ["x_ptr", "y_ptr", "out_ptr", "n_elements"]


def test_interpret_torch_cpu_defaults_and_helpers(interpret):
    torch = pytest.importorskip("torch")
    x = torch.arange(300, dtype=torch.float32)
    out = torch.zeros(300)
    scale_kernel[(3,)](x, out, 300, 0.5)                          # BLOCK from its default
    assert torch.allclose(out, x)                                 # _double(x) * 0.5
    out.zero_()
    scale_kernel[lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)](x, out, 300, 1.0, BLOCK=64)
    assert torch.allclose(out, 2 * x)


def test_interpret_equal_to_one(interpret):
    x = np.zeros(64, np.float32)
    dns_kernel[(1,)](x, 1, BLOCK=64)
    assert x[0] == 1 and x[1] == 0


def test_grid_forms(interpret):
    x = np.zeros(64, np.float32)
    dns_kernel[(0,)](x, 64, BLOCK=64)                               # empty grid: nothing runs
    assert x.sum() == 0
    dns_kernel[(1, 1, 1)](x, 64, BLOCK=64)
    assert x.sum() == 64
    dns_kernel[(1,)](x, 64, BLOCK=64)
    assert x.sum() == 128


# ---------------------------------------------------------------------------------------------
# compile(): IR → PTX, memory and disk caches

def test_compile_and_memory_cache(cache_dir):
    s0 = dict(C.stats)
    ck = compiler.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 256}, num_warps=4,
                          target="sm_90", divisible_by_16=("x_ptr", "y_ptr", "out_ptr"))
    assert ".entry add_kernel" in ck.asm["ptx"] and ".target sm_90" in ck.asm["ptx"]
    assert ck.asm["ir"].startswith("func @add_kernel(") and "define" in ck.asm["llir"]
    m = ck.metadata
    assert m["num_warps"] == 4 and m["num_stages"] == 3 and m["target"] == "sm_90" and m["shared"] == 0
    assert m["arg_names"] == list(ADD_SIG) and m["arg_types"] == list(ADD_SIG.values())
    assert m["constexprs"] == {"BLOCK_SIZE": 256} and m["passed"] == list(ADD_SIG)
    assert C.stats["compiled"] == s0["compiled"] + 1
    ck2 = compiler.compile(add_kernel, signature="*fp32,*fp32,*fp32,i32", constexprs={"BLOCK_SIZE": 256},
                           target="sm_90", divisible_by_16=("out_ptr", "y_ptr", "x_ptr"))
    assert ck2 is ck and C.stats["compiled"] == s0["compiled"] + 1 and C.stats["memory_hits"] == s0["memory_hits"] + 1
    ck3 = compiler.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 256}, target="sm_90")
    assert ck3 is not ck and C.stats["compiled"] == s0["compiled"] + 2   # other divisibility
    files = list(cache_dir.rglob("*.json"))
    assert len(files) == 2
    p = pickle.loads(pickle.dumps(ck))
    assert p.asm == ck.asm and p.metadata == ck.metadata and p.name == "add_kernel"


def test_compile_equal_to_one_and_errors(cache_dir):
    ck = compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, target="sm_90", equal_to_1=("n_elements",))
    assert ck.metadata["passed"] == ["x_ptr", "y_ptr", "out_ptr"]
    assert ck.metadata["equal_to_1"] == ["n_elements"]
    with pytest.raises(ValueError, match="only integers"):
        compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, target="sm_90", equal_to_1=("x_ptr",))
    with pytest.raises(ValueError, match="no parameter"):
        compiler.compile(add_kernel, dict(ADD_SIG, bogus="i32"), {"BLOCK_SIZE": 128}, target="sm_90")
    with pytest.raises(compiler.CompilationError, match="range must be a power of 2"):
        compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 100}, target="sm_90")


def test_compiled_kernel_launch_checks_divisibility(cache_dir):
    ck = compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, target="sm_90",
                          divisible_by_16=("x_ptr", "n_elements"), equal_to_1=())
    with pytest.raises(ValueError, match="not divisible by 16"):
        ck.launch((1, 1, 1), [0x7F0000000008, 0x7F0000000100, 0x7F0000000200, 64])
    with pytest.raises(ValueError, match="not divisible by 16"):
        ck.launch((1, 1, 1), [0x7F0000000000, 0x7F0000000100, 0x7F0000000200, 65])
    ck1 = compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, target="sm_90", equal_to_1=("n_elements",))
    with pytest.raises(ValueError, match="value 1"):
        ck1.launch((1,), [0x7F0000000000, 0x7F0000000100, 0x7F0000000200, 3])


def test_disk_cache_across_processes(cache_dir):
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        import compiler
        from compiler.runtime import compile as C
        src = open({__file__!r}).read()
        import test_runtime as T
        ck = compiler.compile(T.add_kernel, T.ADD_SIG, {{"BLOCK_SIZE": 512}}, target="sm_90")
        print(json.dumps(dict(C.stats)))
    """)
    env = dict(os.environ, BLOCKTUNE_CACHE_DIR=str(cache_dir))
    import json
    r1 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r1.returncode == 0, r1.stderr
    s1 = json.loads(r1.stdout.strip().splitlines()[-1])
    assert s1["compiled"] == 1 and s1["disk_hits"] == 0
    r2 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    s2 = json.loads(r2.stdout.strip().splitlines()[-1])
    assert s2["compiled"] == 0 and s2["disk_hits"] == 1 and s2["ir_built"] == 0


def test_cache_key_covers_specialization():
    k = C.cache_key
    base = (add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 4, 3, "sm_90", (), ())
    ref = k(*base)
    assert ref == k(*base)
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 256}, 4, 3, "sm_90", (), ())
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 8, 3, "sm_90", (), ())
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 4, 2, "sm_90", (), ())
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 4, 3, "sm_80", (), ())
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 4, 3, "sm_90", ("x_ptr",), ())
    assert ref != k(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, 4, 3, "sm_90", (), ("n_elements",))
    assert ref != k(add_kernel, dict(ADD_SIG, x_ptr="*fp16"), {"BLOCK_SIZE": 128}, 4, 3, "sm_90", (), ())
    assert C.canon(tl.float16) != C.canon(tl.bfloat16)
    assert C.canon(1) != C.canon(True) and C.canon(1) != C.canon(1.0)


# ---------------------------------------------------------------------------------------------
# The GPU launch path against a fake libcuda

FAKE_CUDA = r"""
#include <stdint.h>
#include <string.h>
static uint64_t last[32]; static unsigned g[7]; static void* st; static void* fn; static int calls;
static int nparams; static int fail_code;
void fake_set_nparams(int n) { nparams = n; }
void fake_fail_next(int code) { fail_code = code; }
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
  if (fail_code) { int c = fail_code; fail_code = 0; return c; }
  fn = f; g[0]=gx; g[1]=gy; g[2]=gz; g[3]=bx; g[4]=by; g[5]=bz; g[6]=shared; st = stream; calls++;
  for (int i = 0; i < nparams; i++) memcpy(&last[i], params[i], 8);
  return 0;
}
int cuCtxGetDevice(int* d) { *d = 0; return 0; }
uint64_t fake_param(int i) { return last[i]; }
unsigned fake_grid(int i) { return g[i]; }
void* fake_stream(void) { return st; }
void* fake_fn(void) { return fn; }
int fake_calls(void) { return calls; }
"""


@pytest.fixture
def fake_cuda(tmp_path, monkeypatch, cache_dir):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the fake libcuda")
    src = tmp_path / "fake.c"
    src.write_text(FAKE_CUDA)
    so = tmp_path / "libfakecuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(so), str(src)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.fake_param.restype = ctypes.c_uint64
    lib.fake_stream.restype = ctypes.c_void_p
    lib.fake_fn.restype = ctypes.c_void_p
    monkeypatch.setattr(driver, "_lib", lib)
    monkeypatch.delenv("BLOCKTUNE_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    loads = []

    def fake_load(self, device=None):
        lf = self._loaded.get(0)
        if lf is None:
            loads.append(self.name)
            lf = driver.LoadedFunction(None, 0xF00D, 0, self.metadata.get("shared", 0), self.name, 16)
            self._loaded[0] = lf
        return lf

    monkeypatch.setattr(C.CompiledKernel, "load", fake_load)
    monkeypatch.setattr(driver, "target_for_device", lambda d=0: "sm_90")
    saved = dict(J._NS)
    monkeypatch.setattr(J, "_refresh_torch", lambda: None)
    J._NS["_get_device"] = lambda: 0
    J._NS["_get_stream"] = lambda d: 0
    lib.loads = loads
    yield lib
    J._NS.clear()
    J._NS.update(saved)


class FakeTensor:
    """A stand-in for a CUDA tensor: data_ptr + dtype."""

    def __init__(self, ptr, dtype="float32"):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self):
        return self.ptr


def _fresh(kernel):
    """A JITFunction with the same source and empty caches."""
    return J.JITFunction(kernel.fn)


def test_gpu_path_specializes_and_packs(fake_cuda):
    k = _fresh(add_kernel)
    x, y, o = FakeTensor(0x7F0000001000), FakeTensor(0x7F0000002000), FakeTensor(0x7F0000003000)
    fake_cuda.fake_set_nparams(4)
    ck = k[(lambda m: (triton.cdiv(m["n_elements"], m["BLOCK_SIZE"]),))](x, y, o, 1000, BLOCK_SIZE=256, num_warps=8)
    assert isinstance(ck, C.CompiledKernel) and ck.metadata["num_warps"] == 8
    assert fake_cuda.fake_calls() == 1
    assert [fake_cuda.fake_grid(i) for i in range(7)] == [4, 1, 1, 256, 1, 1, 0]
    assert [fake_cuda.fake_param(i) for i in range(3)] == [0x7F0000001000, 0x7F0000002000, 0x7F0000003000]
    assert fake_cuda.fake_param(3) & 0xFFFFFFFF == 1000
    assert fake_cuda.fake_fn() == 0xF00D and fake_cuda.fake_stream() is None
    assert set(ck.metadata["divisible_by_16"]) == {"x_ptr", "y_ptr", "out_ptr"}   # 1000 % 16 != 0
    assert k.compile_count == 1
    # same specialization: no compile, no load; the new values reach the kernel
    k[(2, 3)](x, y, FakeTensor(0x7F0000004000), 1016, BLOCK_SIZE=256, num_warps=8, stream=0x1234)
    assert k.compile_count == 1 and fake_cuda.fake_calls() == 2 and fake_cuda.loads == ["add_kernel"]
    assert fake_cuda.fake_param(2) == 0x7F0000004000 and fake_cuda.fake_param(3) & 0xFFFFFFFF == 1016
    assert [fake_cuda.fake_grid(i) for i in range(3)] == [2, 3, 1] and fake_cuda.fake_stream() == 0x1234
    k[(1,)](x, y, o, 992, BLOCK_SIZE=256, num_warps=8)             # 992 % 16 == 0: a new specialization
    assert k.compile_count == 2 and len(k._launchers) == 2
    # a misaligned pointer, n == 1, another dtype: each a new specialization
    k[(1,)](FakeTensor(0x7F0000001004), y, o, 1000, BLOCK_SIZE=256, num_warps=8)
    fake_cuda.fake_set_nparams(3)
    ck1 = k[(1,)](x, y, o, 1, BLOCK_SIZE=256, num_warps=8)
    assert ck1.metadata["passed"] == ["x_ptr", "y_ptr", "out_ptr"]
    assert k.compile_count == 4
    # warmup compiles without launching
    calls = fake_cuda.fake_calls()
    ck16 = k.warmup(FakeTensor(0x7F0000001000, "float16"), FakeTensor(0x7F0000001000, "float16"),
                    FakeTensor(0x7F0000001000, "float16"), 4096, BLOCK_SIZE=256, grid=(1,))
    assert ck16.metadata["arg_types"][0] == "*fp16" and fake_cuda.fake_calls() == calls


def test_gpu_path_torch_tensor_branch(fake_cuda, monkeypatch):
    """The generated code's inline torch.Tensor branch (CPU tensors stand in for CUDA ones here)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(J._NS, "_Tensor", torch.Tensor)
    monkeypatch.setitem(J._NS, "_cpu_tensor", lambda tensor, name: None)
    orig = J.spec_arg
    monkeypatch.setattr(J, "spec_arg", lambda v, i, n, specialize=True, interpret=False: orig(v, i, n, specialize, True))
    k = _fresh(add_kernel)
    x, y, o = torch.zeros(64), torch.zeros(64), torch.zeros(64)
    fake_cuda.fake_set_nparams(4)
    ck = k[(1,)](x, y, o, 64, BLOCK_SIZE=64)
    assert [fake_cuda.fake_param(i) for i in range(3)] == [x.data_ptr(), y.data_ptr(), o.data_ptr()]
    assert ck.metadata["arg_types"][:3] == ["*fp32"] * 3
    assert set(ck.metadata["divisible_by_16"]) == {"x_ptr", "y_ptr", "out_ptr", "n_elements"}
    o2 = torch.zeros(64)
    k[(1,)](x, y, o2, 64, BLOCK_SIZE=64)
    assert k.compile_count == 1 and fake_cuda.fake_param(2) == o2.data_ptr()
    k[(1,)](x[1:], y, o, 63, BLOCK_SIZE=64)                       # misaligned view, odd n
    ck16 = k[(1,)](x.half(), y.half(), o.half(), 64, BLOCK_SIZE=64)
    assert k.compile_count == 3 and ck16.metadata["arg_types"][0] == "*fp16"


def test_gpu_path_scalars_and_none(fake_cuda):
    k = _fresh(scale_kernel)
    fake_cuda.fake_set_nparams(4)
    x, o = FakeTensor(0x7F0000001000), FakeTensor(0x7F0000002000)
    k[(1,)](x, o, -7 + 2 ** 33, 2.5)
    assert fake_cuda.fake_param(2) == (2 ** 33 - 7)                 # i64
    assert struct.unpack("<f", struct.pack("<I", fake_cuda.fake_param(3) & 0xFFFFFFFF))[0] == 2.5
    k[(1,)](x, o, -5, 1.0)
    assert fake_cuda.fake_param(2) & 0xFFFFFFFF == (-5) & 0xFFFFFFFF   # i32, sign-extended
    src = ("import triton\nimport triton.language as tl\n@triton.jit\n"
           "def bias(x_ptr, b_ptr, n, BLOCK: tl.constexpr):\n"
           "    offs = tl.arange(0, BLOCK)\n"
           "    v = tl.load(x_ptr + offs, mask=offs < n)\n"
           "    if b_ptr is not None:\n"
           "        v += tl.load(b_ptr + offs, mask=offs < n)\n"
           "    tl.store(x_ptr + offs, v, mask=offs < n)\n")
    kb = compiler.jit_from_source(src, "bias")
    fake_cuda.fake_set_nparams(2)
    ck = kb[(1,)](x, None, 64, BLOCK=64)                            # None → constexpr, not passed
    assert ck.metadata["passed"] == ["x_ptr", "n"] and ck.metadata["constexprs"]["b_ptr"] is None
    assert fake_cuda.fake_param(1) & 0xFFFFFFFF == 64
    ck2 = kb[(1,)](x, o, 64, BLOCK=64)
    assert ck2 is not ck and ck2.metadata["passed"] == ["x_ptr", "b_ptr", "n"]


def test_compiled_kernel_launch(fake_cuda, monkeypatch):
    monkeypatch.setattr(compiled_kernel, "_current_device", lambda: 0)
    ck = compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 128}, target="sm_90",
                          divisible_by_16=("x_ptr",), equal_to_1=("n_elements",))
    fake_cuda.fake_set_nparams(3)
    ck.launch((3, 2), [FakeTensor(0x7F0000001000), 0x7F0000002000, FakeTensor(0x7F0000003004), 1], stream=0x77)
    assert [fake_cuda.fake_param(i) for i in range(3)] == [0x7F0000001000, 0x7F0000002000, 0x7F0000003004]
    assert [fake_cuda.fake_grid(i) for i in range(4)] == [3, 2, 1, 128] and fake_cuda.fake_stream() == 0x77
    ck.launch([5], [0x7F0000001000, 0x7F0000002000, 0x7F0000003000])      # the passed arguments only
    assert fake_cuda.fake_grid(0) == 5 and fake_cuda.fake_stream() is None
    calls = fake_cuda.fake_calls()
    ck.launch((0,), [0x7F0000001000, 0x7F0000002000, 0x7F0000003000])     # empty grid: no launch
    assert fake_cuda.fake_calls() == calls
    with pytest.raises(ValueError, match="expected 4 arguments"):
        ck.launch((1,), [1, 2])
    p = pickle.loads(pickle.dumps(ck))                                       # loads again after unpickling
    p.launch((7,), [0x7F0000001000, 0x7F0000002000, 0x7F0000003000])
    assert fake_cuda.fake_grid(0) == 7


def test_gpu_path_rejects_host_arrays(fake_cuda):
    k = _fresh(add_kernel)
    a = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="numpy array"):
        k[(1,)](a, a, a, 16, BLOCK_SIZE=16)


def test_launcher_threads_and_types(fake_cuda):
    import threading
    lf = driver.LoadedFunction(None, 0xBEEF, 0, 0, "k", 8)
    passed = {"p": "*fp32", "h": "fp16", "d": "fp64", "b": "i1"}
    fake_cuda.fake_set_nparams(4)
    launch = launcher.make_launcher(lf, ["p", "C", "h", "d", "b"], passed, 2, 1024, "k")
    launch(1, 1, 1, 0, 0x1000, "ignored", 1.5, 0.25, True)
    assert fake_cuda.fake_param(0) == 0x1000
    assert fake_cuda.fake_param(1) & 0xFFFF == struct.unpack("<H", struct.pack("<e", 1.5))[0]
    assert struct.unpack("<d", struct.pack("<Q", fake_cuda.fake_param(2)))[0] == 0.25
    assert fake_cuda.fake_param(3) & 0xFFFFFFFF == 1
    assert fake_cuda.fake_grid(3) == 64 and fake_cuda.fake_grid(6) == 1024
    t = threading.Thread(target=launch, args=(5, 1, 1, 0, 0x2000, None, 2.0, 1.0, False))
    t.start()
    t.join()
    assert fake_cuda.fake_grid(0) == 5 and fake_cuda.fake_param(0) == 0x2000
    launch(np.int64(3), 1, 1, 0, 0x1000, None, 1.0, 1.0, False)     # numpy grid values
    assert fake_cuda.fake_grid(0) == 3


def test_native_launcher(fake_cuda):
    """launch.c: built with the system C compiler, packs i64/u64/fp32/fp64 into 8-byte slots in
    kernel order (not call order), turns bad values into a readable error and driver errors into
    CudaError, and retries through the ctypes launcher when the thread has no context (201)."""
    from compiler.runtime import native
    if native.module() is None:
        pytest.skip("the native launcher could not be built here")
    lf = driver.LoadedFunction(None, 0xBEEF, 0, 0, "k", 8)
    passed = {"p": "*fp32", "n": "i32", "x": "fp32", "d": "fp64", "b": "i1"}
    fake_cuda.fake_set_nparams(5)
    launch = launcher.make_launcher(lf, ["d", "skip", "x", "p", "b", "n"], passed, 4, 96, "k")
    assert type(launch).__name__ == "Launcher"
    launch(7, 2, 3, 0x55, 0.5, "ignored", 1.25, 0x7F0000001000, True, -3)
    assert fake_cuda.fake_param(0) == 0x7F0000001000
    assert fake_cuda.fake_param(1) == (-3) & 0xFFFFFFFFFFFFFFFF
    assert struct.unpack("<f", struct.pack("<I", fake_cuda.fake_param(2) & 0xFFFFFFFF))[0] == 1.25
    assert struct.unpack("<d", struct.pack("<Q", fake_cuda.fake_param(3)))[0] == 0.5
    assert fake_cuda.fake_param(4) == 1
    assert [fake_cuda.fake_grid(i) for i in range(7)] == [7, 2, 3, 128, 1, 1, 96]
    assert fake_cuda.fake_stream() == 0x55 and fake_cuda.fake_fn() == 0xBEEF
    launch(np.int64(4), 1, 1, None, 0.0, None, 2, 0x1000, False, 5)   # numpy grid, int for fp32, no stream
    assert fake_cuda.fake_grid(0) == 4 and fake_cuda.fake_stream() is None
    assert struct.unpack("<f", struct.pack("<I", fake_cuda.fake_param(2) & 0xFFFFFFFF))[0] == 2.0
    with pytest.raises(ValueError, match="argument 'p' = 'oops' does not fit the kernel's parameter type"):
        launch(1, 1, 1, 0, 0.0, None, 1.0, "oops", False, 5)
    with pytest.raises(TypeError, match="takes 10 arguments"):
        launch(1, 1, 1, 0)
    calls = fake_cuda.fake_calls()
    fake_cuda.fake_fail_next(201)                    # no context: made current, launched again
    launch(9, 1, 1, 0, 0.0, None, 1.0, 0x1000, False, 5)
    assert fake_cuda.fake_calls() == calls + 1 and fake_cuda.fake_grid(0) == 9
    fake_cuda.fake_fail_next(700)                    # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(driver.CudaError):
        launch(1, 1, 1, 0, 0.0, None, 1.0, 0x1000, False, 5)


def test_native_binder_fast_path(fake_cuda):
    """The runner's fast path in C (launch.c's Binder) builds the same specialization key as the
    Python body: after the Python body compiled and stored a kernel, the binder finds and launches
    it; anything it does not handle (unaligned pointer not compiled yet, CPU tensor, i64, a
    callable grid) comes back NotImplemented for the Python body."""
    from compiler.runtime import native
    if native.module() is None:
        pytest.skip("the native launcher could not be built here")

    class CudaFake(FakeTensor):
        is_cuda = True

    J._NS["_Tensor"] = CudaFake          # the fixture restores the runners' globals
    k = _fresh(add_kernel)
    fake_cuda.fake_set_nparams(4)
    x, y, o = CudaFake(0x7F0000001000), CudaFake(0x7F0000002000), CudaFake(0x7F0000003000)
    k[(4,)](x, y, o, 4096, BLOCK_SIZE=1024)           # the Python body compiles
    assert k.compile_count == 1 and k._binder is not None
    calls = fake_cuda.fake_calls()
    ck = k._binder((5, 2), 4, 3, None, x, y, o, 4096, 1024)
    assert ck is not NotImplemented and ck.name == "add_kernel"
    assert fake_cuda.fake_calls() == calls + 1 and [fake_cuda.fake_grid(i) for i in range(3)] == [5, 2, 1]
    assert [fake_cuda.fake_param(i) & 0xFFFFFFFFFFFF for i in range(4)] == [0x7F0000001000, 0x7F0000002000,
                                                                           0x7F0000003000, 4096]
    assert k._binder((0,), 4, 3, None, x, y, o, 4096, 1024) is ck and fake_cuda.fake_calls() == calls + 1
    odd = CudaFake(0x7F0000001004)
    assert k._binder((1,), 4, 3, None, odd, y, o, 4096, 1024) is NotImplemented      # other key
    assert k._binder((1,), 8, 3, None, x, y, o, 4096, 1024) is NotImplemented        # num_warps
    host = CudaFake(0x7F0000004000)
    host.is_cuda = False
    assert k._binder((1,), 4, 3, None, host, y, o, 4096, 1024) is NotImplemented
    assert k._binder((1,), 4, 3, None, x, y, o, 2 ** 40, 1024) is NotImplemented
    assert k._binder(lambda m: (1,), 4, 3, None, x, y, o, 4096, 1024) is NotImplemented
    with pytest.raises(ValueError, match="CPU tensor"):
        k[(1,)](x, host, o, 4096, BLOCK_SIZE=1024)
    k[(1,)](odd, y, o, 4096, BLOCK_SIZE=1024)          # compiles the unaligned variant ...
    assert k.compile_count == 2
    assert k._binder((3,), 4, 3, 0x99, odd, y, o, 4096, 1024) is not NotImplemented   # ... then fast
    assert fake_cuda.fake_grid(0) == 3 and fake_cuda.fake_stream() == 0x99

    # kernel[grid] binds arguments in C as Python would, and hands everything else to the runner
    g = (6,)
    bound = k[g]
    assert type(bound).__name__ == "Bound" and k[g] is bound
    calls = fake_cuda.fake_calls()
    assert bound(x, y, o, 4096, BLOCK_SIZE=1024) is ck
    assert bound(out_ptr=o, x_ptr=x, y_ptr=y, n_elements=4096, BLOCK_SIZE=1024, stream=0x42) is ck
    assert fake_cuda.fake_calls() == calls + 2 and fake_cuda.fake_stream() == 0x42 and fake_cuda.fake_grid(0) == 6
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'BLOCK_SIZE'"):
        bound(x, y, o, 4096)
    with pytest.raises(TypeError, match="unexpected keyword argument 'BLOCK'"):
        bound(x, y, o, 4096, BLOCK=1024)
    with pytest.raises(TypeError, match="multiple values for argument 'x_ptr'"):
        bound(x, y, o, 4096, BLOCK_SIZE=1024, x_ptr=x)
    assert bound(x, y, o, 4096, BLOCK_SIZE=1024, warmup=True) is ck     # an option the C path leaves alone
    n0 = k.compile_count
    bound(x, y, o, 4096, BLOCK_SIZE=1024, num_warps=8)                  # a new key: compiled, then fast
    assert k.compile_count == n0 + 1
    calls = fake_cuda.fake_calls()
    bound(x, y, o, 4096, BLOCK_SIZE=1024, num_warps=8)
    assert k.compile_count == n0 + 1 and fake_cuda.fake_calls() == calls + 1 and fake_cuda.fake_grid(3) == 256


def test_bound_runners_are_collected(fake_cuda):
    """kernel[grid] caches its Bound, whose runner refers back to the kernel: the cycle is
    collectable (Bound takes part in the garbage collector), so dynamically made kernels do not leak."""
    import gc
    import weakref
    from compiler.runtime import native
    if native.module() is None:
        pytest.skip("the native launcher could not be built here")
    k = _fresh(add_kernel)
    b = k[(1,)]
    assert type(b).__name__ == "Bound" and gc.is_tracked(b)
    ref = weakref.ref(k)
    del k, b
    gc.collect()
    assert ref() is None


def test_launch_overhead_python_side(fake_cuda):
    """Host time of one launch with everything but the driver real (fake cuLaunchKernel)."""
    import time
    k = _fresh(add_kernel)
    fake_cuda.fake_set_nparams(4)
    x, y, o = FakeTensor(0x7F0000001000), FakeTensor(0x7F0000002000), FakeTensor(0x7F0000003000)
    k[(4,)](x, y, o, 4096, BLOCK_SIZE=1024)
    n = 20000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            k[(4,)](x, y, o, 4096, BLOCK_SIZE=1024)
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"python-side launch: {best * 1e6:.2f} us")
    assert best < 50e-6      # generous: shared CI machines; bench/launch.py measures for real


# ---------------------------------------------------------------------------------------------
# jit_from_source

GOOD_SOURCE = '''
"""A module as users write it."""
import triton
import triton.language as tl
from triton.language import constexpr
from triton import cdiv

BLOCK_DEFAULT = 128
SCALE = tl.constexpr(2)
HALF = tl.constexpr(0.5)
ANNOTATED: tl.constexpr = 3


@triton.jit
def helper(x):
    return x * SCALE * HALF


@triton.jit(do_not_specialize=["n"])
def kernel(x_ptr, n, BLOCK: constexpr = BLOCK_DEFAULT):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
'''


def test_jit_from_source_good(interpret):
    k = compiler.jit_from_source(GOOD_SOURCE, "kernel", filename="user.py")
    assert k.fn is None and k.__name__ == "kernel" and k.filename == "user.py"
    assert k.constexpr_names == ["BLOCK"] and k.defaults == {"BLOCK": 128} and k.do_not_specialize == ["n"]
    assert k.globals["triton"] is compiler and k.globals["tl"] is tl and k.globals["cdiv"] is compiler.cdiv
    assert k.globals["BLOCK_DEFAULT"] == 128 and k.globals["SCALE"] == tl.constexpr(2)
    assert GOOD_SOURCE.splitlines()[k.first_lineno - 1].startswith("def kernel(")
    x = np.arange(200, dtype=np.float32)
    k[(2,)](x, 200)
    np.testing.assert_allclose(x, np.arange(200, dtype=np.float32))   # * 2 * 0.5
    with pytest.raises(compiler.CompilationError, match="no @jit function named 'nope'"):
        compiler.jit_from_source(GOOD_SOURCE, "nope")


def test_jit_from_source_binds_annotated_constants_as_python_does(interpret):
    """`N: tl.constexpr = 3` binds a plain 3 (the annotation changes nothing, as in Python), which a
    kernel may not read (Triton's rule); `N = tl.constexpr(3)` is the constant kernels read."""
    src = GOOD_SOURCE + "\n\n@triton.jit\ndef reads_annotated(x_ptr):\n    tl.store(x_ptr, ANNOTATED)\n"
    k = compiler.jit_from_source(src, "reads_annotated", filename="user.py")
    assert k.globals["ANNOTATED"] == 3 and not isinstance(k.globals["ANNOTATED"], tl.constexpr)
    with pytest.raises(compiler.CompilationError, match="Cannot access global variable ANNOTATED") as info:
        k[(1,)](np.zeros(1, dtype=np.float32))
    assert "user.py:" in str(info.value) and "tl.store(x_ptr, ANNOTATED)" in str(info.value)


HOSTILE = {
    "import_os": "import os\nos.system('touch {marker}')\n",
    "from_import": "from os import system\n",
    "top_level_call": "open('{marker}', 'w').write('x')\n",
    "nonliteral_constant": "import triton\nX = __import__('os').system('touch {marker}')\n",
    "class": "class A:\n    x = open('{marker}', 'w')\n",
    "plain_function": "def f():\n    open('{marker}', 'w')\n",
    "if_main": "import triton\nif __name__ == '__main__':\n    open('{marker}', 'w')\n",
    "decorator_call": "import triton\n@triton.jit(debug=open('{marker}', 'w'))\ndef k(x):\n    pass\n",
    "other_decorator": "import triton\nimport functools\n@functools.lru_cache\ndef k(x):\n    pass\n",
    "dunder_attr": "import triton\n@triton.jit\ndef k(x):\n    y = x.__class__.__bases__\n",
    "dunder_name": "import triton\n@triton.jit\ndef k(x):\n    __builtins__['open']('{marker}', 'w')\n",
    "open_in_kernel": "import triton\n@triton.jit\ndef k(x):\n    open('{marker}', 'w')\n",
    "eval_in_kernel": "import triton\n@triton.jit\ndef k(x):\n    eval(\"open('{marker}', 'w')\")\n",
    "import_in_kernel": "import triton\n@triton.jit\ndef k(x):\n    import os\n",
    "runtime_attr": "import triton\n@triton.jit\ndef k(x):\n    triton.runtime.driver.ensure_context()\n",
    "tl_internal_module": "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.dtypes.np.save('{marker}', 1)\n",
    "default_call": "import triton\n@triton.jit\ndef k(x=open('{marker}', 'w')):\n    pass\n",
    "walrus": "import triton\nX = (y := 3)\n",
    "syntax_error": "def (:\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_jit_from_source_rejects_hostile(case, tmp_path):
    marker = tmp_path / "pwned"
    src = HOSTILE[case].format(marker=marker)
    with pytest.raises(compiler.CompilationError) as info:
        k = compiler.jit_from_source(src, "k", filename="evil.py")
        # (some cases only fail when compiled: they must not run anything either)
        compiler.runtime.compile.build_ir(k, {"x": "i32"}, {})
    assert "evil.py:" in str(info.value) or "error:" in str(info.value)
    assert not marker.exists()


def test_load_source_non_strict(tmp_path):
    from compiler.runtime.source import load_source
    marker = tmp_path / "pwned"
    src = (f"import torch\nimport triton\nimport triton.language as tl\nDEV = torch.device('cuda')\n"
           f"@triton.autotune(configs=[triton.Config({{'B': 16}})], key=['n'])\n@triton.jit\n"
           f"def k(x_ptr, n, B: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, B), 1.0)\n"
           f"def host():\n    open('{marker}', 'w')\n"
           f"if __name__ == '__main__':\n    host()\n")
    with pytest.raises(compiler.CompilationError):
        load_source(src, "m.py")
    ignored = []
    ks = load_source(src, "m.py", strict=False, ignored=ignored)
    assert list(ks) == ["k"] and ignored == [1, 4, 9, 11]
    assert "torch" not in ks["k"].globals and "DEV" not in ks["k"].globals and "host" not in ks["k"].globals
    assert not marker.exists()
    bad = "import triton\n@triton.jit\ndef k(x):\n    open('x', 'w')\n"
    with pytest.raises(compiler.CompilationError, match="not available inside a kernel"):
        load_source(bad, strict=False)                # kernel bodies are checked the same


def test_jit_from_source_error_names_line():
    src = "import triton\n\nx = 1\nprint('hi')\n"
    with pytest.raises(compiler.CompilationError) as info:
        compiler.jit_from_source(src, "k", filename="m.py")
    assert str(info.value).startswith("m.py:4:1: error:")
    assert "print('hi')" in str(info.value)


# ---------------------------------------------------------------------------------------------
# autotune / heuristics

def test_config():
    c = compiler.Config({"BLOCK": 128}, num_warps=8, num_stages=2)
    assert c.all_kwargs() == {"BLOCK": 128, "num_warps": 8, "num_stages": 2}
    assert "BLOCK: 128" in str(c) and "num_warps: 8" in str(c)
    assert compiler.Config.from_dict(c.to_dict()) == c
    assert compiler.Config.from_dict({"BLOCK": 128, "num_warps": 8, "num_stages": 2}) == c
    assert len({c, compiler.Config({"BLOCK": 128}, num_warps=8, num_stages=2)}) == 1


def _tuned(cache_results=True, timings=None, **kw):
    timings = timings or {}

    def bench(fn, quantiles):
        fn()
        return [timings.get(cfg_of[0], 1.0)] * 3

    cfg_of = [None]
    configs = [compiler.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 2), (128, 4), (256, 4))]

    class Recording(AT.Autotuner):
        def _bench(self, *args, config, **meta):
            cfg_of[0] = config.kwargs["BLOCK"]
            return super()._bench(*args, config=config, **meta)

    base = _fresh(dns_kernel)
    t = Recording(base, base.arg_names, configs, key=["n"], do_bench=bench, cache_results=cache_results, **kw)
    return t, configs


def test_autotune_interpret_runs_first_config_without_do_bench(interpret):
    base = _fresh(dns_kernel)
    configs = [compiler.Config({"BLOCK": b}) for b in (64, 128)]
    t = AT.Autotuner(base, base.arg_names, configs, key=["n"])
    x = np.zeros(256, np.float32)
    t[lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)](x, 256)
    assert t.best_config is configs[0] and (x == 1).all() and t.configs_timings is None


def test_autotune_interpret_benchmarks_with_the_users_do_bench(interpret):
    """As Triton's interpreter: a do_bench given to @autotune times the configs on the CPU too;
    restore_value puts the in-place buffer back after each timed run."""
    import torch
    t, configs = _tuned(timings={64: 3.0, 128: 1.0, 256: 2.0}, restore_value=["x_ptr"])
    x = torch.zeros(256)
    t[lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)](x, 256)
    assert t.best_config is configs[1] and set(t.configs_timings) == set(configs)
    assert (x == 1).all()


def test_autotune_picks_fastest_and_caches(fake_cuda):
    fake_cuda.fake_set_nparams(2)
    t, configs = _tuned(timings={64: 3.0, 128: 1.0, 256: 2.0})
    x = FakeTensor(0x7F0000001000)
    grid = lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)  # noqa: E731
    t[grid](x, 4096)
    assert t.best_config == configs[1] and t.cache[(4096, "float32")] == configs[1]
    assert fake_cuda.fake_grid(0) == 4096 // 128 and fake_cuda.fake_grid(3) == 128
    assert {c.kwargs["BLOCK"] for c in t.configs_timings} == {64, 128, 256}
    t.configs_timings = None
    t[grid](x, 4096)                                                   # cached in memory: no tuning
    assert t.configs_timings is None
    # a new tuner (new process, same kernel) finds the result on disk
    t2, _ = _tuned(timings={64: 0.1, 128: 9.0, 256: 9.0})
    t2[grid](x, 4096)
    assert t2.best_config == configs[1] and t2.configs_timings is None
    # a new key is tuned
    t2[grid](x, 8192)
    assert t2.best_config == configs[0]


def test_autotune_disk_result_follows_the_codegen_switches(fake_cuda, monkeypatch):
    """A pick stored under other code-changing switches is not reused: bench/matmul.py's run with
    pointer tiles through TMA took the picks its cp.async run had stored (fp16 1024³: 128x64x64,
    where 64x128x64 was 10% faster with TMA)."""
    fake_cuda.fake_set_nparams(2)
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "0")
    grid = lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)  # noqa: E731
    x = FakeTensor(0x7F0000001000)
    t, configs = _tuned(timings={64: 3.0, 128: 1.0, 256: 2.0})
    t[grid](x, 12288)
    assert t.best_config == configs[1]
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "1")
    t2, _ = _tuned(timings={64: 0.1, 128: 9.0, 256: 9.0})
    t2[grid](x, 12288)
    assert t2.best_config == configs[0] and t2.configs_timings is not None   # tuned again
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "0")
    t3, _ = _tuned(timings={64: 0.1, 128: 9.0, 256: 9.0})
    t3[grid](x, 12288)
    assert t3.best_config == configs[1] and t3.configs_timings is None      # the first pick, from disk


def test_autotune_prune_and_failures(fake_cuda):
    fake_cuda.fake_set_nparams(2)

    def prune(configs, nargs, **kw):
        return [c for c in configs if c.kwargs["BLOCK"] != 64]

    t, configs = _tuned(cache_results=False, timings={64: 0.1, 128: 2.0, 256: 1.0},
                        prune_configs_by={"early_config_prune": prune})
    t[(1,)](FakeTensor(0x7F0000001000), 4096)
    assert t.best_config == configs[2]


@pytest.fixture
def listeners():
    """The autotuning events, with the installed plug-ins loaded; listeners a test adds are removed."""
    from compiler import plugins
    hooks = plugins.autotuning()
    added = []

    def add(chain, fn):
        getattr(hooks, chain).add(fn)
        added.append((chain, fn))
    yield add
    for chain, fn in added:
        getattr(hooks, chain).remove(fn)


def test_autotune_before_tuning_listener_supplies_the_config(fake_cuda, listeners):
    """A before_tuning listener's config runs without tuning (the service plug-in's way in), for
    @autotune kernels and for @jit(autotune_key=[...]) kernels, which fill their meta-parameters."""
    fake_cuda.fake_set_nparams(2)
    asked = []

    def before_tuning(*, fn, key, key_args, configs, autotuner, **_):
        asked.append((fn.fingerprint, fn.__name__, key_args, autotuner))
        return compiler.Config({"BLOCK": 256}, num_warps=4, num_stages=3)
    listeners("before_tuning", before_tuning)
    missed, chosen = [], []
    listeners("launch_missed", lambda **e: missed.append(e))
    listeners("config_chosen", lambda **e: chosen.append(e))
    t, configs = _tuned(cache_results=False, timings={64: 0.1})
    t[(1,)](FakeTensor(0x7F0000001000), 4096)
    assert t.best_config == configs[2] and t.configs_timings is None   # the user's own Config object
    assert asked and asked[0][0] == t.fingerprint and asked[0][1] == "dns_kernel" and asked[0][2] == {"n": 4096}
    assert asked[0][3] is t and not missed and not chosen
    # @jit(autotune_key=[...]) asks too and fills the meta-parameters
    src = ("import triton\nimport triton.language as tl\n@triton.jit(autotune_key=['n'])\n"
           "def k(x_ptr, n, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n")
    k = compiler.jit_from_source(src, "k")
    ck = k[(1,)](FakeTensor(0x7F0000001000), 100)
    assert ck.metadata["constexprs"] == {"BLOCK": 256}
    assert asked[-1][1] == "k" and asked[-1][2] == {"n": 100} and asked[-1][3] is None


def test_autotune_events_after_a_miss(fake_cuda, listeners, tmp_path, monkeypatch):
    """No listener answers: launch_missed, then the tuning, then config_chosen with the timings;
    a second process finds the winner in the disk cache and says so (cache_hit)."""
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path))
    fake_cuda.fake_set_nparams(2)
    missed, chosen = [], []
    listeners("launch_missed", lambda **e: missed.append(e))
    listeners("config_chosen", lambda **e: chosen.append(e))
    t, configs = _tuned(timings={64: 2.0, 128: 0.5, 256: 1.0})
    t[(1,)](FakeTensor(0x7F0000001000), 4096)
    assert t.best_config == configs[1]
    assert len(missed) == 1 and missed[0]["autotuner"] is t and missed[0]["key_args"] == {"n": 4096}
    assert missed[0]["args"][1] == 4096
    (e,) = chosen
    assert e["best_config"] == configs[1] and not e["cache_hit"] and e["configs_timings"][configs[1]][0] == 0.5
    t2, _ = _tuned(timings={64: 2.0, 128: 0.5, 256: 1.0})
    t2[(1,)](FakeTensor(0x7F0000001000), 4096)
    assert chosen[-1]["cache_hit"] and chosen[-1]["best_config"] == configs[1] and chosen[-1]["autotuner"] is t2


def test_heuristics(interpret):
    base = _fresh(dns_kernel)
    h = compiler.heuristics({"BLOCK": lambda a: triton.next_power_of_2(a["n"])})(base)
    x = np.zeros(100, np.float32)
    h[(1,)](x, 100)
    assert (x == 1).all()


# ---------------------------------------------------------------------------------------------
# testing helpers and the driver

def test_assert_close_and_quantiles():
    from compiler import testing
    testing.assert_close(np.ones(4), np.ones(4) + 1e-3)
    with pytest.raises(AssertionError):
        testing.assert_close(np.ones(4), np.ones(4) + 1)
    assert testing._summarize([1.0, 2.0, 3.0, 4.0], (0.5,), "mean") == 2.5
    assert testing._summarize([1.0, 2.0, 3.0, 4.0], None, "median") == 2.0   # torch's lower median
    assert testing._summarize([1.0, 2.0, 3.0, 4.0], (0.2, 0.8), "mean") == pytest.approx([1.6, 3.4])
    assert testing._summarize([1.0, 3.0], None, "all") == [1.0, 3.0]


def test_perf_report(capsys):
    from compiler import testing

    @testing.perf_report(testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="p", line_vals=["a", "b"],
                                           line_names=["A", "B"], plot_name="t", args={"k": 10}))
    def bench(n, p, k):
        return float(n * k + (p == "b"))

    rows = bench.run(print_data=True, return_df=True)
    assert "t:" in capsys.readouterr().out
    data = [list(r.values()) for r in rows] if isinstance(rows, list) else rows.values.tolist()
    assert data == [[1, 10.0, 11.0], [2, 20.0, 21.0]]


def test_has_gpu_is_clean():
    assert driver.has_gpu() in (True, False)


@pytest.mark.gpu
def test_device_properties():
    p = compiler.runtime.driver.device_properties(0)
    assert p["sm_count"] > 0 and p["total_memory"] > 2 ** 30 and len(p["capability"]) == 2
    assert p["max_shared_memory"] >= 48 * 1024 and p["l2_size"] > 0 and p["name"]
    assert driver.default_target().startswith("sm_")


@pytest.mark.gpu
def test_gpu_vector_add_and_cache(cache_dir):
    torch = pytest.importorskip("torch")
    n = 98432
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    k = _fresh(add_kernel)
    grid = lambda m: (triton.cdiv(m["n_elements"], m["BLOCK_SIZE"]),)  # noqa: E731
    k[grid](x, y, out, n, BLOCK_SIZE=1024)
    torch.testing.assert_close(out, x + y)
    out.zero_()
    k[grid](x, y, out, n, BLOCK_SIZE=1024)
    torch.testing.assert_close(out, x + y)
    assert k.compile_count == 1
    # the public CompiledKernel.launch
    ck = compiler.compile(add_kernel, ADD_SIG, {"BLOCK_SIZE": 1024}, divisible_by_16=("x_ptr", "y_ptr", "out_ptr"))
    out.zero_()
    ck.launch((triton.cdiv(n, 1024), 1, 1), [x, y, out, n], stream=torch.cuda.current_stream().cuda_stream)
    torch.testing.assert_close(out, x + y)


@pytest.mark.gpu
def test_gpu_cpu_tensor_is_refused():
    torch = pytest.importorskip("torch")
    torch.cuda.init()
    x = torch.zeros(16)
    with pytest.raises(ValueError, match="CPU tensor"):
        _fresh(add_kernel)[(1,)](x, x, x, 16, BLOCK_SIZE=16)


@pytest.mark.gpu
def test_gpu_pinned_host_memory_is_used_in_place():
    """Pinned host memory is in the GPU's address space: a kernel reads and writes it (Triton's
    test_pointer_arguments[cpu_pinned])."""
    torch = pytest.importorskip("torch")
    torch.cuda.init()
    x = torch.arange(16, dtype=torch.float32).pin_memory()
    out = torch.full((16,), float("nan")).pin_memory()
    _fresh(add_kernel)[(1,)](x, x, out, 16, BLOCK_SIZE=16)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)


def test_pinned_host_tensors_are_accepted_for_the_gpu_but_pageable_ones_are_not():
    torch = pytest.importorskip("torch")

    class Pinned:          # a CPU tensor reporting pinned memory (no CUDA here to pin it)
        is_cuda = False

        def is_pinned(self):
            return True
    J._cpu_tensor(Pinned(), "x")
    with pytest.raises(ValueError, match="argument 'x' is a CPU tensor: .*pinned host memory"):
        J._cpu_tensor(torch.zeros(4), "x")


@pytest.mark.gpu
def test_do_bench_gpu():
    torch = pytest.importorskip("torch")
    from compiler import testing
    x = torch.rand(1 << 20, device="cuda")
    ms = testing.do_bench(lambda: x * 2)
    assert 0 < ms < 10
    q = testing.do_bench(lambda: x * 2, quantiles=(0.5, 0.2, 0.8))
    assert len(q) == 3 and q[1] <= q[0] <= q[2]
    g = testing.do_bench_cudagraph(lambda: x * 2)
    assert 0 < g < 10


@pytest.mark.gpu
def test_out_of_resources_shared_memory():
    limit = driver.device_properties(0)["max_shared_memory"]
    ptx = (".version 8.0\n.target sm_80\n.address_size 64\n.extern .shared .align 16 .b8 smem[];\n"
           ".visible .entry k()\n{\n ret;\n}\n")
    with pytest.raises(compiler.OutOfResources):
        driver.load_module(ptx, "k", shared=limit + 1024)
    lf = driver.load_module(ptx, "k", shared=64 * 1024)
    assert lf.shared == 64 * 1024


# ---------------------------------------------------------------------------------------------
# Triton's launch options

def test_triton_launch_options_num_ctas_1_and_hints_are_accepted(interpret):
    x = np.zeros(64, np.float32)
    dns_kernel[(1,)](x, 64, BLOCK=64, num_ctas=1, maxnreg=128, enable_fp_fusion=False, launch_pdl=False)
    assert (x == 1).all()


@pytest.fixture
def num_ctas_warning_unsaid(monkeypatch):
    from compiler.runtime import num_ctas
    monkeypatch.setattr(num_ctas, "_warned", False)


def test_num_ctas_above_1_runs_each_program_as_one_cta(interpret, num_ctas_warning_unsaid):
    """Triton's clusters share a program's tile: the program computes the same as one CTA."""
    x = np.zeros(64, np.float32)
    with pytest.warns(UserWarning, match="num_ctas=2: .*runs each program as one CTA"):
        dns_kernel[(1,)](x, 64, BLOCK=64, num_ctas=2)
    assert (x == 1).all()
    tuned = compiler.autotune([compiler.Config({"BLOCK": 64}, num_ctas=4)], key=["n"])(_fresh(dns_kernel))
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # said once per process
        tuned[(1,)](x, 64)
    assert (x == 2).all()


def test_num_ctas_launches_the_programs_grid(fake_cuda, num_ctas_warning_unsaid):
    k = _fresh(dns_kernel)
    with pytest.warns(UserWarning, match="num_ctas=2"):
        k[(3,)](FakeTensor(0x7F0000001000), 64, BLOCK=64, num_ctas=2)
    assert [fake_cuda.fake_grid(i) for i in range(3)] == [3, 1, 1]


def test_num_ctas_above_1_needs_sm90_as_in_triton(num_ctas_warning_unsaid):
    k = _fresh(dns_kernel)
    with pytest.raises(ValueError, match=r"num_ctas > 1 requires NVIDIA SM90\+ \(Hopper\)"):
        k.warmup(FakeTensor(0x7F0000001000), 64, BLOCK=64, grid=(1,), num_ctas=2, arch="sm80")
    with pytest.warns(UserWarning, match="num_ctas=2"):
        assert "ld.global" in k.warmup(FakeTensor(0x7F0000001000), 64, BLOCK=64, grid=(1,), num_ctas=2, arch="sm90").asm["ptx"]


@pytest.mark.parametrize("bad", [0, 3, 32, 2.5, -2])
def test_num_ctas_must_be_a_cluster_size(interpret, bad):
    with pytest.raises(ValueError, match="num_ctas must be a power of two from 1 to 16"):
        dns_kernel[(1,)](np.zeros(64, np.float32), 64, BLOCK=64, num_ctas=bad)


# ---------------------------------------------------------------------------------------------
# Tuple arguments on the GPU path (their semantics in interpret mode: test_tuples.py)

@triton.jit
def tuple_args_kernel(ptrs, n, coeffs, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(ptrs[0] + offs, mask=offs < n)
    tl.store(ptrs[1][0] + offs, x * coeffs[0] + coeffs[1], mask=offs < n)


def test_tuple_arguments_on_the_gpu_path(fake_cuda):
    """Each runtime leaf of a tuple argument is a kernel parameter `<param>.<i>...`, specialized like
    any argument; the PTX assembles; a new tuple structure or leaf specialization compiles anew."""
    from compiler import ptxas
    k = _fresh(tuple_args_kernel)
    x, out = FakeTensor(0x7F0000001000), FakeTensor(0x7F0000002000)
    fake_cuda.fake_set_nparams(5)
    ck = k[(3,)]((x, (out, None)), 1000, (2.5, 7), BLOCK=256)
    assert ck.metadata["arg_names"] == ["ptrs.0", "ptrs.1.0", "n", "coeffs.0", "coeffs.1"]
    assert ck.metadata["arg_types"] == ["*fp32", "*fp32", "i32", "fp32", "i32"]
    assert set(ck.metadata["divisible_by_16"]) == {"ptrs.0", "ptrs.1.0"}
    assert [fake_cuda.fake_param(i) for i in range(2)] == [0x7F0000001000, 0x7F0000002000]
    assert fake_cuda.fake_param(2) & 0xFFFFFFFF == 1000 and fake_cuda.fake_param(4) & 0xFFFFFFFF == 7
    assert fake_cuda.fake_grid(0) == 3 and fake_cuda.fake_calls() == 1
    ptxas.report(ck.asm["ptx"])
    k[(1,)]((x, (FakeTensor(0x7F0000003000), None)), 1000, (2.5, 7), BLOCK=256)    # same specialization
    assert k.compile_count == 1 and fake_cuda.fake_param(1) == 0x7F0000003000 and fake_cuda.fake_calls() == 2
    fake_cuda.fake_set_nparams(4)
    ck1 = k[(1,)]((x, (out, None)), 1000, (2.5, 1), BLOCK=256)                     # a leaf equal to 1
    assert k.compile_count == 2 and ck1.metadata["passed"] == ["ptrs.0", "ptrs.1.0", "n", "coeffs.0"]
    ckw = k.warmup((x, (out,)), 1000, (2.5, 7), BLOCK=256, grid=(1,))              # another structure
    assert k.compile_count == 3 and ckw.metadata["arg_names"][:2] == ["ptrs.0", "ptrs.1.0"]
    assert fake_cuda.fake_calls() == 3


def test_too_many_warps_is_a_failed_config_the_post_hook_hears_of(fake_cuda):
    fake_cuda.fake_set_nparams(2)
    errors = []
    base = _fresh(dns_kernel)
    configs = [compiler.Config({"BLOCK": 64}, num_warps=128), compiler.Config({"BLOCK": 64}, num_warps=4)]
    tuned = AT.Autotuner(base, base.arg_names, configs, key=["n"], cache_results=False,
                         post_hook=lambda nargs, exception: errors.append(exception),
                         do_bench=lambda call, quantiles: (call(), [1.0] * 3)[1])
    tuned[(1,)](FakeTensor(0x7F0000001000), 64)
    assert tuned.best_config is configs[1]
    assert isinstance(errors[0], compiler.OutOfResources) and errors[1] is None
    assert str(errors[0]).startswith("out of resource: threads, Required: 4096, Hardware limit: 1024")


@triton.jit
def _double(x):
    return x * 2


@triton.jit
def _negate(x):
    return -x


@triton.jit
def apply_kernel(x_ptr, fn, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, fn(tl.load(x_ptr + offs)))


def test_a_jit_function_argument_is_a_compile_time_value(interpret):
    """As in Triton: a @jit function passed to a parameter not marked tl.constexpr specializes the
    kernel (one compilation per function)."""
    k = _fresh(apply_kernel)
    x = np.arange(8, dtype=np.float32)
    k[(1,)](x, _double, 8)
    k[(1,)](x, _negate, 8)
    k[(1,)](x, _double, 8)
    assert (x == -np.arange(8) * 4).all() and k.compile_count == 2


def test_a_jit_function_argument_on_the_gpu_path(fake_cuda):
    fake_cuda.fake_set_nparams(1)
    k = _fresh(apply_kernel)
    ck = k[(1,)](FakeTensor(0x7F0000001000), _negate, 8)
    assert ck.metadata["arg_names"] == ["x_ptr"]
    k[(1,)](FakeTensor(0x7F0000002000), _negate, 8)
    assert k.compile_count == 1 and fake_cuda.fake_param(0) == 0x7F0000002000
    doubled = k.warmup(FakeTensor(0x7F0000001000), _double, 8, grid=(1,))
    assert k.compile_count == 2 and doubled.asm["ptx"] != ck.asm["ptx"]


@pytest.fixture
def fake_tensor_maps(monkeypatch):
    """tensor_maps.encode without a driver: each map 128 bytes whose first word is 0xC0DE0000 + its
    number (the fake cuLaunchKernel records the first 8 bytes a parameter pointer points to)."""
    from compiler.runtime import tensor_maps
    maps = []

    def encode(desc):   # (owner, address) as tensor_maps.encode gives
        maps.append((ctypes.c_uint64 * 16)(0xC0DE0000 + len(maps)))
        return maps[-1], ctypes.addressof(maps[-1])

    monkeypatch.setattr(tensor_maps, "encode", encode)
    monkeypatch.setattr(tensor_maps, "_cache", {})
    return maps


def test_descriptor_launch_wrapper_passes_what_expand_gives(fake_tensor_maps):
    """The generated wrapper reads each descriptor's parts (base address, shape, strides, map address)
    by position, a tuple's leaves included: the values expand() gives from the names."""
    from compiler.runtime import descriptors
    from compiler.tools.tensor_descriptor import TensorDescriptor
    a = TensorDescriptor(FakeTensor(0x7F0000001000), [16, 32], [32, 1], [16, 32])
    b = TensorDescriptor(FakeTensor(0x7F0000002000), [48, 64, 8], [512, 8, 1], [4, 8, 8])
    names = ["a", "descs.0", "n"]
    sig = {"a": "tensordesc<fp32[16, 32]|zero|11>", "descs.0": "tensordesc<fp32[4, 8, 8]|zero|111>", "n": "i32"}
    expanded = descriptors.expand_names(names, sig, {"a.tmap", "descs.0.tmap"})
    seen = []
    launch = descriptors.wrap_launcher(lambda *v: seen.append(v[4:]), names, expanded)
    launch(1, 1, 1, 0, a, b, 7)
    assert list(seen[0]) == descriptors.expand(expanded, {"a": a, "descs.0": b, "n": 7}, lambda t: t.data_ptr())
    assert seen[0][:5] == (0x7F0000001000, 16, 32, 32, 1) and seen[0][-1] == 7 and len(fake_tensor_maps) == 2


def test_a_tuple_of_tensor_descriptors_on_the_gpu_path(fake_cuda, fake_tensor_maps):
    """Descriptor leaves of a tuple expand into their parts (base, shapes, strides and, on sm_90,
    the CUtensorMap, passed by address) like a descriptor argument does, and the PTX assembles."""
    from compiler import ptxas
    from compiler.tools.tensor_descriptor import TensorDescriptor
    from tests.compiler.test_tuples import scale_through_descriptors
    k = _fresh(scale_through_descriptors)
    src = TensorDescriptor(FakeTensor(0x7F0000001000), [16, 32], [32, 1], [16, 32])
    dst = TensorDescriptor(FakeTensor(0x7F0000002000), [16, 32], [32, 1], [16, 32])
    fake_cuda.fake_set_nparams(12)
    for _ in range(2):   # the second launch finds both maps in the cache
        ck = k[(1,)]((src, dst), 16)
    assert ck.metadata["passed"][:7] == ["descs.0.base", "descs.0.shape0", "descs.0.shape1", "descs.0.stride0",
                                         "descs.0.stride1", "descs.0.tmap", "descs.1.base"]
    assert [fake_cuda.fake_param(i) for i in (0, 6)] == [0x7F0000001000, 0x7F0000002000]
    assert [fake_cuda.fake_param(i) & 0xFFFFFFFF for i in (1, 2)] == [16, 32] and fake_cuda.fake_param(3) == 32
    assert [fake_cuda.fake_param(i) for i in (5, 11)] == [0xC0DE0000, 0xC0DE0001] and len(fake_tensor_maps) == 2
    ptxas.report(ck.asm["ptx"])


def test_device_descriptors_take_global_scratch(fake_cuda):
    """A kernel whose device-side descriptors go through TMA gets global scratch for their maps
    (3 maps × 128 bytes a program) from triton.set_allocator's allocator at each launch, passed
    last; an explicit NullAllocator fails as in Triton."""
    from compiler.runtime import _allocation
    from tests.compiler.kernels.block_pointers import matmul_descriptor_kernel
    k = _fresh(matmul_descriptor_kernel)
    asked = []

    class Scratch:
        def data_ptr(self):
            return 0x7F00000F0000 + 256 * len(asked)

    def allocate(size, alignment, stream):
        asked.append((size, alignment, stream))
        return Scratch()

    tensors = [FakeTensor(0x7F0000001000 * (i + 1), "float16") for i in range(3)]
    fake_cuda.fake_set_nparams(7)
    triton.set_allocator(allocate)
    try:
        ck = k[(4, 3)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)
        assert ck.metadata["passed"][-1] == "$global_scratch" and ck.metadata["global_scratch_size"] == 384
        assert asked == [(4 * 3 * 384, 128, 0)] and fake_cuda.fake_param(6) == 0x7F00000F0100
        k[(2, 1, 2)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)
        assert asked[-1] == (4 * 384, 128, 0) and fake_cuda.fake_param(6) == 0x7F00000F0200
        triton.set_allocator(_allocation.NullAllocator())
        with pytest.raises(RuntimeError, match="no allocator was set"):
            k[(1,)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)
    finally:
        triton.set_allocator(None)
    assert k.compile_count == 1


def test_device_descriptors_scratch_with_num_ctas_is_tritons(fake_cuda, num_ctas_warning_unsaid):
    """num_ctas=2 asks the allocator for Triton's size (per-CTA scratch × grid × num_ctas) and lays
    it out as Triton does: program p's maps in slot p × num_ctas (its cluster's rank 0, the one CTA
    that runs it here). A compile of its own, as in Triton, where num_ctas is a compile option."""
    from compiler import ptxas
    from tests.compiler.kernels.block_pointers import matmul_descriptor_kernel
    k = _fresh(matmul_descriptor_kernel)
    asked = []

    def allocate(size, alignment, stream):
        asked.append((size, alignment, stream))
        return FakeTensor(0x7F00000F0000)

    tensors = [FakeTensor(0x7F0000001000 * (i + 1), "float16") for i in range(3)]
    fake_cuda.fake_set_nparams(7)
    triton.set_allocator(allocate)
    try:
        one = k[(4, 3)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)
        with pytest.warns(UserWarning, match="num_ctas=2"):
            two = k[(4, 3)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_ctas=2)
        k[(4, 3)](*tensors, 512, 384, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_ctas=2)
    finally:
        triton.set_allocator(None)
    assert asked == [(4 * 3 * 384, 128, 0)] + [(4 * 3 * 384 * 2, 128, 0)] * 2
    assert k.compile_count == 2 and two.metadata["num_ctas"] == 2 and "num_ctas" not in one.metadata
    assert two.metadata["global_scratch_size"] == one.metadata["global_scratch_size"] == 384   # a CTA's, as Triton's
    # the program's slot: its linear id times 3 maps (one CTA) or 6 (a cluster of two) of 128 bytes
    slot_bytes = re.compile(r"(?:mul|mad)\.lo\.s64\s+%rd\d+, %rd\d+, (384|768)[;,]")
    assert slot_bytes.findall(one.asm["ptx"]) == ["384"] and slot_bytes.findall(two.asm["ptx"]) == ["768"]
    ptxas.report(two.asm["ptx"])


@pytest.mark.parametrize("kind", ["native", "ctypes"])
def test_tensor_map_parameter_is_passed_by_address(fake_cuda, kind, monkeypatch):
    """A `tmap` parameter's value is the host address of its 128 bytes: the launcher hands that
    address to cuLaunchKernel as the parameter pointer (both launchers, both threads' buffers)."""
    import threading
    from compiler.runtime import native
    if kind == "ctypes":
        monkeypatch.setattr(native, "module", lambda: None)
    elif native.module() is None:
        pytest.skip("the native launcher could not be built here")
    lf = driver.LoadedFunction(None, 0xBEEF, 0, 0, "k", 8)
    maps = [(ctypes.c_uint64 * 16)(0xABC0 + i) for i in range(3)]
    fake_cuda.fake_set_nparams(3)
    launch = launcher.make_launcher(lf, ["p", "m", "n"], {"p": "*fp32", "m": "tmap", "n": "i32"}, 4, 0, "k")
    launch(1, 1, 1, 0, 0x1000, ctypes.addressof(maps[0]), 7)
    assert [fake_cuda.fake_param(i) for i in range(3)] == [0x1000, 0xABC0, 7]
    launch(1, 1, 1, 0, 0x1000, ctypes.addressof(maps[1]), 7)
    assert fake_cuda.fake_param(1) == 0xABC1
    t = threading.Thread(target=launch, args=(1, 1, 1, 0, 0x2000, ctypes.addressof(maps[2]), 8))
    t.start()
    t.join()
    assert [fake_cuda.fake_param(i) for i in range(3)] == [0x2000, 0xABC2, 8]


def test_compiled_kernel_launch_allocates_global_scratch(fake_cuda):
    """`compiled[grid](*args)` of a kernel with device-side descriptors: the scratch is not an
    argument; the checked launch allocates it and passes it last."""
    from tests.compiler.kernels.block_pointers import matmul_descriptor_kernel
    ck = triton.compile(matmul_descriptor_kernel, signature=dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32",
                                                                 N="i32", K="i32"),
                        constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, target="sm_90",
                        divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"))
    asked = []

    def allocate(size, alignment, stream):
        asked.append(size)
        return FakeTensor(0x7F00000A0000)

    fake_cuda.fake_set_nparams(7)
    triton.set_allocator(allocate)
    try:
        ck[(2, 2)](0x7F0000001000, 0x7F0000002000, 0x7F0000003000, 256, 256, 64)
    finally:
        triton.set_allocator(None)
    assert asked == [4 * 3 * 128] and fake_cuda.fake_param(6) == 0x7F00000A0000
    assert [fake_cuda.fake_param(i) for i in range(3)] == [0x7F0000001000, 0x7F0000002000, 0x7F0000003000]


# ---- @jit(repr=...): the kernel's name per specialization ---------------------------------------

def _typed_name(spec):
    ones = "_".join(k for k, v in spec.constants.items() if v == 1)
    return f"k_{spec.signature['value']}_{ones}"


@triton.jit(repr=_typed_name)
def _named_by_repr(value, is_one, X):
    pass


@pytest.mark.parametrize("value,ty", [(-1, "i32"), (2**40, "i64"), (2**64 - 1, "u64")])
def test_repr_names_the_compiled_kernel(value, ty):
    """Triton's repr gets the specialization (types, with the integers specialized to 1 among the
    constants); its answer is the kernel's name in the PTX and in the compile cache key."""
    sig, cx, div16, eq1, _ = _named_by_repr.specialize((value, 1, np.zeros(4, np.float32)), interpret=True)
    ck = C.compile_jit(_named_by_repr, sig, cx, target="sm_90", divisible_by_16=div16, equal_to_1=eq1)
    assert ck.name == f"k_{ty}_is_one" and f".entry {ck.name}(" in ck.asm["ptx"]
    other = C.cache_key(_named_by_repr, sig, cx, 4, 3, "sm_90", div16, eq1)
    plain = triton.jit(_named_by_repr.fn)
    assert C.cache_key(plain, sig, cx, 4, 3, "sm_90", div16, eq1) != other


def test_repr_must_give_an_identifier():
    @triton.jit(repr=lambda spec: "not a name")
    def kernel(X):
        pass

    with pytest.raises(ValueError, match="repr=.*gave 'not a name': a kernel name must be an identifier"):
        C.compile(kernel, {"X": "*fp32"}, target="sm_90")


def test_gpu_path_parameters_named_like_builtins(fake_cuda):
    """Parameters may be named `type`, `len`, `int`... (Triton's test_call has `type`): the runner's
    own calls do not go through those names (they did: `type(ptr)` called the string "inline", the
    launch raised, and a test that caught the exception saw unchanged data)."""
    src = ("import triton\nimport triton.language as tl\n@triton.jit\n"
           "def k(x_ptr, len, int, type: tl.constexpr, tuple: tl.constexpr, callable: tl.constexpr):\n"
           "    tl.store(x_ptr + tl.arange(0, 16), len + int)\n")
    kern = compiler.jit_from_source(src, "k")
    fake_cuda.fake_set_nparams(3)
    kern[lambda meta: (meta["len"],)](FakeTensor(0x7F0000001000), 3, 5, "inline", 2, 4)
    assert fake_cuda.fake_calls() == 1 and [fake_cuda.fake_grid(i) for i in range(3)] == [3, 1, 1]
    assert fake_cuda.fake_param(1) & 0xFFFFFFFF == 3 and fake_cuda.fake_param(2) & 0xFFFFFFFF == 5


def test_warmup_takes_torch_dtypes_for_tensors():
    """Triton's warmup(torch.float32, ...): a dtype stands for a tensor of it (aligned)."""
    torch = pytest.importorskip("torch")
    ck = _fresh(add_kernel).warmup(torch.float16, torch.float16, torch.float32, 1024, BLOCK_SIZE=256, grid=(1,))
    assert ck.metadata["arg_types"][:3] == ["*fp16", "*fp16", "*fp32"]
    assert set(ck.metadata["divisible_by_16"]) >= {"x_ptr", "y_ptr", "out_ptr"}


@triton.jit
def _mul_add(data):
    ptrs = data + tl.arange(0, 128)
    tl.store(ptrs, tl.load(ptrs) * 1.5 + 1.0)


def test_launch_compile_options_enable_fp_fusion_and_maxnreg():
    """Triton's per-launch compile options: enable_fp_fusion=False keeps a*b+c unfused (overriding
    the knob), maxnreg gives the kernel's .maxnreg; each is a compile of its own."""
    torch = pytest.importorskip("torch")
    import re
    k = _fresh(_mul_add)
    fma = re.compile(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32")
    assert fma.search(k.warmup(torch.float32, grid=(1,)).asm["ptx"])
    unfused = k.warmup(torch.float32, grid=(1,), enable_fp_fusion=False)
    assert not fma.search(unfused.asm["ptx"]) and "mul.rn.f32" in unfused.asm["ptx"]
    capped = k.warmup(torch.float32, grid=(1,), maxnreg=40)
    assert re.search(r"\.visible \.entry [^{;]*\.maxnreg 40", capped.asm["ptx"]) and fma.search(capped.asm["ptx"])
    assert len({unfused.metadata["cache_key"], capped.metadata["cache_key"],
                k.warmup(torch.float32, grid=(1,)).metadata["cache_key"]}) == 3
    with pytest.raises(ValueError, match="maxnreg must be an int of at least 16"):
        k.warmup(torch.float32, grid=(1,), maxnreg=4)
    src = triton.ASTSource(fn=_mul_add, signature={"data": "*fp32"}, constexprs={})
    assert not fma.search(triton.compile(src, target="sm_90", options={"enable_fp_fusion": False}).asm["ptx"])


def test_gpu_path_launch_with_compile_options(fake_cuda):
    k = _fresh(add_kernel)
    x = FakeTensor(0x7F0000001000)
    fake_cuda.fake_set_nparams(4)
    ck = k[(2,)](x, x, x, 1024, BLOCK_SIZE=256, maxnreg=64)
    assert fake_cuda.fake_calls() == 1 and ".maxnreg 64" in ck.asm["ptx"]
    k[(2,)](x, x, x, 1024, BLOCK_SIZE=256, maxnreg=64)
    assert fake_cuda.fake_calls() == 2 and k.compile_count == 1
    assert ".maxnreg" not in k[(2,)](x, x, x, 1024, BLOCK_SIZE=256).asm["ptx"] and k.compile_count == 2


@pytest.mark.gpu
def test_gpu_enable_fp_fusion_false_rounds_twice():
    """Unfused, x * 1.5 + 1.0 is two float32 roundings, bit for bit what torch computes on the CPU."""
    torch = pytest.importorskip("torch")
    x = torch.randn(128, generator=torch.Generator().manual_seed(0)) * 1e3
    data = x.cuda()
    _fresh(_mul_add)[(1,)](data, enable_fp_fusion=False, maxnreg=32)
    assert torch.equal(data.cpu(), x * 1.5 + 1.0)


def test_arch_option_and_override_arch_knob_pick_the_target(monkeypatch):
    """Triton's warmup(..., arch="sm80") and TRITON_OVERRIDE_ARCH compile for another GPU."""
    torch = pytest.importorskip("torch")
    from compiler import knobs
    k = _fresh(add_kernel)
    for arch, target in (("sm80", "sm_80"), ("sm_100a", "sm_100a"), (90, "sm_90")):
        ck = k.warmup(torch.float32, torch.float32, torch.float32, 1024, BLOCK_SIZE=256, grid=(1,), arch=arch)
        assert ck.metadata["target"] == target and f".target {target}\n" in ck.asm["ptx"]
    monkeypatch.setenv("TRITON_OVERRIDE_ARCH", "sm80")
    assert knobs.runtime.override_arch == "sm80"
    assert k.warmup(torch.float32, torch.float32, torch.float32, 1024, BLOCK_SIZE=256, grid=(1,)).metadata["target"] == "sm_80"
    with pytest.raises(ValueError, match="arch='gfx942': blocktune compiles for NVIDIA GPUs"):
        k.warmup(torch.float32, torch.float32, torch.float32, 1024, BLOCK_SIZE=256, grid=(1,), arch="gfx942")
