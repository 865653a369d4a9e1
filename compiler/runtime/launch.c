/* The native kernel launcher: one `Launcher` object per (compiled kernel, device, argument list).

   Calling it as `launcher(g0, g1, g2, stream, *values)` packs the kernel's parameters into an
   8-byte slot each, on the C stack, and calls `cuLaunchKernel` (its address is handed over by
   Python, so this file needs no CUDA headers and links against nothing but Python). It is the
   same contract as the ctypes launcher in launcher.py, minus ctypes' per-call argument
   conversion: a Python vectorcall straight into C.

   Parameter kinds (one char each):
     q  signed integers (i1 … i64), sign-extended to 8 bytes (the kernel reads the low bytes)
     Q  pointers and unsigned 64-bit integers
     f  fp32          d  fp64
     m  a by-value parameter whose bytes live elsewhere (a TMA descriptor's CUtensorMap): the
        value is the host address of its bytes, passed to cuLaunchKernel as the parameter pointer
   A value that does not convert calls `on_bad(index, value)`, which raises a readable error; a
   non-zero CUresult calls `on_error(code, g0, g1, g2, stream, values)` (retry or raise). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 128

typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, void *stream, void **params, void **extra);

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    launch_fn launch;
    void *func;
    unsigned block_x;
    unsigned shared;
    Py_ssize_t n_call;
    Py_ssize_t n_params;
    Py_ssize_t pos[MAX_PARAMS];
    char kind[MAX_PARAMS];
    PyObject *on_error;
    PyObject *on_bad;
} Launcher;

static int grid_dim(PyObject *o, unsigned *out) {
    unsigned long v;
    if (PyLong_CheckExact(o)) {
        v = PyLong_AsUnsignedLong(o);
    } else {
        PyObject *i = PyNumber_Index(o);
        if (i == NULL)
            return -1;
        v = PyLong_AsUnsignedLong(i);
        Py_DECREF(i);
    }
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    if (v > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "grid dimension does not fit in 32 bits");
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int stream_handle(PyObject *o, void **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (PyLong_Check(o)) {
        *out = PyLong_AsVoidPtr(o);
        return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
    }
    PyObject *h = PyObject_GetAttrString(o, "cuda_stream");   /* a torch.cuda.Stream */
    if (h == NULL)
        return -1;
    *out = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
}

static int pack(char kind, PyObject *v, uint64_t *slot) {
    switch (kind) {
    case 'q': {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred())
            return -1;
        memcpy(slot, &x, 8);
        return 0;
    }
    case 'Q':
    case 'm': {
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *slot = x;
        return 0;
    }
    case 'f': {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        float f = (float)d;
        *slot = 0;
        memcpy(slot, &f, 4);
        return 0;
    }
    case 'd': {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        memcpy(slot, &d, 8);
        return 0;
    }
    }
    PyErr_Format(PyExc_ValueError, "unknown parameter kind '%c'", kind);
    return -1;
}

static PyObject *launcher_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launcher *self = (Launcher *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_SetString(PyExc_TypeError, "launcher takes no keyword arguments");
        return NULL;
    }
    if (nargs != 4 + self->n_call) {
        PyErr_Format(PyExc_TypeError, "launcher takes %zd arguments (%zd given)", 4 + self->n_call, nargs);
        return NULL;
    }
    unsigned g[3];
    for (int i = 0; i < 3; i++)
        if (grid_dim(args[i], &g[i]) < 0)
            return NULL;
    void *stream;
    if (stream_handle(args[3], &stream) < 0)
        return NULL;
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    for (Py_ssize_t i = 0; i < self->n_params; i++) {
        PyObject *v = args[4 + self->pos[i]];
        if (pack(self->kind[i], v, &slots[i]) < 0) {
            PyErr_Clear();
            PyObject *r = PyObject_CallFunction(self->on_bad, "nO", i, v);
            Py_XDECREF(r);
            if (r != NULL)   /* on_bad must raise */
                PyErr_SetString(PyExc_ValueError, "kernel argument does not fit its parameter type");
            return NULL;
        }
        params[i] = self->kind[i] == 'm' ? (void *)(uintptr_t)slots[i] : (void *)&slots[i];
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = self->launch(self->func, g[0], g[1], g[2], self->block_x, 1, 1, self->shared, stream, params, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyObject *values = PyTuple_New(self->n_call);
        if (values == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < self->n_call; i++) {
            Py_INCREF(args[4 + i]);
            PyTuple_SET_ITEM(values, i, args[4 + i]);
        }
        PyObject *r = PyObject_CallFunction(self->on_error, "iOOOOO", rc, args[0], args[1], args[2], args[3], values);
        Py_DECREF(values);
        return r;
    }
    Py_RETURN_NONE;
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    unsigned long long fn_addr, func;
    unsigned block_x, shared;
    Py_ssize_t n_call;
    PyObject *positions, *on_error, *on_bad;
    const char *kinds;
    Py_ssize_t n_kinds;
    static char *names[] = {"launch_fn", "func", "block_x", "shared", "n_call", "positions", "kinds", "on_error",
                            "on_bad", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KKIInO!s#OO", names, &fn_addr, &func, &block_x, &shared, &n_call,
                                     &PyTuple_Type, &positions, &kinds, &n_kinds, &on_error, &on_bad))
        return NULL;
    if (PyTuple_GET_SIZE(positions) != n_kinds || n_kinds > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "positions and kinds must have the same length (at most %d)", MAX_PARAMS);
        return NULL;
    }
    if (!PyCallable_Check(on_error) || !PyCallable_Check(on_bad)) {
        PyErr_SetString(PyExc_TypeError, "on_error and on_bad must be callable");
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = launcher_vectorcall;
    self->launch = (launch_fn)(uintptr_t)fn_addr;
    self->func = (void *)(uintptr_t)func;
    self->block_x = block_x;
    self->shared = shared;
    self->n_call = n_call;
    self->n_params = n_kinds;
    for (Py_ssize_t i = 0; i < n_kinds; i++) {
        Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, i));
        if (p < 0 || p >= n_call) {
            Py_DECREF(self);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "parameter position out of range");
            return NULL;
        }
        char k = kinds[i];
        if (k != 'q' && k != 'Q' && k != 'f' && k != 'd' && k != 'm') {
            Py_DECREF(self);
            PyErr_Format(PyExc_ValueError, "unknown parameter kind '%c'", k);
            return NULL;
        }
        self->pos[i] = p;
        self->kind[i] = k;
    }
    Py_INCREF(on_error);
    self->on_error = on_error;
    Py_INCREF(on_bad);
    self->on_bad = on_bad;
    return (PyObject *)self;
}

static void launcher_dealloc(Launcher *self) {
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->on_bad);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blocktune_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_doc = "launcher(g0, g1, g2, stream, *values): cuLaunchKernel with the values packed",
};

/* ---- Binder: the generated runner's fast path ------------------------------------------------

   `binder(grid, num_warps, num_stages, stream, *args)` with `args` one value per kernel parameter
   (defaults already filled in by the Python runner) does what the runner's Python body does for
   the common case — exact torch tensors, ints within int32, floats — in C: builds the
   specialization key (dtype and 16-byte alignment per tensor; 1 / 'i32' and divisibility by 16
   per int; the constexpr values; num_warps, num_stages, device), finds the compiled kernel's
   launcher in the runner's dict and launches it. Anything else — another argument type, a key
   not compiled yet, a grid that is not a tuple of ints — returns NotImplemented and the Python
   body takes over (it also gives the readable errors). Returns the CompiledKernel.

   spec chars, one per parameter: 'c' constexpr, 's' runtime (specialized), 'n' runtime
   (do_not_specialize). `ns` is the runners' globals dict: _Tensor, _get_device, _get_stream. */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *launchers;
    PyObject *ns;
    Py_ssize_t n_args;
    Py_ssize_t n_runtime;
    Py_ssize_t n_const;
    char spec[MAX_PARAMS];
    /* for Bound (kernel[grid] objects): parameter names, defaults (`nodefault` where none) */
    PyObject *names;
    PyObject *defaults;
    PyObject *nodefault;
} Binder;

/* The interpret-mode variables (compiler.knobs.runtime.INTERPRET_VARS, set once by native.py).
   Read with the C library's getenv: os.environ's assignments and deletions go through
   putenv/unsetenv, so this sees what Python sees, at a fraction of os.environ's cost. */
static char *interpret_vars[2];

static int interpret_var_set(void) {
    for (int i = 0; i < 2; i++)
        if (interpret_vars[i] != NULL && getenv(interpret_vars[i]) != NULL)
            return 1;
    return 0;
}

static PyObject *s_data_ptr, *s_is_cuda, *s_dtype, *s_i32, *s_fp32, *k_tensor, *k_get_device, *k_get_stream;
static PyObject *s_num_warps, *s_num_stages, *s_stream, *i_4, *i_3;

/* args: grid, num_warps, num_stages, stream, then one value per parameter */
static PyObject *binder_run(Binder *self, PyObject *const *args) {
    PyObject *grid = args[0];
    if (!PyTuple_CheckExact(grid))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t ng = PyTuple_GET_SIZE(grid);
    if (ng < 1 || ng > 3)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *tensor_type = PyDict_GetItemWithError(self->ns, k_tensor);
    if (tensor_type == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_NotImplemented);

    Py_ssize_t klen = 2 * self->n_runtime + self->n_const + 3;
    PyObject *key = PyTuple_New(klen);
    if (key == NULL)
        return NULL;
    PyObject *values[MAX_PARAMS];        /* launch values of the runtime parameters (new refs) */
    Py_ssize_t nv = 0, kr = 0, kc = 2 * self->n_runtime;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < self->n_args; i++) {
        PyObject *v = args[4 + i];
        char sp = self->spec[i];
        if (sp == 'c') {
            PyTuple_SET_ITEM(key, kc++, Py_NewRef(v));
            continue;
        }
        PyObject *kpart, *aligned, *val;
        if ((PyObject *)Py_TYPE(v) == tensor_type) {
            PyObject *is_cuda = PyObject_GetAttr(v, s_is_cuda);
            if (is_cuda == NULL)
                goto fail;
            Py_DECREF(is_cuda);
            if (is_cuda != Py_True)
                goto fallback;                  /* the Python body raises the readable error */
            val = PyObject_CallMethodNoArgs(v, s_data_ptr);
            if (val == NULL)
                goto fail;
            unsigned long long ptr = PyLong_AsUnsignedLongLong(val);
            if (ptr == (unsigned long long)-1 && PyErr_Occurred()) {
                Py_DECREF(val);
                goto fail;
            }
            kpart = PyObject_GetAttr(v, s_dtype);
            if (kpart == NULL) {
                Py_DECREF(val);
                goto fail;
            }
            aligned = (ptr & 15) ? Py_False : Py_True;
        } else if (PyLong_CheckExact(v)) {
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || x < -2147483648LL || x > 2147483647LL)
                goto fallback;                  /* i64 / u64: the Python body */
            if (sp == 's' && x == 1)
                kpart = PyLong_FromLong(1);
            else
                kpart = Py_NewRef(s_i32);
            aligned = (sp == 's' && !(x & 15)) ? Py_True : Py_False;
            val = Py_NewRef(v);
        } else if (PyFloat_CheckExact(v)) {
            kpart = Py_NewRef(s_fp32);
            aligned = Py_False;
            val = Py_NewRef(v);
        } else {
            goto fallback;
        }
        PyTuple_SET_ITEM(key, kr++, kpart);
        PyTuple_SET_ITEM(key, kr++, Py_NewRef(aligned));
        values[nv++] = val;
    }
    {
        PyObject *get_device = PyDict_GetItemWithError(self->ns, k_get_device);
        PyObject *get_stream = PyDict_GetItemWithError(self->ns, k_get_stream);
        if (get_device == NULL || get_stream == NULL) {
            if (PyErr_Occurred())
                goto fail;
            goto fallback;
        }
        PyObject *dev = PyObject_CallNoArgs(get_device);
        if (dev == NULL)
            goto fail;
        PyTuple_SET_ITEM(key, kc++, Py_NewRef(args[1]));
        PyTuple_SET_ITEM(key, kc++, Py_NewRef(args[2]));
        PyTuple_SET_ITEM(key, kc++, dev);
        PyObject *entry = PyDict_GetItemWithError(self->launchers, key);   /* borrowed */
        if (entry == NULL) {
            if (PyErr_Occurred())
                goto fail;
            goto fallback;                      /* not compiled for this key yet */
        }
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 2)
            goto fallback;
        Py_INCREF(entry);
        PyObject *stream = args[3];
        Py_INCREF(stream);
        if (stream == Py_None) {
            Py_DECREF(stream);
            stream = PyObject_CallOneArg(get_stream, dev);
            if (stream == NULL) {
                Py_DECREF(entry);
                goto fail;
            }
        }
        PyObject *call[4 + MAX_PARAMS];
        int launch = 1;
        for (Py_ssize_t g = 0; g < 3; g++) {
            PyObject *d = g < ng ? PyTuple_GET_ITEM(grid, g) : NULL;
            if (d != NULL && !PyLong_CheckExact(d)) {
                Py_DECREF(stream);
                Py_DECREF(entry);
                goto fallback;
            }
            if (d != NULL && PyLong_AsLong(d) <= 0)
                launch = 0;
        }
        if (launch) {
            PyObject *one = PyLong_FromLong(1);
            call[0] = PyTuple_GET_ITEM(grid, 0);
            call[1] = ng > 1 ? PyTuple_GET_ITEM(grid, 1) : one;
            call[2] = ng > 2 ? PyTuple_GET_ITEM(grid, 2) : one;
            call[3] = stream;
            for (Py_ssize_t j = 0; j < nv; j++)
                call[4 + j] = values[j];
            PyObject *r = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), call, 4 + nv, NULL);
            Py_DECREF(one);
            if (r == NULL) {
                Py_DECREF(stream);
                Py_DECREF(entry);
                goto fail;
            }
            Py_DECREF(r);
        }
        Py_DECREF(stream);
        result = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
        Py_DECREF(entry);
        goto done;
    }
fallback:
    result = Py_NewRef(Py_NotImplemented);
    goto done;
fail:
    result = NULL;
done:
    for (Py_ssize_t j = 0; j < nv; j++)
        Py_DECREF(values[j]);
    /* unfilled slots of a key abandoned half-way are NULL, which tuple dealloc skips */
    Py_DECREF(key);
    return result;
}

static PyObject *binder_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Binder *self = (Binder *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) || nargs != 4 + self->n_args)
        Py_RETURN_NOTIMPLEMENTED;
    return binder_run(self, args);
}

/* ---- Bound: `kernel[grid]` ---------------------------------------------------------------------

   Calling it binds the arguments to the kernel's parameters the way Python would (positional,
   then by keyword, then defaults; num_warps / num_stages / stream as options) and runs the
   Binder; whatever it does not handle — other keywords (warmup, Triton's launch options), a
   missing argument, interpret mode, NotImplemented from the Binder — goes to the Python runner
   as `runner(grid, *args, **kwargs)`, which also produces Python's own error messages. */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Binder *binder;
    PyObject *grid;
    PyObject *runner;
} Bound;

static PyObject *bound_fallback(Bound *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[16];
    PyObject **call = small;
    if (1 + nargs + nkw > 16) {
        call = PyMem_Malloc(sizeof(PyObject *) * (1 + nargs + nkw));
        if (call == NULL)
            return PyErr_NoMemory();
    }
    call[0] = self->grid;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++)
        call[1 + i] = args[i];
    PyObject *r = PyObject_Vectorcall(self->runner, call, 1 + nargs, kwnames);
    if (call != small)
        PyMem_Free(call);
    return r;
}

static int same_name(PyObject *a, PyObject *b) {
    return a == b || (PyUnicode_Check(a) && PyUnicode_Compare(a, b) == 0);
}

static PyObject *bound_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Bound *self = (Bound *)self_;
    Binder *bd = self->binder;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t n = bd->n_args;
    if (nargs > n)
        return bound_fallback(self, args, nargsf, kwnames);
    PyObject *call[4 + MAX_PARAMS];
    PyObject **vals = call + 4;
    for (Py_ssize_t i = 0; i < n; i++)
        vals[i] = i < nargs ? args[i] : NULL;
    call[0] = self->grid;
    call[1] = i_4;
    call[2] = i_3;
    call[3] = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, j);
        PyObject *v = args[nargs + j];
        if (same_name(name, s_num_warps)) {
            call[1] = v;
            continue;
        }
        if (same_name(name, s_num_stages)) {
            call[2] = v;
            continue;
        }
        if (same_name(name, s_stream)) {
            call[3] = v;
            continue;
        }
        Py_ssize_t i = 0;
        while (i < n && PyTuple_GET_ITEM(bd->names, i) != name)   /* interned: pointers first */
            i++;
        if (i == n) {
            i = 0;
            while (i < n && !same_name(PyTuple_GET_ITEM(bd->names, i), name))
                i++;
        }
        if (i == n || vals[i] != NULL)            /* another option, unknown or given twice */
            return bound_fallback(self, args, nargsf, kwnames);
        vals[i] = v;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (vals[i] == NULL) {
            PyObject *d = PyTuple_GET_ITEM(bd->defaults, i);
            if (d == bd->nodefault)
                return bound_fallback(self, args, nargsf, kwnames);
            vals[i] = d;
        }
    }
    if (interpret_var_set())                      /* maybe interpret mode: the Python runner decides */
        return bound_fallback(self, args, nargsf, kwnames);
    PyObject *r = binder_run(bd, call);
    if (r != Py_NotImplemented)
        return r;
    Py_DECREF(r);
    return bound_fallback(self, args, nargsf, kwnames);
}

/* A Bound is cached on its JITFunction (the last grid) and its runner refers back to the
   JITFunction: a cycle, so Bound takes part in garbage collection. */
static int bound_traverse(Bound *self, visitproc visit, void *arg) {
    Py_VISIT(self->binder);
    Py_VISIT(self->grid);
    Py_VISIT(self->runner);
    return 0;
}

static int bound_clear(Bound *self) {
    Py_CLEAR(self->binder);
    Py_CLEAR(self->grid);
    Py_CLEAR(self->runner);
    return 0;
}

static void bound_dealloc(Bound *self) {
    PyObject_GC_UnTrack(self);
    bound_clear(self);
    PyObject_GC_Del(self);
}

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blocktune_launch.Bound",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_doc = "kernel[grid]: call with the kernel's arguments (and num_warps=, num_stages=, stream=)",
};

static PyObject *binder_bind(PyObject *self_, PyObject *const *args, Py_ssize_t nargs) {
    Binder *self = (Binder *)self_;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind(grid, runner)");
        return NULL;
    }
    if (self->names == NULL) {
        PyErr_SetString(PyExc_ValueError, "this Binder was made without names/defaults");
        return NULL;
    }
    Bound *b = PyObject_GC_New(Bound, &BoundType);
    if (b == NULL)
        return NULL;
    b->vectorcall = bound_vectorcall;
    b->binder = (Binder *)Py_NewRef(self_);
    b->grid = Py_NewRef(args[0]);
    b->runner = Py_NewRef(args[1]);
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static PyMethodDef binder_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))binder_bind, METH_FASTCALL,
     "bind(grid, runner) -> the object `kernel[grid]` returns"},
    {NULL, NULL, 0, NULL},
};

static PyObject *binder_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *launchers, *ns, *pnames = NULL, *defaults = NULL, *nodefault = NULL;
    const char *spec;
    Py_ssize_t n;
    static char *names[] = {"launchers", "ns", "spec", "names", "defaults", "nodefault", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!s#|O!O!O", names, &PyDict_Type, &launchers, &PyDict_Type,
                                     &ns, &spec, &n, &PyTuple_Type, &pnames, &PyTuple_Type, &defaults, &nodefault))
        return NULL;
    if (pnames != NULL && (defaults == NULL || nodefault == NULL || PyTuple_GET_SIZE(pnames) != n ||
                           PyTuple_GET_SIZE(defaults) != n)) {
        PyErr_SetString(PyExc_ValueError, "names, defaults and nodefault go together (one name and one default "
                                          "per spec char)");
        return NULL;
    }
    if (n > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "at most %d kernel parameters", MAX_PARAMS);
        return NULL;
    }
    Binder *self = (Binder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = binder_vectorcall;
    self->n_args = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = spec[i];
        if (c != 'c' && c != 's' && c != 'n') {
            Py_DECREF(self);
            PyErr_Format(PyExc_ValueError, "unknown spec char '%c'", c);
            return NULL;
        }
        self->spec[i] = c;
        if (c == 'c')
            self->n_const++;
        else
            self->n_runtime++;
    }
    self->launchers = Py_NewRef(launchers);
    self->ns = Py_NewRef(ns);
    if (pnames != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!PyUnicode_Check(PyTuple_GET_ITEM(pnames, i))) {
                Py_DECREF(self);
                PyErr_SetString(PyExc_TypeError, "names must be strings");
                return NULL;
            }
        }
        self->names = Py_NewRef(pnames);
        self->defaults = Py_NewRef(defaults);
        self->nodefault = Py_NewRef(nodefault);
    }
    return (PyObject *)self;
}

static void binder_dealloc(Binder *self) {
    Py_XDECREF(self->launchers);
    Py_XDECREF(self->ns);
    Py_XDECREF(self->names);
    Py_XDECREF(self->defaults);
    Py_XDECREF(self->nodefault);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject BinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "blocktune_launch.Binder",
    .tp_basicsize = sizeof(Binder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Binder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = binder_new,
    .tp_dealloc = (destructor)binder_dealloc,
    .tp_methods = binder_methods,
    .tp_doc = "binder(grid, num_warps, num_stages, stream, *args): the runner's fast path, or NotImplemented",
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name) {
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

static PyObject *set_interpret_vars(PyObject *m, PyObject *args) {
    const char *a, *b;
    if (!PyArg_ParseTuple(args, "ss", &a, &b))
        return NULL;
    for (int i = 0; i < 2; i++) {
        char *copy = strdup(i ? b : a);
        if (copy == NULL)
            return PyErr_NoMemory();
        free(interpret_vars[i]);
        interpret_vars[i] = copy;
    }
    Py_RETURN_NONE;
}

static PyObject *interpret_var_is_set(PyObject *m, PyObject *unused) {
    return PyBool_FromLong(interpret_var_set());
}

/* encode_tiled(fn, dtype, address, dims, strides, box, swizzle, promotion, fill) -> (storage, map address) or
   (None, CUresult): cuTensorMapEncodeTiled (its address `fn`, from libcuda, as the launchers get cuLaunchKernel's)
   into a new bytearray's 64-byte-aligned 128 bytes. dims and box are tuples innermost first (rank 1-5),
   strides the rank-1 byte strides of the outer dims; element strides 1, no interleave. The launchers pass
   the map address as an 'm' parameter; the caller keeps `storage` alive while it may be launched. */
typedef int (*encode_tiled_fn)(void *map, int dtype, unsigned rank, void *address, const uint64_t *dims,
                               const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                               int interleave, int swizzle, int promotion, int fill);

static int u64_items(PyObject *seq, Py_ssize_t n, uint64_t *out) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "encode_tiled: expected a tuple of %zd ints", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(seq, i));
        if (out[i] == (uint64_t)-1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *encode_tiled(PyObject *m, PyObject *args) {
    unsigned long long fn, address;
    int dtype, swizzle, promotion, fill;
    PyObject *dims, *strides, *box;
    if (!PyArg_ParseTuple(args, "KiKOOOiii", &fn, &dtype, &address, &dims, &strides, &box, &swizzle, &promotion,
                          &fill))
        return NULL;
    Py_ssize_t rank = PyTuple_Check(dims) ? PyTuple_GET_SIZE(dims) : 0;
    if (rank < 1 || rank > 5) {
        PyErr_SetString(PyExc_ValueError, "encode_tiled: rank must be 1 to 5");
        return NULL;
    }
    uint64_t d[5], st[5] = {0}, b64[5];
    uint32_t b[5], ones[5] = {1, 1, 1, 1, 1};
    if (u64_items(dims, rank, d) < 0 || u64_items(strides, rank - 1, st) < 0 || u64_items(box, rank, b64) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < rank; i++)
        b[i] = (uint32_t)b64[i];
    PyObject *storage = PyByteArray_FromStringAndSize(NULL, 128 + 64);
    if (storage == NULL)
        return NULL;
    char *map = (char *)(((uintptr_t)PyByteArray_AS_STRING(storage) + 63) & ~(uintptr_t)63);
    memset(map, 0, 128);
    int r = ((encode_tiled_fn)(uintptr_t)fn)(map, dtype, (unsigned)rank, (void *)(uintptr_t)address, d, st, b, ones,
                                             0, swizzle, promotion, fill);
    if (r != 0) {
        Py_DECREF(storage);
        return Py_BuildValue("(Oi)", Py_None, r);
    }
    return Py_BuildValue("(NK)", storage, (unsigned long long)(uintptr_t)map);
}

static PyMethodDef module_methods[] = {
    {"encode_tiled", encode_tiled, METH_VARARGS,
     "encode_tiled(fn, dtype, address, dims, strides, box, swizzle, promotion, fill) -> (storage, map address) "
     "or (None, CUresult): cuTensorMapEncodeTiled into 64-byte-aligned storage"},
    {"set_interpret_vars", set_interpret_vars, METH_VARARGS,
     "set_interpret_vars(a, b): the names of the interpret-mode environment variables"},
    {"interpret_var_is_set", interpret_var_is_set, METH_NOARGS,
     "interpret_var_is_set() -> whether either interpret-mode variable is in the environment (any value)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "blocktune_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_blocktune_launch(void) {
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_is_cuda = PyUnicode_InternFromString("is_cuda");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_i32 = PyUnicode_InternFromString("i32");
    s_fp32 = PyUnicode_InternFromString("fp32");
    k_tensor = PyUnicode_InternFromString("_Tensor");
    k_get_device = PyUnicode_InternFromString("_get_device");
    k_get_stream = PyUnicode_InternFromString("_get_stream");
    s_num_warps = PyUnicode_InternFromString("num_warps");
    s_num_stages = PyUnicode_InternFromString("num_stages");
    s_stream = PyUnicode_InternFromString("stream");
    i_4 = PyLong_FromLong(4);
    i_3 = PyLong_FromLong(3);
    if (!s_data_ptr || !s_is_cuda || !s_dtype || !s_i32 || !s_fp32 || !k_tensor || !k_get_device || !k_get_stream ||
        !s_num_warps || !s_num_stages || !s_stream || !i_4 || !i_3)
        return NULL;
    if (PyType_Ready(&BoundType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (add_type(m, &LauncherType, "Launcher") < 0 || add_type(m, &BinderType, "Binder") < 0 ||
        PyModule_AddIntConstant(m, "MAX_PARAMS", MAX_PARAMS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
