/*
** files.c -- tensor files from Python (safetensors, .npy, .npz): a file's entries, a load of
** chosen entries onto chosen devices, a save, each also as a Job. The package's load and save
** (src/python/xferlua/files.py) choose each tensor's device and dtype and read shard indexes;
** the bytes move here, the GIL released.
*/
#include <string.h>

#include "pyx.h"

/* The I/O options of a load or save, from keyword arguments. */
static int file_opts(const char *op, PyObject *kwargs, xfer_file_opts *o)
{
  memset(o, 0, sizeof *o);
  if (!kwargs) return 0;
  PyObject *v;
  if ((v = PyDict_GetItemString(kwargs, "direct")) && v != Py_None)
    o->direct = PyObject_IsTrue(v) ? XFER_FILE_DIRECT_ON : XFER_FILE_DIRECT_OFF;
  if ((v = PyDict_GetItemString(kwargs, "engine")) && v != Py_None) {
    const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
    if (s && !strcmp(s, "io_uring")) o->engine = XFER_FILE_ENGINE_URING;
    else if (s && !strcmp(s, "threads")) o->engine = XFER_FILE_ENGINE_THREADS;
    else {
      pyx_invalid(op, "%s: engine is 'io_uring' or 'threads'", op);
      return -1;
    }
  }
  if ((v = PyDict_GetItemString(kwargs, "chunk")) && v != Py_None) {
    o->chunk = PyLong_AsSize_t(v);
    if (PyErr_Occurred()) return -1;
  }
  if ((v = PyDict_GetItemString(kwargs, "depth")) && v != Py_None) {
    o->depth = (int)PyLong_AsLong(v);
    if (PyErr_Occurred()) return -1;
  }
  if ((v = PyDict_GetItemString(kwargs, "sync")) && v != Py_None) o->sync = PyObject_IsTrue(v) ? 0 : -1;
  if ((v = PyDict_GetItemString(kwargs, "verify")) && v != Py_None) o->verify = PyObject_IsTrue(v) ? 1 : -1;
  if ((v = PyDict_GetItemString(kwargs, "timeout")) && v != Py_None) {
    if (v == Py_False) {
      o->timeout = -1;
    } else {
      o->timeout = PyFloat_AsDouble(v);
      if (PyErr_Occurred()) return -1;
      if (!(o->timeout > 0)) {
        pyx_invalid(op, "%s: timeout must be seconds above 0 (or False: none)", op);
        return -1;
      }
    }
  }
  return 0;
}

static int wants_async(PyObject *kwargs)
{
  PyObject *v = kwargs ? PyDict_GetItemString(kwargs, "asynchronous") : NULL;
  return v && PyObject_IsTrue(v) == 1;
}

static xfer_file *open_file(const char *path)
{
  xfer_ctx *ctx = pyx_ctx();
  if (!ctx) return NULL;
  xfer_file *f;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_file_open(ctx, path, &f, &err));
  if (rc) {
    pyx_raise(&err);
    return NULL;
  }
  return f;
}

static PyObject *shape_tuple(const xfer_shape *s)
{
  PyObject *t = PyTuple_New(s->ndim);
  for (int i = 0; t && i < s->ndim; i++) PyTuple_SetItem(t, i, PyLong_FromLongLong(s->dims[i]));
  return t;
}

/* _file_info(path) -> (format, size, [(name, dtype, shape, offset, nbytes, deflated, fortran)], metadata) */
static PyObject *m_file_info(PyObject *m, PyObject *args)
{
  (void)m;
  const char *path;
  if (!PyArg_ParseTuple(args, "s:open", &path)) return NULL;
  xfer_file *f = open_file(path);
  if (!f) return NULL;
  PyObject *entries = PyList_New(0), *meta = PyDict_New(), *out = NULL;
  size_t n = xfer_file_count(f);
  for (size_t i = 0; entries && meta && i < n; i++) {
    xfer_file_info e;
    xfer_error err;
    if (xfer_file_entry(f, i, &e, &err)) {
      pyx_raise(&err);
      goto done;
    }
    PyObject *row = Py_BuildValue("(ssNKKOO)", e.name, xfer_dtype_name(e.dtype), shape_tuple(&e.shape),
                                  (unsigned long long)e.offset, (unsigned long long)e.nbytes,
                                  e.deflated ? Py_True : Py_False, e.fortran ? Py_True : Py_False);
    if (!row || PyList_Append(entries, row)) {
      Py_XDECREF(row);
      goto done;
    }
    Py_DECREF(row);
  }
  for (size_t i = 0; entries && meta && i < xfer_file_metadata_count(f); i++) {
    const char *k, *v;
    if (!xfer_file_metadata(f, i, &k, &v)) continue;
    PyObject *value = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "replace");
    if (!value || PyDict_SetItemString(meta, k, value)) {
      Py_XDECREF(value);
      goto done;
    }
    Py_DECREF(value);
  }
  if (entries && meta)
    out = Py_BuildValue("(sKOO)", xfer_file_format(f), (unsigned long long)xfer_file_size(f), entries, meta);
done:
  Py_XDECREF(entries);
  Py_XDECREF(meta);
  xfer_file_close(f);
  return out;
}

int pyx_load_put(PyObject *out, PyObject *key, PyObject *t)
{
  if (!PyTuple_Check(key)) return PyDict_SetItem(out, key, t);
  PyObject *name = PyTuple_GetItem(key, 0);
  Py_ssize_t part = PyLong_AsSsize_t(PyTuple_GetItem(key, 1));
  Py_ssize_t parts = PyLong_AsSsize_t(PyTuple_GetItem(key, 2));
  if (!name || part < 0 || parts <= part) return -1;
  PyObject *list = PyDict_GetItem(out, name); /* borrowed */
  if (!list) {
    list = PyList_New(parts);
    for (Py_ssize_t k = 0; list && k < parts; k++) PyList_SetItem(list, k, Py_NewRef(Py_None));
    if (!list || PyDict_SetItem(out, name, list)) {
      Py_XDECREF(list);
      return -1;
    }
    Py_DECREF(list);
  }
  return PyList_SetItem(list, part, Py_NewRef(t));
}

/* One item of _load's list: (name, device, dtype or None), or for a part of a tensor split
** across devices (name, device, dtype, dim, begin, end, part, parts); its key in the result
** (the name, or (name, part, parts)) into *key. 0, or -1 and the exception set. */
static int load_item(xfer_file *f, const char *path, PyObject *o, xfer_load_item *it, PyObject **key)
{
  PyObject *name, *dev_o, *dtype_o;
  int dim = 0, part = 0, parts = 0;
  long long begin = 0, end = 0;
  if (!PyArg_ParseTuple(o, "UOO|iLLii:load", &name, &dev_o, &dtype_o, &dim, &begin, &end, &part, &parts))
    return -1;
  const char *s = PyUnicode_AsUTF8AndSize(name, NULL);
  long at = s ? xfer_file_find(f, s) : -1;
  if (at < 0) {
    pyx_invalid("load", "load: %s has no tensor '%s'", path, s ? s : "?");
    return -1;
  }
  it->entry = (size_t)at;
  if (!(it->dev = pyx_device(dev_o))) return -1;
  if (dtype_o != Py_None) {
    if (!PyUnicode_Check(dtype_o) || xfer_dtype_parse(PyUnicode_AsUTF8AndSize(dtype_o, NULL), &it->dtype)) {
      pyx_invalid("load", "load: unknown dtype for '%s'", s);
      return -1;
    }
    it->convert = 1;
  }
  if (PyTuple_Size(o) > 3) {
    *it = (xfer_load_item){ .entry = it->entry, .dev = it->dev, .convert = it->convert,
                            .dtype = it->dtype, .sliced = 1, .dim = dim, .begin = begin, .end = end };
    *key = Py_BuildValue("(Oii)", name, part, parts);
    return *key ? 0 : -1;
  }
  *key = Py_NewRef(name);
  return 0;
}

/* _load(path, items, **options): items a list of load_item's tuples; a dict {name: tensor} (a
** split tensor's name: the list of its parts), or a Job (asynchronous=True) whose wait() gives
** it. Nothing loaded stays on failure. */
static PyObject *m_load(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  const char *path;
  PyObject *list;
  if (!PyArg_ParseTuple(args, "sO:load", &path, &list)) return NULL;
  xfer_file_opts opts;
  if (file_opts("load", kwargs, &opts)) return NULL;
  PyObject *seq = PySequence_Tuple(list);
  if (!seq) return NULL;
  Py_ssize_t n = PyTuple_Size(seq);
  xfer_load_item *items = PyMem_Calloc(n ? (size_t)n : 1, sizeof *items);
  xfer_tensor **out = PyMem_Calloc(n ? (size_t)n : 1, sizeof *out);
  PyObject *names = PyList_New(n), *result = NULL;
  xfer_file *f = items && out && names ? open_file(path) : NULL;
  if (!f) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *key = NULL;
    if (load_item(f, path, PyTuple_GetItem(seq, i), &items[i], &key)) goto done;
    PyList_SetItem(names, i, key);
  }
  xfer_error err;
  xfer_code rc;
  if (wants_async(kwargs)) {
    xfer_job *job;
    PYX_UNLOCKED(rc = xfer_file_load_start(f, items, (size_t)n, &opts, &job, &err));
    if (rc) {
      pyx_raise(&err);
      goto done;
    }
    result = pyx_job_new(job, PYX_JOB_LOAD, names, NULL);
    names = NULL; /* the job's now */
    goto done;
  }
  PYX_UNLOCKED(rc = xfer_file_load(f, items, (size_t)n, &opts, out, &err));
  if (rc) {
    pyx_raise(&err);
    goto done;
  }
  result = PyDict_New();
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = NULL;
    if (result) t = pyx_tensor_new(out[i], NULL); /* (on failure it let go of out[i]) */
    else xfer_tensor_release(out[i]);
    out[i] = NULL;
    if (!t || pyx_load_put(result, PyList_GetItem(names, i), t)) Py_CLEAR(result);
    Py_XDECREF(t);
  }
done:
  if (f) xfer_file_close(f);
  PyMem_Free(items);
  PyMem_Free(out);
  Py_XDECREF(names);
  Py_DECREF(seq);
  return result;
}

/* _save(path, names, tensors, metadata, **options): None, or a Job (asynchronous=True) */
static PyObject *m_save(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  const char *path;
  PyObject *names_o, *tensors_o, *meta_o;
  if (!PyArg_ParseTuple(args, "sOOO:save", &path, &names_o, &tensors_o, &meta_o)) return NULL;
  xfer_file_opts opts;
  if (file_opts("save", kwargs, &opts)) return NULL;
  const char *format = NULL;
  PyObject *fmt = kwargs ? PyDict_GetItemString(kwargs, "format") : NULL;
  if (fmt && fmt != Py_None && !(format = PyUnicode_AsUTF8AndSize(fmt, NULL))) return NULL;
  xfer_ctx *ctx = pyx_ctx();
  PyObject *names = ctx ? PySequence_Tuple(names_o) : NULL, *tensors = names ? PySequence_Tuple(tensors_o) : NULL;
  PyObject *keys = tensors && meta_o != Py_None ? PyDict_Keys(meta_o) : NULL, *result = NULL;
  Py_ssize_t n = tensors ? PyTuple_Size(tensors) : 0, nmeta = keys ? PyList_Size(keys) : 0;
  const char **cnames = PyMem_Calloc((size_t)n + 1, sizeof *cnames);
  xfer_tensor **ts = PyMem_Calloc((size_t)n + 1, sizeof *ts);
  const char **mk = PyMem_Calloc((size_t)nmeta + 1, sizeof *mk), **mv = PyMem_Calloc((size_t)nmeta + 1, sizeof *mv);
  if (!tensors || (meta_o != Py_None && !keys) || !cnames || !ts || !mk || !mv) goto done;
  if (PyTuple_Size(names) != n) {
    pyx_invalid("save", "save: %zd names for %zd tensors", PyTuple_Size(names), n);
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (!(cnames[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(names, i), NULL)) ||
        !(ts[i] = pyx_tensor_of(PyTuple_GetItem(tensors, i), "save")))
      goto done;
  for (Py_ssize_t i = 0; i < nmeta; i++) {
    PyObject *k = PyList_GetItem(keys, i), *v = PyDict_GetItem(meta_o, k);
    if (!PyUnicode_Check(k) || !v || !PyUnicode_Check(v)) {
      pyx_invalid("save", "save: metadata maps strings to strings");
      goto done;
    }
    mk[i] = PyUnicode_AsUTF8AndSize(k, NULL);
    mv[i] = PyUnicode_AsUTF8AndSize(v, NULL);
  }
  xfer_error err;
  xfer_code rc;
  if (wants_async(kwargs)) {
    xfer_job *job;
    PYX_UNLOCKED(rc = xfer_file_save_start(ctx, path, format, cnames, ts, (size_t)n, mk, mv, (size_t)nmeta, &opts, &job, &err));
    if (rc) pyx_raise(&err);
    else result = pyx_job_new(job, PYX_JOB_SAVE, NULL, NULL);
    goto done;
  }
  PYX_UNLOCKED(rc = xfer_file_save(ctx, path, format, cnames, ts, (size_t)n, mk, mv, (size_t)nmeta, &opts, &err));
  if (rc) pyx_raise(&err);
  else result = Py_NewRef(Py_None);
done:
  PyMem_Free(cnames);
  PyMem_Free(ts);
  PyMem_Free(mk);
  PyMem_Free(mv);
  Py_XDECREF(keys);
  Py_XDECREF(tensors);
  Py_XDECREF(names);
  return result;
}

PyMethodDef pyx_file_functions[] = {
  {"_file_info", m_file_info, METH_VARARGS, NULL},
  {"_load", (PyCFunction)(void (*)(void))m_load, METH_VARARGS | METH_KEYWORDS, NULL},
  {"_save", (PyCFunction)(void (*)(void))m_save, METH_VARARGS | METH_KEYWORDS, NULL},
  {NULL, NULL, 0, NULL},
};
