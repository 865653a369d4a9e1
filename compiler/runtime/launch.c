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
   A value that does not convert calls `on_bad(index, value)`, which raises a readable error; a
   non-zero CUresult calls `on_error(code, g0, g1, g2, stream, values)` (retry or raise). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
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
    case 'Q': {
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
        params[i] = &slots[i];
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
        if (k != 'q' && k != 'Q' && k != 'f' && k != 'd') {
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "blocktune_launch", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_blocktune_launch(void) {
    if (PyType_Ready(&LauncherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0) {
        Py_DECREF(&LauncherType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_PARAMS", MAX_PARAMS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
