/* ssu._fastcall: the per-call path of ssu.torch in C.
 *
 * ssu.torch keeps, for every layout of an operation's arguments, a prebuilt
 * libssu argument struct (an entry). A call checks that its arguments are
 * those the struct describes, stores each tensor's data pointer into the
 * struct and runs the plan's execute function. Written in Python (the
 * fallback in torch.py, _entry_functions) that is about 4 us a call on the
 * GPU hosts, as much again as libssu's own execute; here it is one C call
 * per entry, which does the same steps in the same order:
 *
 *   1. the arguments the struct leaves out must be None, and the options
 *      must equal the struct's (else: the `miss` function, with every
 *      argument);
 *   2. the tensors the struct describes must pass `check` (torch's dynamo
 *      TensorGuards check, made by torch.py) (else: `miss`);
 *   3. each such tensor's data_ptr(), and the device's current raw stream;
 *   4. the stores of the pointers into the struct and the execute call;
 *   5. a nonzero status goes to torch.py's _raise (the same message).
 *
 * Nothing here includes torch's headers or links libtorch or libpython:
 * tensors are used through their Python methods (data_ptr), the check and
 * the stream getter are Python callables, and libssu's execute function is
 * called through its address, taken from ctypes.
 *
 * Threads. Calls of one layout share its struct. In Python a lock keeps two
 * threads' stores apart, because the interpreter may switch threads between
 * two stores. Here steps 1 to 3, which call Python (and may switch threads:
 * a tensor subclass's data_ptr can run Python code), only read; step 4 runs
 * no Python at all and holds the GIL from the first store to the end of
 * the execute call, so no other thread can store into the struct in
 * between, and no lock is needed. (That also means the GIL must not be
 * released around the execute call; on the CUDA backend it only launches.)
 * The module does not declare itself free-threading safe, so a
 * free-threaded interpreter turns its GIL on when the module is imported.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x03090000
#  error "ssu._fastcall needs Python 3.9 or later (vectorcall)"
#endif

/* libssu's ssu_plan_execute_* : (plan, args struct, stream) -> status. */
typedef int32_t (*execute_fn)(void *plan, const void *args, void *stream);

/* More than any operation has: selective_state_update takes 18 tensors and
 * one pointer argument, and 5 options. */
#define MAX_ARGS 32

static PyObject *str_data_ptr, *str_run, *str_first, *str_second;

/* ------------------------------------------------------------------------ */
/* Entry: one prebuilt struct and what a call of it needs                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t nargs;    /* tensor and pointer arguments, in call order */
    Py_ssize_t nscalars; /* options, after them */
    Py_ssize_t ngiven;   /* arguments the struct describes ... */
    Py_ssize_t given[MAX_ARGS];  /* ... their indices ... */
    void **slot[MAX_ARGS];       /* ... and where their data pointers go */
    Py_ssize_t nabsent;  /* arguments that must be None */
    Py_ssize_t absent[MAX_ARGS];
    PyObject *scalars;   /* tuple: the options the struct was built with */
    execute_fn execute;
    void *plan;
    void *args;          /* the argument struct the execute call gets */
    PyObject *device;    /* int: the CUDA device; None: the CPU (stream 0) */
    PyObject *stream;    /* device -> that device's current raw stream */
    PyObject *fail;      /* fail(op, status, mamba1) raises the error */
    PyObject *op;
    PyObject *mamba1;
    PyObject *keep;      /* what owns the memory the slots point into */
} Entry;

static PyTypeObject Entry_Type;
static PyTypeObject Guarded_Type;

static int
address(PyObject *obj, void **out, const char *what)
{
    void *p = PyLong_AsVoidPtr(obj);
    if (p == NULL && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "ssu._fastcall.Entry: %s must be an address (int)", what);
        return -1;
    }
    *out = p;
    return 0;
}

/* Entry(nargs, given, slots, scalars, execute, plan, args, device, stream,
 *       fail, op, mamba1, keep)
 * given: the argument indices of the struct's tensors; slots: for each, the
 * address its data pointer is stored at; execute, plan, args: addresses. */
static PyObject *
Entry_new(PyTypeObject *type, PyObject *a, PyObject *kw)
{
    Py_ssize_t nargs;
    PyObject *given, *slots, *scalars, *execute, *plan, *args, *device, *stream, *fail, *op;
    PyObject *mamba1, *keep;
    static char *names[] = {"nargs", "given", "slots", "scalars", "execute", "plan", "args",
                            "device", "stream", "fail", "op", "mamba1", "keep", NULL};
    if (!PyArg_ParseTupleAndKeywords(a, kw, "nO!O!O!OOOOOOOOO:Entry", names, &nargs,
                                     &PyTuple_Type, &given, &PyTuple_Type, &slots,
                                     &PyTuple_Type, &scalars, &execute, &plan, &args, &device,
                                     &stream, &fail, &op, &mamba1, &keep))
        return NULL;
    Py_ssize_t ngiven = PyTuple_GET_SIZE(given);
    Py_ssize_t nscalars = PyTuple_GET_SIZE(scalars);
    if (nargs < 0 || nargs > MAX_ARGS || nscalars > MAX_ARGS || ngiven > nargs
        || PyTuple_GET_SIZE(slots) != ngiven) {
        PyErr_SetString(PyExc_ValueError, "ssu._fastcall.Entry: argument counts out of range");
        return NULL;
    }
    if (device != Py_None && !PyLong_Check(device)) {
        PyErr_SetString(PyExc_TypeError, "ssu._fastcall.Entry: device must be an int or None");
        return NULL;
    }
    Entry *e = PyObject_GC_New(Entry, type);
    if (e == NULL)
        return NULL;
    e->nargs = nargs;
    e->nscalars = nscalars;
    e->ngiven = ngiven;
    e->scalars = e->device = e->stream = e->fail = e->op = e->mamba1 = e->keep = NULL;
    char seen[MAX_ARGS] = {0};
    for (Py_ssize_t k = 0; k < ngiven; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(given, k));
        if (i == -1 && PyErr_Occurred())
            goto error;
        if (i < 0 || i >= nargs || seen[i]) {
            PyErr_SetString(PyExc_ValueError, "ssu._fastcall.Entry: bad argument index");
            goto error;
        }
        seen[i] = 1;
        e->given[k] = i;
        void *p;
        if (address(PyTuple_GET_ITEM(slots, k), &p, "slots") < 0)
            goto error;
        e->slot[k] = (void **)p;
    }
    e->nabsent = 0;
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (!seen[i])
            e->absent[e->nabsent++] = i;
    void *p;
    if (address(execute, &p, "execute") < 0)
        goto error;
    e->execute = (execute_fn)p;
    if (address(plan, &e->plan, "plan") < 0 || address(args, &e->args, "args") < 0)
        goto error;
    if (e->execute == NULL || e->args == NULL) {
        PyErr_SetString(PyExc_ValueError, "ssu._fastcall.Entry: null execute or args");
        goto error;
    }
    Py_INCREF(scalars); e->scalars = scalars;
    Py_INCREF(device); e->device = device;
    Py_INCREF(stream); e->stream = stream;
    Py_INCREF(fail); e->fail = fail;
    Py_INCREF(op); e->op = op;
    Py_INCREF(mamba1); e->mamba1 = mamba1;
    Py_INCREF(keep); e->keep = keep;
    PyObject_GC_Track(e);
    return (PyObject *)e;
error:
    PyObject_GC_Del(e);
    return NULL;
}

static int
Entry_traverse(Entry *e, visitproc visit, void *arg)
{
    Py_VISIT(e->scalars);
    Py_VISIT(e->device);
    Py_VISIT(e->stream);
    Py_VISIT(e->fail);
    Py_VISIT(e->op);
    Py_VISIT(e->mamba1);
    Py_VISIT(e->keep);
    return 0;
}

static int
Entry_clear(Entry *e)
{
    Py_CLEAR(e->scalars);
    Py_CLEAR(e->device);
    Py_CLEAR(e->stream);
    Py_CLEAR(e->fail);
    Py_CLEAR(e->op);
    Py_CLEAR(e->mamba1);
    Py_CLEAR(e->keep);
    return 0;
}

static void
Entry_dealloc(Entry *e)
{
    PyObject_GC_UnTrack(e);
    Entry_clear(e);
    PyObject_GC_Del(e);
}

/* Steps 3 to 5 on arguments that passed the tests. */
static PyObject *
entry_run(Entry *e, PyObject *const *args)
{
    void *ptrs[MAX_ARGS];
    void *stream = NULL;
    if (e->keep == NULL) {  /* cleared by the garbage collector */
        PyErr_SetString(PyExc_RuntimeError, "ssu._fastcall: entry used after it was cleared");
        return NULL;
    }
    /* Everything that calls Python first, into locals. */
    for (Py_ssize_t k = 0; k < e->ngiven; k++) {
        PyObject *v = PyObject_VectorcallMethod(str_data_ptr, &args[e->given[k]], 1, NULL);
        if (v == NULL)
            return NULL;
        ptrs[k] = PyLong_AsVoidPtr(v);
        Py_DECREF(v);
        if (ptrs[k] == NULL && PyErr_Occurred())
            return NULL;
    }
    if (e->device != Py_None) {
        PyObject *v = PyObject_Vectorcall(e->stream, &e->device, 1, NULL);
        if (v == NULL)
            return NULL;
        stream = PyLong_AsVoidPtr(v);
        Py_DECREF(v);
        if (stream == NULL && PyErr_Occurred())
            return NULL;
    }
    /* The stores and the call, with the GIL held and no Python in between
     * (see the top of the file: this is what the Python path's lock is for). */
    for (Py_ssize_t k = 0; k < e->ngiven; k++)
        *e->slot[k] = ptrs[k];
    int32_t status = e->execute(e->plan, e->args, stream);
    if (status == 0)
        Py_RETURN_NONE;
    PyObject *code = PyLong_FromLong(status);
    if (code == NULL)
        return NULL;
    PyObject *fa[3] = {e->op, code, e->mamba1};
    PyObject *r = PyObject_Vectorcall(e->fail, fa, 3, NULL);
    Py_DECREF(code);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static int
wrong_count(Entry *e, const char *name, Py_ssize_t n, Py_ssize_t want)
{
    (void)e;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments but %zd were given",
                 name, want, n);
    return -1;
}

/* call(*arguments): the stores and the execute call, for arguments the
 * keyed lookup found this entry for (tensors and pointers, no options). */
static PyObject *
Entry_call(Entry *e, PyObject *const *args, Py_ssize_t n)
{
    if (n != e->nargs) {
        wrong_count(e, "call", n, e->nargs);
        return NULL;
    }
    return entry_run(e, args);
}

/* present(*arguments): the tuple of the arguments the struct describes. */
static PyObject *
Entry_present(Entry *e, PyObject *const *args, Py_ssize_t n)
{
    if (n != e->nargs) {
        wrong_count(e, "present", n, e->nargs);
        return NULL;
    }
    PyObject *t = PyTuple_New(e->ngiven);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < e->ngiven; k++) {
        PyObject *v = args[e->given[k]];
        Py_INCREF(v);
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Entry *entry;
    PyObject *check;
    PyObject *miss;
    PyObject *then;  /* NULL, or the list [run, first, second] to set */
} Guarded;

static PyObject *Guarded_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames);

/* guarded(check, miss, then): the function of every argument of the
 * operation (tensors, pointers, options) that runs this entry if they pass
 * the tests and `check`, and otherwise returns miss(*arguments). With
 * `then` (a list: the operation's run, first and second entry) a call that
 * runs first sets those three attributes of the operation. */
static PyObject *
Entry_guarded(Entry *e, PyObject *const *args, Py_ssize_t n)
{
    if (n != 3) {
        wrong_count(e, "guarded", n, 3);
        return NULL;
    }
    PyObject *then = args[2];
    if (then != Py_None && !(PyList_Check(then) && PyList_GET_SIZE(then) == 3)) {
        PyErr_SetString(PyExc_TypeError,
                        "guarded(): then must be None or a list of three (run, first, second)");
        return NULL;
    }
    Guarded *g = PyObject_GC_New(Guarded, &Guarded_Type);
    if (g == NULL)
        return NULL;
    g->vectorcall = Guarded_vectorcall;
    Py_INCREF(e); g->entry = e;
    Py_INCREF(args[0]); g->check = args[0];
    Py_INCREF(args[1]); g->miss = args[1];
    if (then == Py_None) {
        g->then = NULL;
    } else {
        Py_INCREF(then);
        g->then = then;
    }
    PyObject_GC_Track(g);
    return (PyObject *)g;
}

static PyMethodDef Entry_methods[] = {
    {"call", (PyCFunction)(void (*)(void))Entry_call, METH_FASTCALL,
     "call(*arguments): store the data pointers and run (no options, no tests)"},
    {"present", (PyCFunction)(void (*)(void))Entry_present, METH_FASTCALL,
     "present(*arguments): the arguments the struct describes"},
    {"guarded", (PyCFunction)(void (*)(void))Entry_guarded, METH_FASTCALL,
     "guarded(check, miss, then): the checked function of every argument"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Entry_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ssu._fastcall.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A prebuilt libssu argument struct and the C functions that run it.",
    .tp_new = Entry_new,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
    .tp_methods = Entry_methods,
};

/* ------------------------------------------------------------------------ */
/* Guarded: an entry's checked function                                     */
/* ------------------------------------------------------------------------ */

static PyObject *
Guarded_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Guarded *g = (Guarded *)self;
    Entry *e = g->entry;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (e == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ssu._fastcall: function used after it was cleared");
        return NULL;
    }
    /* Keywords or another count of arguments: not a call this fast path
     * knows; the miss function (in the end the keyed lookup, in Python)
     * takes them or raises Python's own TypeError. */
    if (kwnames != NULL || n != e->nargs + e->nscalars)
        return PyObject_Vectorcall(g->miss, args, nargsf, kwnames);
    for (Py_ssize_t k = 0; k < e->nabsent; k++)
        if (args[e->absent[k]] != Py_None)
            goto miss;
    for (Py_ssize_t k = 0; k < e->nscalars; k++) {
        int same = PyObject_RichCompareBool(args[e->nargs + k],
                                            PyTuple_GET_ITEM(e->scalars, k), Py_EQ);
        if (same < 0)
            return NULL;
        if (!same)
            goto miss;
    }
    {
        PyObject *present[MAX_ARGS];
        for (Py_ssize_t k = 0; k < e->ngiven; k++)
            present[k] = args[e->given[k]];
        PyObject *r = PyObject_Vectorcall(g->check, present, e->ngiven, NULL);
        if (r == NULL)
            return NULL;
        int ok = r == Py_True ? 1 : r == Py_False ? 0 : PyObject_IsTrue(r);
        Py_DECREF(r);
        if (ok < 0)
            return NULL;
        if (!ok)
            goto miss;
    }
    if (g->then != NULL) {
        /* op.run, op.first, op.second = then */
        PyObject *v[3];
        if (PyList_GET_SIZE(g->then) != 3) {
            PyErr_SetString(PyExc_ValueError, "ssu._fastcall: then must hold three values");
            return NULL;
        }
        for (int k = 0; k < 3; k++) {
            v[k] = PyList_GET_ITEM(g->then, k);
            Py_INCREF(v[k]);
        }
        PyObject *op = e->op;
        Py_INCREF(op);
        int rc = PyObject_SetAttr(op, str_run, v[0]);
        if (rc == 0)
            rc = PyObject_SetAttr(op, str_first, v[1]);
        if (rc == 0)
            rc = PyObject_SetAttr(op, str_second, v[2]);
        Py_DECREF(op);
        for (int k = 0; k < 3; k++)
            Py_DECREF(v[k]);
        if (rc < 0)
            return NULL;
    }
    /* The entry stays alive while it runs even if the attributes set above
     * dropped the last other reference to this function. */
    Py_INCREF(self);
    PyObject *r = entry_run(e, args);
    Py_DECREF(self);
    return r;
miss:
    return PyObject_Vectorcall(g->miss, args, nargsf, NULL);
}

static int
Guarded_traverse(Guarded *g, visitproc visit, void *arg)
{
    Py_VISIT(g->entry);
    Py_VISIT(g->check);
    Py_VISIT(g->miss);
    Py_VISIT(g->then);
    return 0;
}

static int
Guarded_clear(Guarded *g)
{
    Py_CLEAR(g->entry);
    Py_CLEAR(g->check);
    Py_CLEAR(g->miss);
    Py_CLEAR(g->then);
    return 0;
}

static void
Guarded_dealloc(Guarded *g)
{
    PyObject_GC_UnTrack(g);
    Guarded_clear(g);
    PyObject_GC_Del(g);
}

static PyTypeObject Guarded_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ssu._fastcall.Guarded",
    .tp_basicsize = sizeof(Guarded),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An entry's checked function of every argument of its operation.",
    .tp_vectorcall_offset = offsetof(Guarded, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)Guarded_dealloc,
    .tp_traverse = (traverseproc)Guarded_traverse,
    .tp_clear = (inquiry)Guarded_clear,
};

/* ------------------------------------------------------------------------ */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ssu._fastcall",
    .m_doc = "The per-call path of ssu.torch (see torch.py, _entry_functions).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__fastcall(void)
{
    if (PyType_Ready(&Entry_Type) < 0 || PyType_Ready(&Guarded_Type) < 0)
        return NULL;
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    str_run = PyUnicode_InternFromString("run");
    str_first = PyUnicode_InternFromString("first");
    str_second = PyUnicode_InternFromString("second");
    if (!str_data_ptr || !str_run || !str_first || !str_second)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&Entry_Type);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&Entry_Type) < 0) {
        Py_DECREF(&Entry_Type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
