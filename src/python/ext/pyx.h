/*
** pyx.h -- xferlua's CPython extension (xferlua._xferlua): the C API of include/xfer*.h as
** Python types and functions, at C's speed. Built on CPython's stable ABI (Python 3.10 and
** later: one binary for every version, METH_FASTCALL), it is what the package xferlua
** (src/python/xferlua/__init__.py) builds its classes on: that file adds what needs Python --
** NumPy, PyTorch, repr, docstrings of the whole API. Every move releases the GIL.
** docs/python.md says why an extension rather than ctypes (the figure it was chosen by).
*/
#ifndef XFER_PYX_H
#define XFER_PYX_H

#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "xfer.h"
#include "xfer_files.h"

/* `stmt` run with the GIL released: a move, a wait, a driver call -- other Python threads go on
** meanwhile. Nothing in stmt may touch a Python object. */
#define PYX_UNLOCKED(stmt) \
  do {                     \
    Py_BEGIN_ALLOW_THREADS \
    stmt;                  \
    Py_END_ALLOW_THREADS   \
  } while (0)

/* -- the module's state (one context per process, as the Lua binding's) -- */

/* The context, opened by the first call that needs it (with the GIL held: once). NULL and a
** Python exception set when it could not open. */
xfer_ctx *pyx_ctx(void);
/* A device by name ("host", "cuda:0") or an object with a `name` (xferlua.Device); NULL and
** the exception set (the core's error: unknown name, unavailable runtime). */
xfer_device *pyx_device(PyObject *name_or_device);

/* -- types (types.c) -- */

/* A heap type of `slots` named "xferlua.X" (or "xferlua._xferlua.X"), added to the module as X;
** NULL and the exception set on failure. */
PyTypeObject *pyx_add_type(PyObject *module, const char *name, size_t size, unsigned int flags,
                           PyType_Slot *slots);
/* A new object of `type` (a subclass's too), zeroed; NULL and the exception set. */
PyObject *pyx_alloc(PyTypeObject *type);
/* The end of every tp_dealloc: the object's memory given back, and its type's reference. */
void pyx_free(PyObject *self);

/* -- errors (errors.c) -- */

/* Raises err as the exception class registered for its code (xferlua.Timeout, ...), with every
** field of the record; returns NULL. */
PyObject *pyx_raise(const xfer_error *err);
/* Raises an `invalid` error the binding found itself (a wrong argument), naming `op`. */
PyObject *pyx_invalid(const char *op, const char *fmt, ...);
/* Registers the exception classes: a dict code name -> class (module.c's _register). */
int pyx_errors_register(PyObject *by_code);

/* -- tensors (tensor.c) -- */

typedef struct {
  PyObject_HEAD
  xfer_tensor *t;   /* a reference; NULL once let go of */
  PyObject *keep;   /* what must outlive it: the producer behind a DLPack tensor, or NULL */
} pyx_tensor;

extern PyTypeObject *pyx_tensor_base; /* _xferlua.Tensor */
/* A Python object for a new reference t (taken over, released on failure), of the class
** registered (xferlua.Tensor) or the base type. */
PyObject *pyx_tensor_new(xfer_tensor *t, PyObject *keep);
/* The live tensor of a Python object (NULL and the exception set: not a tensor, or let go). */
xfer_tensor *pyx_tensor_of(PyObject *o, const char *op);
int pyx_tensor_init(PyObject *module);
int pyx_tensor_register(PyObject *cls);

/* -- options shared by moves, batches and files (tensor.c) -- */

/* Keyword values of a move: via, verify, timeout (and dtype for `to`); absent or None: the
** context's defaults. */
typedef struct {
  PyObject *via, *verify, *timeout, *dtype;
} pyx_move_kw;
/* Fills opts from kw; -1 and the exception set on a bad value. */
int pyx_move_opts(const char *op, const pyx_move_kw *kw, xfer_transfer_opts *opts);
/* Reads keyword arguments of a METH_FASTCALL call into the named slots (NULL-terminated names,
** slots in the same order); -1 and TypeError for an unknown keyword. */
int pyx_keywords(const char *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 const char *const *names, PyObject **slots);

/* -- jobs (job.c) -- */

typedef enum { PYX_JOB_MOVE, PYX_JOB_BATCH, PYX_JOB_LOAD, PYX_JOB_SAVE } pyx_job_kind;
/* A Python Job over a started job (taken over). `names` (a load's: a list of str, taken over)
** says what wait() returns. */
PyObject *pyx_job_new(xfer_job *job, pyx_job_kind kind, PyObject *names, PyObject *keep);
int pyx_job_init(PyObject *module);
int pyx_job_register(PyObject *cls);

/* -- batches (batch.c), files (files.c), remote (remote.c) -- */

int pyx_batch_init(PyObject *module);
int pyx_remote_init(PyObject *module);
extern PyMethodDef pyx_batch_functions[];
extern PyMethodDef pyx_file_functions[];
/* A loaded tensor `t` put into a load's result `out` under `key`: a name, or (name, part,
** parts) for one part of a tensor split across devices (out[name] a list of its parts). 0, or
** -1 and the exception set. */
int pyx_load_put(PyObject *out, PyObject *key, PyObject *t);

/* Integers of a NumPy array (any object with __array_interface__ of integers), a range, or
** any sequence of ints, as n int64 values in *out (PyMem_Free it); -1 and the exception set. */
int pyx_int64s(PyObject *o, const char *op, const char *what, int64_t **out, size_t *n);

#endif
