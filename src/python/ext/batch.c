/*
** batch.c -- many copies as one from Python: xferlua.batch(...) prepares an xfer_batch once
** (Batch: run() as often as needed, run_async(), a part at a time), copy_blocks / copy_many /
** move_many prepare, run and let go at once. Block tables come as NumPy integer arrays (read
** through __array_interface__, no Python loop per element), ranges or lists.
*/
#include <string.h>

#include "pyx.h"

typedef struct {
  PyObject_HEAD
  xfer_batch *batch;
  size_t nparts;
} pyx_batch;

static PyTypeObject *batch_type;

/* -- integer tables -- */

/* n integers of NumPy's typestr kind ('i' or 'u') and size at `data`, as int64 */
static int ints_of_array(const char *op, const char *what, const char *typestr, const char *data,
                         size_t n, int64_t *out)
{
  char kind = typestr[1];
  int size = atoi(typestr + 2);
  if ((kind != 'i' && kind != 'u') || (typestr[0] == '>' && size > 1)) {
    pyx_invalid(op, "%s: %s must hold integers (little-endian), not NumPy's '%s'", op, what, typestr);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const char *at = data + i * (size_t)size;
    switch (size * (kind == 'u' ? -1 : 1)) {
    case 8: { int64_t v; memcpy(&v, at, 8); out[i] = v; break; }
    case 4: { int32_t v; memcpy(&v, at, 4); out[i] = v; break; }
    case 2: { int16_t v; memcpy(&v, at, 2); out[i] = v; break; }
    case 1: { uint8_t v; memcpy(&v, at, 1); out[i] = v >= 128 ? (int64_t)v - 256 : v; break; }
    case -8: { uint64_t v; memcpy(&v, at, 8); out[i] = v > INT64_MAX ? -1 : (int64_t)v; break; }
    case -4: { uint32_t v; memcpy(&v, at, 4); out[i] = v; break; }
    case -2: { uint16_t v; memcpy(&v, at, 2); out[i] = v; break; }
    case -1: { uint8_t v; memcpy(&v, at, 1); out[i] = v; break; }
    default:
      pyx_invalid(op, "%s: %s: NumPy's '%s' is not an integer type", op, what, typestr);
      return -1;
    }
  }
  return 0;
}

/* A 1-D, packed array's integers through __array_interface__: 1 done, 0 not such an array */
static int from_array_interface(PyObject *o, const char *op, const char *what, int64_t **out, size_t *n)
{
  PyObject *ai = PyObject_GetAttrString(o, "__array_interface__");
  if (!ai) {
    PyErr_Clear();
    return 0;
  }
  int done = 0;
  PyObject *shape = PyDict_Check(ai) ? PyDict_GetItemString(ai, "shape") : NULL;
  PyObject *typestr = PyDict_Check(ai) ? PyDict_GetItemString(ai, "typestr") : NULL;
  PyObject *strides = PyDict_Check(ai) ? PyDict_GetItemString(ai, "strides") : NULL;
  PyObject *data = PyDict_Check(ai) ? PyDict_GetItemString(ai, "data") : NULL;
  if (shape && typestr && data && PyTuple_Check(shape) && PyTuple_Size(shape) == 1 &&
      (!strides || strides == Py_None) && PyTuple_Check(data)) {
    const char *ts = PyUnicode_AsUTF8AndSize(typestr, NULL);
    Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GetItem(shape, 0));
    void *ptr = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
    if (!ts || count < 0 || PyErr_Occurred()) {
      done = -1;
    } else {
      *n = (size_t)count;
      *out = PyMem_Malloc((*n ? *n : 1) * sizeof **out);
      if (!*out) {
        PyErr_NoMemory();
        done = -1;
      } else if (ints_of_array(op, what, ts, ptr, *n, *out)) {
        PyMem_Free(*out);
        done = -1;
      } else {
        done = 1;
      }
    }
  }
  Py_DECREF(ai);
  return done;
}

int pyx_int64s(PyObject *o, const char *op, const char *what, int64_t **out, size_t *n)
{
  int got = from_array_interface(o, op, what, out, n);
  if (got) return got < 0 ? -1 : 0;
  PyObject *seq = PySequence_Tuple(o); /* a range, a list, a strided array's items */
  if (!seq) {
    PyErr_Clear();
    pyx_invalid(op, "%s: %s must be a NumPy integer array, a range or a list of ints", op, what);
    return -1;
  }
  Py_ssize_t count = PyTuple_Size(seq);
  *n = (size_t)count;
  *out = PyMem_Malloc((*n ? *n : 1) * sizeof **out);
  if (!*out) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    (*out)[i] = PyLong_AsLongLong(PyTuple_GetItem(seq, i));
    if ((*out)[i] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      pyx_invalid(op, "%s: %s[%zd] is not an integer", op, what, i);
      PyMem_Free(*out);
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  return 0;
}

/* -- the items of a batch -- */

/* block tables -> items; *items to PyMem_Free */
static int items_of_blocks(const char *op, xfer_tensor *dst, xfer_tensor *src, PyObject *src_blocks,
                           PyObject *dst_blocks, PyObject *block_bytes, xfer_batch_item **items, size_t *n)
{
  int64_t *sb = NULL, *db = NULL;
  size_t ns = 0, nd = 0;
  long long bytes = PyLong_AsLongLong(block_bytes);
  if (bytes == -1 && PyErr_Occurred()) return -1;
  int rc = -1;
  if (pyx_int64s(src_blocks, op, "src_blocks", &sb, &ns) || pyx_int64s(dst_blocks, op, "dst_blocks", &db, &nd))
    goto out;
  if (ns != nd) {
    pyx_invalid(op, "%s: %zu source blocks for %zu target blocks (one of each per copy)", op, ns, nd);
    goto out;
  }
  if (bytes <= 0 && ns) {
    pyx_invalid(op, "%s: block_bytes must be above 0", op);
    goto out;
  }
  size_t bb = bytes > 0 ? (size_t)bytes : 1;
  size_t have[2] = {xfer_tensor_nbytes(src) / bb, xfer_tensor_nbytes(dst) / bb};
  const int64_t *lists[2] = {sb, db};
  const char *names[2] = {"src_blocks", "dst_blocks"};
  for (int e = 0; e < 2; e++)
    for (size_t i = 0; i < ns; i++)
      if (lists[e][i] < 0 || (uint64_t)lists[e][i] >= have[e]) {
        pyx_invalid(op, "%s: %s[%zu] = %lld is out of range: the %s holds %zu blocks of %zu bytes "
                    "(numbered from 0)", op, names[e], i, (long long)lists[e][i],
                    e ? "target" : "source", have[e], bb);
        goto out;
      }
  *items = PyMem_Malloc((ns ? ns : 1) * sizeof **items);
  if (!*items) {
    PyErr_NoMemory();
    goto out;
  }
  for (size_t i = 0; i < ns; i++)
    (*items)[i] = (xfer_batch_item){dst, src, (size_t)db[i] * bb, (size_t)sb[i] * bb, bb};
  *n = ns;
  rc = 0;
out:
  PyMem_Free(sb);
  PyMem_Free(db);
  return rc;
}

static int size_field(PyObject *d, const char *key, size_t *out)
{
  PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
  if (!v) return 0;
  long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) return -1;
  if (x < 0) {
    pyx_invalid("batch", "batch: %s must not be negative", key);
    return -1;
  }
  *out = (size_t)x;
  return 0;
}

/* a list of (dst, src) pairs or {dst, src, dst_offset, src_offset, nbytes} dicts -> items */
static int items_of_list(const char *op, PyObject *list, xfer_batch_item **items, size_t *n)
{
  PyObject *seq = PySequence_Tuple(list);
  if (!seq) {
    PyErr_Clear();
    pyx_invalid(op, "%s: a list of (dst, src) pairs is needed", op);
    return -1;
  }
  Py_ssize_t count = PyTuple_Size(seq);
  *items = PyMem_Calloc(count ? (size_t)count : 1, sizeof **items);
  if (!*items) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject *e = PyTuple_GetItem(seq, i), *d = NULL, *s = NULL;
    xfer_batch_item *it = &(*items)[i];
    if (PyDict_Check(e)) {
      d = PyDict_GetItemString(e, "dst");
      s = PyDict_GetItemString(e, "src");
      if (size_field(e, "dst_offset", &it->dst_offset) || size_field(e, "src_offset", &it->src_offset) ||
          size_field(e, "nbytes", &it->nbytes))
        goto bad;
    } else if (PyTuple_Check(e) && PyTuple_Size(e) == 2) {
      d = PyTuple_GetItem(e, 0);
      s = PyTuple_GetItem(e, 1);
    }
    if (!d || !s) {
      pyx_invalid(op, "%s: element %zd must be a (dst, src) pair or a dict with dst and src", op, i);
      goto bad;
    }
    if (!(it->dst = pyx_tensor_of(d, op)) || !(it->src = pyx_tensor_of(s, op))) goto bad;
  }
  Py_DECREF(seq);
  *n = (size_t)count;
  return 0;
bad:
  Py_DECREF(seq);
  PyMem_Free(*items);
  return -1;
}

/* The keyword options every batch call takes. */
static int batch_opts(const char *op, PyObject *kwargs, xfer_transfer_opts *opts)
{
  pyx_move_kw kw = {0};
  if (kwargs) {
    kw.via = PyDict_GetItemString(kwargs, "via");
    kw.verify = PyDict_GetItemString(kwargs, "verify");
    kw.timeout = PyDict_GetItemString(kwargs, "timeout");
  }
  return pyx_move_opts(op, &kw, opts);
}

/* -- the Batch type -- */

static void batch_dealloc(PyObject *self)
{
  pyx_batch *o = (pyx_batch *)self;
  if (o->batch) xfer_batch_release(o->batch); /* a running job holds its own reference */
  pyx_free(self);
}

static xfer_batch *live(PyObject *self, const char *op)
{
  xfer_batch *b = ((pyx_batch *)self)->batch;
  if (!b) pyx_invalid(op, "%s: the batch was released", op);
  return b;
}

static PyObject *b_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
  xfer_batch *b = live(self, "run");
  if (!b) return NULL;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "run() takes at most a part's index");
    return NULL;
  }
  Py_ssize_t part = -1;
  if (nargs == 1 && args[0] != Py_None) {
    part = PyLong_AsSsize_t(args[0]);
    if (part == -1 && PyErr_Occurred()) return NULL;
    if (part < 0 || (size_t)part >= ((pyx_batch *)self)->nparts)
      return pyx_invalid("run", "run: part %zd of a batch of %zu parts (numbered from 0)", part,
                         ((pyx_batch *)self)->nparts);
  }
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = part < 0 ? xfer_batch_run(b, &err) : xfer_batch_run_part(b, (size_t)part, &err));
  if (rc) return pyx_raise(&err);
  return Py_NewRef(self);
}

static PyObject *b_run_async(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_batch *b = live(self, "run_async");
  if (!b) return NULL;
  xfer_job *job;
  xfer_error err;
  if (xfer_batch_start(b, &job, &err)) return pyx_raise(&err);
  return pyx_job_new(job, PYX_JOB_BATCH, NULL, self);
}

static PyObject *b_done(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_batch *b = live(self, "done");
  if (!b) return NULL;
  size_t n = xfer_batch_count(b);
  PyObject *out = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; out && i < n; i++) PyList_SetItem(out, (Py_ssize_t)i, PyBool_FromLong(xfer_batch_done(b, i)));
  return out;
}

static PyObject *b_plan(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_batch *b = live(self, "plan");
  if (!b) return NULL;
  size_t groups = 0;
  xfer_batch_groups(b, &groups, NULL);
  PyObject *out = PyList_New(0);
  for (size_t g = 0; out && g < groups; g++) {
    xfer_plan plan;
    xfer_error err;
    if (xfer_batch_plan(b, g, &plan, &err)) {
      Py_DECREF(out);
      return pyx_raise(&err);
    }
    PyObject *steps = PyList_New(0);
    for (int s = 0; steps && s < plan.nsteps; s++) {
      PyObject *v = PyUnicode_FromString(plan.steps[s]);
      if (!v || PyList_Append(steps, v)) Py_CLEAR(steps);
      Py_XDECREF(v);
    }
    PyObject *d = steps ? Py_BuildValue("{s:s,s:s,s:N}", "path", xfer_path_name(plan.path), "reason",
                                        plan.reason, "steps", steps)
                        : NULL;
    if (!d || PyList_Append(out, d)) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  return out;
}

static PyObject *b_release(PyObject *self, PyObject *unused)
{
  (void)unused;
  pyx_batch *o = (pyx_batch *)self;
  if (o->batch) xfer_batch_release(o->batch);
  o->batch = NULL;
  Py_RETURN_NONE;
}

static PyObject *b_enter(PyObject *self, PyObject *unused)
{
  (void)unused;
  return Py_NewRef(self);
}

static PyObject *b_exit(PyObject *self, PyObject *args)
{
  (void)args;
  PyObject *r = b_release(self, NULL);
  Py_XDECREF(r);
  if (!r) return NULL;
  Py_RETURN_FALSE;
}

static PyObject *b_get(PyObject *self, void *what)
{
  xfer_batch *b = live(self, "batch");
  if (!b) return NULL;
  size_t groups = 0, at_once = 0;
  xfer_batch_groups(b, &groups, &at_once);
  switch ((int)(intptr_t)what) {
  case 0: return PyLong_FromSize_t(xfer_batch_count(b));
  case 1: return PyLong_FromSize_t(xfer_batch_bytes(b));
  case 2: return PyLong_FromSize_t(groups);
  case 3: return PyLong_FromSize_t(at_once);
  default: return PyLong_FromSize_t(((pyx_batch *)self)->nparts);
  }
}

static PyGetSetDef batch_getset[] = {
  {"count", b_get, NULL, "the elements", (void *)0},
  {"bytes", b_get, NULL, "the bytes one run moves", (void *)1},
  {"groups", b_get, NULL, "groups of elements (one per pair of devices and way)", (void *)2},
  {"at_once", b_get, NULL, "groups a runtime takes in one submission", (void *)3},
  {"parts", b_get, NULL, "parts that run(k) runs alone (1: the whole batch)", (void *)4},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef batch_methods[] = {
  {"run", (PyCFunction)(void (*)(void))b_run, METH_FASTCALL,
   "run(part=None) -> self\n\nCopies what the sources hold now (the GIL released); run(k) runs "
   "part k alone. Raises the first element's error (e.element, from 1)."},
  {"run_async", b_run_async, METH_NOARGS, "run_async() -> Job\n\nrun() on xferlua's threads."},
  {"done", b_done, METH_NOARGS, "done() -> list[bool]\n\nWhich elements the last run completed."},
  {"plan", b_plan, METH_NOARGS, "plan() -> list[dict]\n\nHow each group moves (path, reason, steps)."},
  {"release", b_release, METH_NOARGS, "release()\n\nLets go of the batch now."},
  {"__enter__", b_enter, METH_NOARGS, NULL},
  {"__exit__", b_exit, METH_VARARGS, "released at the block's end"},
  {NULL, NULL, 0, NULL},
};

static PyObject *new_batch(const char *op, const xfer_batch_item *items, size_t n, const size_t *part_end,
                           size_t nparts, const xfer_transfer_opts *opts)
{
  xfer_batch *b;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = nparts ? xfer_batch_prepare_parts(items, n, part_end, nparts, opts, &b, &err)
                            : xfer_batch_prepare(items, n, opts, &b, &err));
  (void)op;
  if (rc) return pyx_raise(&err);
  pyx_batch *o = (pyx_batch *)pyx_alloc(batch_type);
  if (!o) {
    xfer_batch_release(b);
    return NULL;
  }
  o->batch = b;
  o->nparts = nparts ? nparts : 1;
  return (PyObject *)o;
}

/* The items of a call: a list (args[0]) or the block form (dst=, src=, ...). */
static int items_of_call(const char *op, PyObject *list, PyObject *kwargs, xfer_batch_item **items, size_t *n)
{
  if (list && list != Py_None) return items_of_list(op, list, items, n);
  PyObject *d = kwargs ? PyDict_GetItemString(kwargs, "dst") : NULL;
  PyObject *s = kwargs ? PyDict_GetItemString(kwargs, "src") : NULL;
  PyObject *sb = kwargs ? PyDict_GetItemString(kwargs, "src_blocks") : NULL;
  PyObject *db = kwargs ? PyDict_GetItemString(kwargs, "dst_blocks") : NULL;
  PyObject *bb = kwargs ? PyDict_GetItemString(kwargs, "block_bytes") : NULL;
  if (!d || !s || !sb || !db || !bb) {
    pyx_invalid(op, "%s: a list of (dst, src) pairs, or dst=, src=, src_blocks=, dst_blocks= and "
                "block_bytes=", op);
    return -1;
  }
  xfer_tensor *dt = pyx_tensor_of(d, op), *st = dt ? pyx_tensor_of(s, op) : NULL;
  if (!st) return -1;
  return items_of_blocks(op, dt, st, sb, db, bb, items, n);
}

static int known_keys(const char *op, PyObject *kwargs, const char *const *names)
{
  if (!kwargs) return 0;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(kwargs, &pos, &key, &value)) {
    const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
    int found = 0;
    for (int i = 0; k && names[i]; i++) found |= !strcmp(k, names[i]);
    if (!found) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", op, k ? k : "?");
      return -1;
    }
  }
  return 0;
}

/* batch(list=None, *, dst, src, src_blocks, dst_blocks, block_bytes, parts, via, verify, timeout) */
static PyObject *m_batch(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static const char *const names[] = {"dst", "src", "src_blocks", "dst_blocks", "block_bytes",
                                      "parts", "via", "verify", "timeout", NULL};
  PyObject *list = NULL;
  if (!PyArg_ParseTuple(args, "|O:batch", &list) || known_keys("batch", kwargs, names)) return NULL;
  xfer_transfer_opts opts;
  if (batch_opts("batch", kwargs, &opts)) return NULL;
  xfer_batch_item *items;
  size_t n;
  if (items_of_call("batch", list, kwargs, &items, &n)) return NULL;
  PyObject *parts = kwargs ? PyDict_GetItemString(kwargs, "parts") : NULL;
  int64_t *ends = NULL;
  size_t nparts = 0, *part_end = NULL;
  PyObject *out = NULL;
  if (parts && parts != Py_None && pyx_int64s(parts, "batch", "parts", &ends, &nparts)) goto done;
  if (nparts && !(part_end = PyMem_Malloc(nparts * sizeof *part_end))) {
    PyErr_NoMemory();
    goto done;
  }
  for (size_t k = 0; k < nparts; k++) {
    if (ends[k] < 0 || (k && ends[k] < ends[k - 1]) || (size_t)ends[k] > n ||
        (k == nparts - 1 && (size_t)ends[k] != n)) {
      pyx_invalid("batch", "batch: parts are the elements' ends, ascending, the last = %zu (the count)", n);
      goto done;
    }
    part_end[k] = (size_t)ends[k];
  }
  out = new_batch("batch", items, n, part_end, nparts, &opts);
done:
  PyMem_Free(part_end);
  PyMem_Free(ends);
  PyMem_Free(items);
  return out;
}

static PyObject *run_once(const char *op, const xfer_batch_item *items, size_t n, const xfer_transfer_opts *opts)
{
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_transfer_batch(items, n, opts, &err));
  (void)op;
  if (rc) return pyx_raise(&err);
  Py_RETURN_NONE;
}

/* copy_blocks(dst, src, src_blocks, dst_blocks, block_bytes, *, via, verify, timeout) */
static PyObject *m_copy_blocks(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static const char *const names[] = {"via", "verify", "timeout", NULL};
  PyObject *d, *s, *sb, *db, *bb;
  if (!PyArg_ParseTuple(args, "OOOOO:copy_blocks", &d, &s, &sb, &db, &bb) ||
      known_keys("copy_blocks", kwargs, names))
    return NULL;
  xfer_transfer_opts opts;
  if (batch_opts("copy_blocks", kwargs, &opts)) return NULL;
  xfer_tensor *dt = pyx_tensor_of(d, "copy_blocks"), *st = dt ? pyx_tensor_of(s, "copy_blocks") : NULL;
  if (!st) return NULL;
  xfer_batch_item *items;
  size_t n;
  if (items_of_blocks("copy_blocks", dt, st, sb, db, bb, &items, &n)) return NULL;
  PyObject *out = run_once("copy_blocks", items, n, &opts);
  PyMem_Free(items);
  if (!out) return NULL;
  Py_DECREF(out);
  return Py_NewRef(d);
}

/* copy_many(pairs, *, via, verify, timeout) */
static PyObject *m_copy_many(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static const char *const names[] = {"via", "verify", "timeout", NULL};
  PyObject *list;
  if (!PyArg_ParseTuple(args, "O:copy_many", &list) || known_keys("copy_many", kwargs, names)) return NULL;
  xfer_transfer_opts opts;
  if (batch_opts("copy_many", kwargs, &opts)) return NULL;
  xfer_batch_item *items;
  size_t n;
  if (items_of_list("copy_many", list, &items, &n)) return NULL;
  PyObject *out = run_once("copy_many", items, n, &opts);
  PyMem_Free(items);
  return out;
}

/* move_many(tensors, device, *, via, verify, timeout): new tensors, all or none */
static PyObject *m_move_many(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static const char *const names[] = {"via", "verify", "timeout", NULL};
  PyObject *list, *dev_o;
  if (!PyArg_ParseTuple(args, "OO:move_many", &list, &dev_o) || known_keys("move_many", kwargs, names))
    return NULL;
  xfer_transfer_opts opts;
  if (batch_opts("move_many", kwargs, &opts)) return NULL;
  xfer_device *dev = pyx_device(dev_o);
  PyObject *seq = dev ? PySequence_Tuple(list) : NULL;
  if (!seq) return NULL;
  Py_ssize_t n = PyTuple_Size(seq);
  xfer_batch_item *items = PyMem_Calloc(n ? (size_t)n : 1, sizeof *items);
  if (!items) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  PyObject *out = PyList_New(n);
  Py_ssize_t made = 0;
  xfer_error err;
  for (; out && made < n; made++) {
    xfer_tensor *src = pyx_tensor_of(PyTuple_GetItem(seq, made), "move_many"), *dst;
    if (!src) goto fail;
    if (xfer_tensor_empty(dev, xfer_tensor_dtype(src), xfer_tensor_shape(src), &dst, &err)) {
      err.element = made + 1;
      pyx_raise(&err);
      goto fail;
    }
    items[made] = (xfer_batch_item){dst, src, 0, 0, 0};
    PyObject *t = pyx_tensor_new(xfer_tensor_retain(dst), NULL);
    if (!t) {
      xfer_tensor_release(dst);
      goto fail;
    }
    PyList_SetItem(out, made, t);
  }
  if (out) {
    PyObject *ran = run_once("move_many", items, (size_t)n, &opts);
    if (!ran) goto fail;
    Py_DECREF(ran);
  }
  for (Py_ssize_t i = 0; i < made; i++) xfer_tensor_release(items[i].dst);
  PyMem_Free(items);
  Py_DECREF(seq);
  return out;
fail: /* none of the new tensors is kept */
  for (Py_ssize_t i = 0; i < made; i++) {
    xfer_tensor_free(items[i].dst, NULL);
    xfer_tensor_release(items[i].dst);
  }
  PyMem_Free(items);
  Py_DECREF(seq);
  Py_XDECREF(out);
  return NULL;
}

PyMethodDef pyx_batch_functions[] = {
  {"batch", (PyCFunction)(void (*)(void))m_batch, METH_VARARGS | METH_KEYWORDS,
   "batch(pairs=None, *, dst=None, src=None, src_blocks=None, dst_blocks=None, block_bytes=None, "
   "parts=None, via=None, verify=None, timeout=None) -> Batch\n\nA prepared batch: checked, grouped "
   "and planned once, run() as often as needed. Either a list of (dst, src) pairs (or dicts with "
   "dst, src, dst_offset, src_offset, nbytes: byte ranges of contiguous tensors), or blocks: block "
   "src_blocks[i] of src into block dst_blocks[i] of dst (NumPy integer arrays, ranges or lists; "
   "blocks of block_bytes numbered from 0). parts: the elements' ends of parts run(k) runs alone."},
  {"copy_blocks", (PyCFunction)(void (*)(void))m_copy_blocks, METH_VARARGS | METH_KEYWORDS,
   "copy_blocks(dst, src, src_blocks, dst_blocks, block_bytes, **options) -> dst"},
  {"copy_many", (PyCFunction)(void (*)(void))m_copy_many, METH_VARARGS | METH_KEYWORDS,
   "copy_many(pairs, **options)\n\nEvery (dst, src) pair copied as one batch."},
  {"move_many", (PyCFunction)(void (*)(void))m_move_many, METH_VARARGS | METH_KEYWORDS,
   "move_many(tensors, device, **options) -> list\n\nEvery tensor moved to device as one batch: the "
   "new tensors, or on failure none (the error's element names the one it failed on)."},
  {NULL, NULL, 0, NULL},
};

int pyx_batch_init(PyObject *module)
{
  PyType_Slot slots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_methods, batch_methods},
    {Py_tp_getset, batch_getset},
    {Py_tp_doc, "A prepared batch (xferlua.batch): checked, grouped and planned once."},
    {0, NULL},
  };
  batch_type = pyx_add_type(module, "xferlua.Batch", sizeof(pyx_batch),
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots);
  if (!batch_type) return -1;
  return PyModule_AddFunctions(module, pyx_batch_functions);
}
