/*
** job.c -- xferlua._xferlua.Job: a move, batch run, load or save running on a thread of the
** core's pool (xfer_job). wait() gives what the synchronous call would have, or raises its
** error; cancel() returns only once nothing more will be written into the job's targets.
** A Job collected unwaited is detached, never waited for: its thread drops the result.
*/
#include "pyx.h"

typedef struct {
  PyObject_HEAD
  xfer_job *job;
  pyx_job_kind kind;
  PyObject *names; /* a load's tensor names (a list), for wait()'s dict */
  PyObject *keep;  /* what must outlive the job (a batch's Python object) */
  PyObject *result; /* wait()'s, once taken: a load's tensors are taken from the job once */
} pyx_job;

static PyTypeObject *job_base, *job_class;

PyObject *pyx_job_new(xfer_job *job, pyx_job_kind kind, PyObject *names, PyObject *keep)
{
  pyx_job *o = (pyx_job *)pyx_alloc(job_class ? job_class : job_base);
  if (!o) {
    xfer_job_detach(job);
    Py_XDECREF(names);
    return NULL;
  }
  o->job = job;
  o->kind = kind;
  o->names = names;
  o->keep = keep;
  Py_XINCREF(keep);
  o->result = NULL;
  return (PyObject *)o;
}

static void job_dealloc(PyObject *self)
{
  pyx_job *o = (pyx_job *)self;
  if (o->job) xfer_job_detach(o->job); /* a collector must not wait */
  Py_CLEAR(o->names);
  Py_CLEAR(o->keep);
  Py_CLEAR(o->result);
  pyx_free(self);
}

/* A load's tensors as {name: tensor}, each taken from the job once. */
static PyObject *load_result(pyx_job *o)
{
  PyObject *out = PyDict_New();
  Py_ssize_t n = out ? PyList_Size(o->names) : 0;
  for (Py_ssize_t i = 0; out && i < n; i++) {
    xfer_tensor *t = xfer_file_load_take(o->job, (size_t)i);
    PyObject *v = t ? pyx_tensor_new(t, NULL) : Py_NewRef(Py_None);
    if (!v || pyx_load_put(out, PyList_GetItem(o->names, i), v)) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

static PyObject *j_wait(PyObject *self, PyObject *unused)
{
  (void)unused;
  pyx_job *o = (pyx_job *)self;
  if (o->result) return Py_NewRef(o->result);
  xfer_tensor *out = NULL;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_job_wait(o->job, &out, &err));
  if (rc) return pyx_raise(&err); /* again on every wait, as the core says it again */
  switch (o->kind) {
  case PYX_JOB_MOVE: o->result = pyx_tensor_new(out, NULL); break;
  case PYX_JOB_LOAD: o->result = load_result(o); break;
  default: o->result = Py_NewRef(Py_True); break;
  }
  return o->result ? Py_NewRef(o->result) : NULL;
}

static PyObject *j_done(PyObject *self, PyObject *unused)
{
  (void)unused;
  return PyBool_FromLong(xfer_job_done(((pyx_job *)self)->job));
}

static PyObject *j_cancel(PyObject *self, PyObject *unused)
{
  (void)unused;
  PYX_UNLOCKED(xfer_job_cancel(((pyx_job *)self)->job)); /* (a no-op for one that ended) */
  Py_RETURN_NONE;
}

static PyObject *j_progress(PyObject *self, PyObject *unused)
{
  (void)unused;
  uint64_t done, total;
  xfer_job_progress(((pyx_job *)self)->job, &done, &total);
  return Py_BuildValue("(KK)", (unsigned long long)done, (unsigned long long)total);
}

static PyMethodDef job_methods[] = {
  {"wait", j_wait, METH_NOARGS,
   "wait()\n\nWaits for the job (the GIL released): a move's new tensor, a load's {name: tensor}, "
   "True for a batch run or a save; raises the job's error (again on every wait)."},
  {"done", j_done, METH_NOARGS, "done() -> bool\n\nTrue once the job ended, well or not."},
  {"cancel", j_cancel, METH_NOARGS,
   "cancel()\n\nStops the job and returns once nothing more will be written into its targets "
   "(queued chunks never start, copies in flight waited for). wait() then raises "
   "xferlua.Canceled, unless the job had ended (a no-op then)."},
  {"progress", j_progress, METH_NOARGS, "progress() -> (done, total)\n\nBytes moved so far, and all."},
  {NULL, NULL, 0, NULL},
};

int pyx_job_register(PyObject *cls)
{
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, job_base)) {
    PyErr_SetString(PyExc_TypeError, "_register: Job must subclass _xferlua.Job");
    return -1;
  }
  Py_XDECREF(job_class);
  Py_INCREF(cls);
  job_class = (PyTypeObject *)cls;
  return 0;
}

int pyx_job_init(PyObject *module)
{
  PyType_Slot slots[] = {
    {Py_tp_dealloc, job_dealloc},
    {Py_tp_methods, job_methods},
    {Py_tp_doc, "A move, batch run, load or save running on xferlua's threads."},
    {0, NULL},
  };
  job_base = pyx_add_type(module, "xferlua._xferlua.Job", sizeof(pyx_job),
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots);
  if (!job_base) return -1;
  return 0;
}
