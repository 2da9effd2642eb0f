/*
** tensor.c -- xferlua._xferlua.Tensor: a reference to an xfer_tensor, its moves (to, copy_from,
** to_async: the GIL released while they run), its bytes, and DLPack both ways. The package's
** xferlua.Tensor subclasses it (repr, NumPy and PyTorch); registered here, it is the class
** every new tensor gets.
*/
#include <string.h>

#include "pyx.h"

PyTypeObject *pyx_tensor_base;
static PyTypeObject *tensor_class; /* the registered subclass, or the base */

/* -- DLPack's structs (dlpack.h 1.x, ABI-stable): only what the capsules' deleters need -- */
typedef struct {
  int32_t device_type, device_id;
} dl_device;
typedef struct {
  void *data;
  dl_device device;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
  dl_tensor tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *);
} dl_managed;
typedef struct dl_managed_versioned {
  uint32_t major, minor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed_versioned *);
  uint64_t flags;
  dl_tensor tensor;
} dl_managed_versioned;

PyObject *pyx_tensor_new(xfer_tensor *t, PyObject *keep)
{
  pyx_tensor *o = (pyx_tensor *)pyx_alloc(tensor_class ? tensor_class : pyx_tensor_base);
  if (!o) {
    xfer_tensor_release(t);
    return NULL;
  }
  o->t = t;
  o->keep = keep;
  Py_XINCREF(keep);
  return (PyObject *)o;
}

static int is_tensor(PyObject *o) { return PyObject_TypeCheck(o, pyx_tensor_base); }

xfer_tensor *pyx_tensor_of(PyObject *o, const char *op)
{
  if (!is_tensor(o)) {
    PyObject *type = PyObject_Type(o);
    PyObject *name = type ? PyObject_GetAttrString(type, "__name__") : NULL;
    const char *n = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    pyx_invalid(op, "%s: an xferlua tensor is needed, not a %s (xferlua.from_numpy, "
                "xferlua.from_torch or xferlua.from_dlpack make one of an array)", op, n ? n : "?");
    Py_XDECREF(name);
    Py_XDECREF(type);
    return NULL;
  }
  return ((pyx_tensor *)o)->t;
}

static void tensor_dealloc(PyObject *self)
{
  pyx_tensor *o = (pyx_tensor *)self;
  if (o->t) xfer_tensor_release(o->t); /* never blocks: a job using it holds its own */
  Py_CLEAR(o->keep);
  pyx_free(self);
}

/* -- keyword arguments and a move's options -- */

int pyx_keywords(const char *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 const char *const *names, PyObject **slots)
{
  if (!kwnames) return 0;
  Py_ssize_t nk = PyTuple_Size(kwnames);
  for (Py_ssize_t k = 0; k < nk; k++) {
    PyObject *key = PyTuple_GetItem(kwnames, k);
    const char *s = PyUnicode_AsUTF8AndSize(key, NULL);
    if (!s) return -1;
    int found = 0;
    for (int i = 0; names[i]; i++)
      if (!strcmp(s, names[i])) {
        slots[i] = args[nargs + k];
        found = 1;
        break;
      }
    if (!found) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", op, s);
      return -1;
    }
  }
  return 0;
}

static int parse_dtype(const char *op, PyObject *o, xfer_dtype *out)
{
  /* "f32", "float32", numpy.float32, numpy.dtype("float32"), torch.bfloat16 */
  PyObject *text = NULL;
  if (PyUnicode_Check(o)) {
    text = Py_NewRef(o);
  } else if (PyObject_HasAttrString(o, "__name__")) {
    text = PyObject_GetAttrString(o, "__name__"); /* numpy.float32 */
  } else {
    text = PyObject_Str(o); /* numpy.dtype, torch.dtype ("torch.float32") */
  }
  if (!text) return -1;
  const char *s = PyUnicode_AsUTF8AndSize(text, NULL);
  if (!s) {
    Py_DECREF(text);
    return -1;
  }
  if (!strncmp(s, "torch.", 6)) s += 6;
  int bad = xfer_dtype_parse(s, out);
  if (bad) pyx_invalid(op, "%s: unknown dtype '%s' (f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 "
                       "bool, or NumPy's and PyTorch's names)", op, s);
  Py_DECREF(text);
  return bad ? -1 : 0;
}

int pyx_move_opts(const char *op, const pyx_move_kw *kw, xfer_transfer_opts *opts)
{
  memset(opts, 0, sizeof *opts);
  if (kw->via && kw->via != Py_None) {
    const char *s = PyUnicode_Check(kw->via) ? PyUnicode_AsUTF8AndSize(kw->via, NULL) : NULL;
    xfer_path path;
    if (!s || xfer_path_parse(s, &path)) {
      pyx_invalid(op, "%s: via must be a path name (same_device, same_runtime, interop, direct, "
                  "staged, host)", op);
      return -1;
    }
    opts->via = path;
  }
  if (kw->verify && kw->verify != Py_None) {
    int on = PyObject_IsTrue(kw->verify);
    if (on < 0) return -1;
    opts->verify = on ? 1 : -1;
  }
  if (kw->timeout && kw->timeout != Py_None) {
    if (kw->timeout == Py_False) {
      opts->timeout = -1; /* none, whatever the config says */
    } else {
      double s = PyFloat_AsDouble(kw->timeout);
      if (s == -1.0 && PyErr_Occurred()) return -1;
      if (!(s > 0)) {
        pyx_invalid(op, "%s: timeout must be seconds above 0 (or False: none)", op);
        return -1;
      }
      opts->timeout = s;
    }
  }
  if (kw->dtype && kw->dtype != Py_None) {
    if (parse_dtype(op, kw->dtype, &opts->dtype)) return -1;
    opts->convert = 1;
  }
  return 0;
}

static const char *const move_names[] = {"via", "verify", "timeout", "dtype", NULL};

/* (device, *, via, verify, timeout, dtype) of to and to_async */
static int move_args(const char *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     xfer_device **dev, xfer_transfer_opts *opts)
{
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "%s() takes the device (a name or an xferlua.Device), then "
                 "keyword options", op);
    return -1;
  }
  pyx_move_kw kw = {0};
  if (pyx_keywords(op, args, nargs, kwnames, move_names, &kw.via)) return -1;
  if (pyx_move_opts(op, &kw, opts)) return -1;
  *dev = pyx_device(args[0]);
  return *dev ? 0 : -1;
}

static PyObject *t_to(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
  xfer_tensor *t = ((pyx_tensor *)self)->t, *out;
  xfer_device *dev;
  xfer_transfer_opts opts;
  if (move_args("to", args, nargs, kwnames, &dev, &opts)) return NULL;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_transfer_to(t, dev, &opts, &out, &err));
  if (rc) return pyx_raise(&err);
  return pyx_tensor_new(out, NULL);
}

static PyObject *t_to_async(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  xfer_device *dev;
  xfer_transfer_opts opts;
  if (move_args("to_async", args, nargs, kwnames, &dev, &opts)) return NULL;
  xfer_error err;
  xfer_job *job;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_transfer_start(t, dev, &opts, &job, &err));
  if (rc) return pyx_raise(&err);
  return pyx_job_new(job, PYX_JOB_MOVE, NULL, NULL);
}

/* plan(device, *, via, dtype): what the move would do, and why (nothing moved) */
static PyObject *t_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
  xfer_device *dev;
  xfer_transfer_opts opts;
  if (move_args("plan", args, nargs, kwnames, &dev, &opts)) return NULL;
  xfer_plan plan;
  xfer_error err;
  if (xfer_transfer_plan(((pyx_tensor *)self)->t, dev, &opts, &plan, &err)) return pyx_raise(&err);
  PyObject *steps = PyList_New(0), *moves = PyList_New(0), *estimates = PyDict_New();
  for (int i = 0; steps && i < plan.nsteps; i++) {
    PyObject *v = PyUnicode_FromString(plan.steps[i]);
    if (!v || PyList_Append(steps, v)) Py_CLEAR(steps);
    Py_XDECREF(v);
  }
  for (int i = 0; moves && i < plan.nmoves; i++) {
    PyObject *v = Py_BuildValue("{s:s,s:s,s:s,s:s,s:O}", "from", plan.moves[i].from, "to", plan.moves[i].to,
                                "path", xfer_path_name(plan.moves[i].path), "runner", plan.moves[i].runner,
                                "fallback", plan.moves[i].fallback ? Py_True : Py_False);
    if (!v || PyList_Append(moves, v)) Py_CLEAR(moves);
    Py_XDECREF(v);
  }
  for (int i = 0; estimates && i < plan.nestimates; i++) {
    PyObject *v = plan.estimates[i].measured ? PyFloat_FromDouble(plan.estimates[i].seconds) : Py_NewRef(Py_None);
    if (!v || PyDict_SetItemString(estimates, xfer_path_name(plan.estimates[i].path), v)) Py_CLEAR(estimates);
    Py_XDECREF(v);
  }
  if (!steps || !moves || !estimates) {
    Py_XDECREF(steps);
    Py_XDECREF(moves);
    Py_XDECREF(estimates);
    return NULL;
  }
  return Py_BuildValue("{s:s,s:s,s:N,s:N,s:N}", "path", xfer_path_name(plan.path), "reason", plan.reason,
                       "steps", steps, "moves", moves, "estimates", estimates);
}

static PyObject *t_copy_from(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
  static const char *const names[] = {"via", "verify", "timeout", NULL};
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "copy_from() takes the source tensor, then keyword options");
    return NULL;
  }
  pyx_move_kw kw = {0};
  xfer_transfer_opts opts;
  if (pyx_keywords("copy_from", args, nargs, kwnames, names, &kw.via) ||
      pyx_move_opts("copy_from", &kw, &opts))
    return NULL;
  xfer_tensor *src = pyx_tensor_of(args[0], "copy_from");
  if (!src) return NULL;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_transfer_copy(((pyx_tensor *)self)->t, src, &opts, &err));
  if (rc) return pyx_raise(&err);
  return Py_NewRef(self);
}

static PyObject *t_free(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_free(((pyx_tensor *)self)->t, &err)); /* waits for a job that uses it */
  if (rc) return pyx_raise(&err);
  Py_RETURN_NONE;
}

static PyObject *t_tobytes(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  xfer_error err;
  if (xfer_tensor_readable(t, "tobytes", &err)) return pyx_raise(&err);
  size_t n = xfer_tensor_nbytes(t);
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
  if (!out) return NULL;
  char *at = PyBytes_AsString(out);
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_read(t, at, n, &err));
  if (rc) {
    Py_DECREF(out);
    return pyx_raise(&err);
  }
  return out;
}

static PyObject *t_write(PyObject *self, PyObject *data)
{
  char *bytes;
  Py_ssize_t n;
  if (PyBytes_AsStringAndSize(data, &bytes, &n)) return NULL;
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  xfer_error err;
  if (xfer_tensor_check(t, "write", &err)) return pyx_raise(&err);
  if ((size_t)n != xfer_tensor_nbytes(t))
    return pyx_invalid("write", "write: %zd bytes for a tensor of %zu", n, xfer_tensor_nbytes(t));
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_write(t, bytes, (size_t)n, &err));
  if (rc) return pyx_raise(&err);
  return Py_NewRef(self);
}

static PyObject *t_crc32c(PyObject *self, PyObject *unused)
{
  (void)unused;
  uint32_t crc;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_crc32c(((pyx_tensor *)self)->t, &crc, &err));
  if (rc) return pyx_raise(&err);
  return PyLong_FromUnsignedLong(crc);
}

static PyObject *t_equals(PyObject *self, PyObject *other)
{
  xfer_tensor *b = pyx_tensor_of(other, "equals");
  if (!b) return NULL;
  int equal = 0;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_equal(((pyx_tensor *)self)->t, b, &equal, &err));
  if (rc) return pyx_raise(&err);
  return PyBool_FromLong(equal);
}

/* _view(shape, strides, first): the view the package's view(), slicing and transposes make */
static PyObject *t_view(PyObject *self, PyObject *args)
{
  PyObject *shape_o, *strides_o;
  long long first;
  if (!PyArg_ParseTuple(args, "OOL:_view", &shape_o, &strides_o, &first)) return NULL;
  xfer_shape s;
  memset(&s, 0, sizeof s);
  int64_t strides[XFER_MAX_DIMS] = {0};
  PyObject *sh = PySequence_Tuple(shape_o), *st = sh ? PySequence_Tuple(strides_o) : NULL;
  if (!st) {
    Py_XDECREF(sh);
    return NULL;
  }
  Py_ssize_t n = PyTuple_Size(sh);
  if (n > XFER_MAX_DIMS || PyTuple_Size(st) != n) {
    Py_DECREF(sh);
    Py_DECREF(st);
    return pyx_invalid("view", "view: %zd sizes, %zd strides (at most %d dimensions)", n, PyTuple_Size(st), XFER_MAX_DIMS);
  }
  s.ndim = (int)n;
  for (Py_ssize_t i = 0; i < n; i++) {
    s.dims[i] = PyLong_AsLongLong(PyTuple_GetItem(sh, i));
    strides[i] = PyLong_AsLongLong(PyTuple_GetItem(st, i));
  }
  Py_DECREF(sh);
  Py_DECREF(st);
  if (PyErr_Occurred()) return NULL;
  xfer_tensor *out;
  xfer_error err;
  if (xfer_tensor_view(((pyx_tensor *)self)->t, &s, strides, first, &out, &err)) return pyx_raise(&err);
  return pyx_tensor_new(out, ((pyx_tensor *)self)->keep);
}

/* fill(value): every element set to value (a number or bool) on its device */
static PyObject *t_fill(PyObject *self, PyObject *value)
{
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  double v = PyFloat_AsDouble(value);
  if (v == -1.0 && PyErr_Occurred()) return NULL;
  unsigned char elem[16];
  xfer_error err;
  if (xfer_value_store(xfer_tensor_dtype(t), v, elem, &err)) return pyx_raise(&err);
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_fill(t, elem, &err));
  if (rc) return pyx_raise(&err);
  return Py_NewRef(self);
}

/* -- DLPack: lending -- */

static void capsule_deleter(PyObject *capsule)
{
  /* a capsule no consumer took (its name unchanged): its tensor's deleter runs now */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    dl_managed_versioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  }
  PyErr_Restore(type, value, tb);
}

static PyObject *t_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
  static const char *const names[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *kw[4] = {0};
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "__dlpack__() takes stream, then keyword arguments");
    return NULL;
  }
  if (nargs == 1) kw[0] = args[0];
  if (pyx_keywords("__dlpack__", args, nargs, kwnames, names, kw)) return NULL;
  /* versioned (DLPack 1.x) when the consumer says it takes it */
  int versioned = 0;
  if (kw[1] && kw[1] != Py_None) {
    PyObject *major = PySequence_GetItem(kw[1], 0);
    if (!major) return NULL;
    versioned = PyLong_AsLong(major) >= 1;
    Py_DECREF(major);
  }
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  if (kw[2] && kw[2] != Py_None) { /* the consumer wants it on a device: it must be ours */
    int type, id;
    xfer_tensor_dlpack_device(t, &type, &id);
    long want_type = -1, want_id = -1;
    if (!PyArg_ParseTuple(kw[2], "ll", &want_type, &want_id)) return NULL;
    if (want_type != type || want_id != id) {
      PyErr_Format(PyExc_BufferError, "__dlpack__: the tensor is on DLPack device (%d, %d), not "
                   "(%ld, %ld): move it there first (t.to(...))", type, id, want_type, want_id);
      return NULL;
    }
  }
  xfer_tensor *lent = xfer_tensor_retain(t);
  if (kw[3] && kw[3] != Py_None && PyObject_IsTrue(kw[3]) == 1) { /* copy=True: a copy of ours */
    xfer_error err;
    xfer_code rc;
    PYX_UNLOCKED(rc = xfer_transfer_to(t, xfer_tensor_device(t), NULL, &lent, &err));
    xfer_tensor_release(t);
    if (rc) return pyx_raise(&err);
  }
  void *managed;
  xfer_error err;
  xfer_code rc = xfer_tensor_to_dlpack(lent, versioned, &managed, &err);
  xfer_tensor_release(lent); /* the managed tensor holds its own */
  if (rc) return pyx_raise(&err);
  return PyCapsule_New(managed, versioned ? "dltensor_versioned" : "dltensor", capsule_deleter);
}

static PyObject *t_dlpack_device(PyObject *self, PyObject *unused)
{
  (void)unused;
  int type, id;
  xfer_tensor_dlpack_device(((pyx_tensor *)self)->t, &type, &id);
  return Py_BuildValue("(ii)", type, id);
}

/* -- properties -- */

static PyObject *tuple_of(const int64_t *v, int n)
{
  PyObject *out = PyTuple_New(n);
  for (int i = 0; out && i < n; i++) {
    PyObject *x = PyLong_FromLongLong(v[i]);
    if (!x || PyTuple_SetItem(out, i, x)) {
      Py_DECREF(out);
      return NULL;
    }
  }
  return out;
}

static PyObject *g_shape(PyObject *self, void *c)
{
  (void)c;
  const xfer_shape *s = xfer_tensor_shape(((pyx_tensor *)self)->t);
  return tuple_of(s->dims, s->ndim);
}

static PyObject *g_strides(PyObject *self, void *c)
{
  (void)c;
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  return tuple_of(xfer_tensor_strides(t), xfer_tensor_shape(t)->ndim);
}

enum { G_DTYPE, G_DEVICE, G_NDIM, G_NUMEL, G_NBYTES, G_FREED, G_CONTIGUOUS, G_VALID, G_OFFSET };

/* the tensor's facts, one getter told which by its closure */
static PyObject *g_fact(PyObject *self, void *which)
{
  xfer_tensor *t = ((pyx_tensor *)self)->t;
  switch ((int)(intptr_t)which) {
  case G_DTYPE: return PyUnicode_FromString(xfer_dtype_name(xfer_tensor_dtype(t)));
  case G_DEVICE: return PyUnicode_FromString(xfer_device_name(xfer_tensor_device(t)));
  case G_NDIM: return PyLong_FromLong(xfer_tensor_shape(t)->ndim);
  case G_NUMEL: return PyLong_FromSize_t(xfer_tensor_numel(t));
  case G_NBYTES: return PyLong_FromSize_t(xfer_tensor_nbytes(t));
  case G_FREED: return PyBool_FromLong(xfer_tensor_is_freed(t));
  case G_CONTIGUOUS: return PyBool_FromLong(xfer_tensor_is_contiguous(t));
  case G_VALID: return PyBool_FromLong(!xfer_tensor_readable(t, "valid", NULL));
  default: return PyLong_FromSize_t(xfer_tensor_first(t));
  }
}

#define FACT(name, which, doc) {name, g_fact, NULL, doc, (void *)(intptr_t)(which)}

static PyGetSetDef tensor_getset[] = {
  {"shape", g_shape, NULL, "the sizes, a tuple", NULL},
  {"strides", g_strides, NULL, "steps between neighbours of each dimension, in elements", NULL},
  FACT("offset", G_OFFSET, "the first element's place in the memory it shares, in elements"),
  FACT("dtype", G_DTYPE, "xferlua's dtype name: 'f32', 'bf16', 'i64', ..."),
  FACT("device", G_DEVICE, "the device's name: 'host', 'cuda:0', ..."),
  FACT("ndim", G_NDIM, "the number of dimensions"),
  FACT("numel", G_NUMEL, "the number of elements"),
  FACT("nbytes", G_NBYTES, "the elements' bytes"),
  FACT("freed", G_FREED, "True after free()"),
  FACT("_contiguous", G_CONTIGUOUS, "True when the elements lie packed in row-major order"),
  FACT("valid", G_VALID, "False when it holds no valid bytes (a move into it ended timeout or "
       "canceled, and nothing wrote it since), or it is freed"),
  {NULL, NULL, NULL, NULL, NULL},
};

#define FAST (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef tensor_methods[] = {
  {"to", (PyCFunction)(void (*)(void))t_to, FAST,
   "to(device, *, via=None, dtype=None, verify=None, timeout=None) -> Tensor\n\n"
   "A new tensor on `device` (a name, 'cuda:0', or an xferlua.Device) with the same values, "
   "by the path the planner picks (or `via`); `dtype` converts on the way; `verify` checks "
   "the bytes that arrived (CRC32C at both ends); `timeout` seconds, past which it raises "
   "xferlua.Timeout (False: none, whatever xferlua.config says)."},
  {"to_async", (PyCFunction)(void (*)(void))t_to_async, FAST,
   "to_async(device, **options) -> Job\n\nThe move of to() on a thread of xferlua's pool: "
   "job.wait() gives the new tensor, job.cancel() stops it."},
  {"plan", (PyCFunction)(void (*)(void))t_plan, FAST,
   "plan(device, *, via=None, dtype=None) -> dict\n\nWhat to() would do, and why, moving nothing: "
   "path, reason, steps, moves (as the ledger records them), estimates (seconds per path measured)."},
  {"copy_from", (PyCFunction)(void (*)(void))t_copy_from, FAST,
   "copy_from(src, *, via=None, verify=None, timeout=None) -> self\n\nFills this tensor from "
   "`src` (same shape; any devices; another dtype converts)."},
  {"free", t_free, METH_NOARGS,
   "free()\n\nGives the device memory back now; later uses raise xferlua.Freed. Refused "
   "(xferlua.InUse) while views or an array lent by DLPack use it."},
  {"tobytes", t_tobytes, METH_NOARGS, "tobytes() -> bytes\n\nThe elements' bytes, packed in row-major order."},
  {"write", t_write, METH_O, "write(data: bytes) -> self\n\nOverwrites every element from raw bytes."},
  {"crc32c", t_crc32c, METH_NOARGS, "crc32c() -> int\n\nThe CRC32C (Castagnoli) of the elements' bytes."},
  {"equals", t_equals, METH_O, "equals(other) -> bool\n\nSame dtype, shape and bytes."},
  {"fill", t_fill, METH_O, "fill(value) -> self\n\nEvery element set to value, in place on its device."},
  {"_view", t_view, METH_VARARGS, NULL},
  {"__dlpack__", (PyCFunction)(void (*)(void))t_dlpack, FAST,
   "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)\n\nLends a host or "
   "CUDA tensor through DLPack, no copy (moves are complete when they return: no stream to wait on)."},
  {"__dlpack_device__", t_dlpack_device, METH_NOARGS,
   "__dlpack_device__() -> (type, id)\n\n(1, 0) for host memory, (2, n) for cuda:n; -1 where "
   "DLPack lends nothing (Vulkan, OpenCL: move to the host or CUDA first)."},
  {NULL, NULL, 0, NULL},
};

/* -- module functions: tensors made here -- */

static int shape_of(const char *op, PyObject *o, xfer_shape *s)
{
  memset(s, 0, sizeof *s);
  if (PyLong_Check(o)) {
    s->ndim = 1;
    s->dims[0] = PyLong_AsLongLong(o);
    return s->dims[0] < 0 && PyErr_Occurred() ? -1 : 0;
  }
  PyObject *seq = PySequence_Tuple(o);
  if (!seq) {
    PyErr_Clear();
    pyx_invalid(op, "%s: a shape is a tuple of sizes", op);
    return -1;
  }
  Py_ssize_t n = PyTuple_Size(seq);
  if (n > XFER_MAX_DIMS) {
    Py_DECREF(seq);
    pyx_invalid(op, "%s: %zd dimensions; at most %d", op, n, XFER_MAX_DIMS);
    return -1;
  }
  s->ndim = (int)n;
  for (Py_ssize_t i = 0; i < n; i++) {
    s->dims[i] = PyLong_AsLongLong(PyTuple_GetItem(seq, i));
    if (s->dims[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    if (s->dims[i] < 0) {
      Py_DECREF(seq);
      pyx_invalid(op, "%s: size %lld of dimension %zd is negative", op, (long long)s->dims[i], i);
      return -1;
    }
  }
  Py_DECREF(seq);
  return 0;
}

/* empty(shape, dtype="f32", device="host") */
static PyObject *m_empty(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static char *names[] = {"shape", "dtype", "device", NULL};
  PyObject *shape_o, *dtype_o = NULL, *dev_o = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:empty", names, &shape_o, &dtype_o, &dev_o))
    return NULL;
  xfer_shape s;
  xfer_dtype dt = XFER_F32;
  if (shape_of("empty", shape_o, &s) || (dtype_o && dtype_o != Py_None && parse_dtype("empty", dtype_o, &dt)))
    return NULL;
  xfer_device *dev = pyx_device(dev_o && dev_o != Py_None ? dev_o : NULL);
  if (!dev) return NULL;
  xfer_tensor *t;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_empty(dev, dt, &s, &t, &err));
  if (rc) return pyx_raise(&err);
  return pyx_tensor_new(t, NULL);
}

/* from_bytes(data, dtype, shape, device="host"): a copy of raw elements */
static PyObject *m_from_bytes(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static char *names[] = {"data", "dtype", "shape", "device", NULL};
  PyObject *data, *dtype_o, *shape_o, *dev_o = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:from_bytes", names, &data, &dtype_o, &shape_o, &dev_o))
    return NULL;
  char *bytes;
  Py_ssize_t n;
  xfer_shape s;
  xfer_dtype dt;
  if (PyBytes_AsStringAndSize(data, &bytes, &n) || parse_dtype("from_bytes", dtype_o, &dt) ||
      shape_of("from_bytes", shape_o, &s))
    return NULL;
  xfer_device *dev = pyx_device(dev_o && dev_o != Py_None ? dev_o : NULL);
  if (!dev) return NULL;
  xfer_tensor *t;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_tensor_from_bytes(dev, dt, &s, bytes, (size_t)n, &t, &err));
  if (rc) return pyx_raise(&err);
  return pyx_tensor_new(t, NULL);
}

/* _from_capsule(capsule, keep): a producer's DLPack capsule taken, no copy (the package's
** from_dlpack asks the producer for it); the capsule is renamed used_*, so that its deleter runs
** once: when xferlua lets go. */
static PyObject *m_from_capsule(PyObject *m, PyObject *args)
{
  (void)m;
  PyObject *capsule, *keep;
  if (!PyArg_ParseTuple(args, "OO:_from_capsule", &capsule, &keep)) return NULL;
  int versioned = PyCapsule_IsValid(capsule, "dltensor_versioned");
  if (!versioned && !PyCapsule_IsValid(capsule, "dltensor"))
    return pyx_invalid("dlpack", "from_dlpack: the producer gave no unused DLPack capsule "
                       "(one can be taken once)");
  const char *name = versioned ? "dltensor_versioned" : "dltensor";
  void *managed = PyCapsule_GetPointer(capsule, name);
  xfer_ctx *ctx = pyx_ctx();
  if (!managed || !ctx) return NULL;
  xfer_tensor *t;
  xfer_error err;
  if (xfer_tensor_from_dlpack(ctx, managed, versioned, &t, &err)) return pyx_raise(&err);
  if (PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned" : "used_dltensor")) {
    xfer_tensor_release(t);
    return NULL;
  }
  return pyx_tensor_new(t, keep == Py_None ? NULL : keep);
}

static PyMethodDef tensor_functions[] = {
  {"empty", (PyCFunction)(void (*)(void))m_empty, METH_VARARGS | METH_KEYWORDS,
   "empty(shape, dtype='f32', device='host') -> Tensor\n\nAn uninitialised tensor."},
  {"from_bytes", (PyCFunction)(void (*)(void))m_from_bytes, METH_VARARGS | METH_KEYWORDS,
   "from_bytes(data, dtype, shape, device='host') -> Tensor\n\nA tensor holding a copy of raw "
   "little-endian elements."},
  {"_from_capsule", m_from_capsule, METH_VARARGS, NULL},
  {NULL, NULL, 0, NULL},
};

int pyx_tensor_register(PyObject *cls)
{
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, pyx_tensor_base)) {
    PyErr_SetString(PyExc_TypeError, "_register: Tensor must subclass _xferlua.Tensor");
    return -1;
  }
  Py_XDECREF(tensor_class);
  Py_INCREF(cls);
  tensor_class = (PyTypeObject *)cls;
  return 0;
}

int pyx_tensor_init(PyObject *module)
{
  PyType_Slot slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_tp_doc, "A tensor on one of xferlua's devices (made by xferlua's functions, never "
                "directly)."},
    {0, NULL},
  };
  pyx_tensor_base = pyx_add_type(module, "xferlua._xferlua.Tensor", sizeof(pyx_tensor),
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                 slots);
  if (!pyx_tensor_base) return -1;
  return PyModule_AddFunctions(module, tensor_functions);
}
