/*
** module.c -- xferlua._xferlua: the context (one per process, opened by the first call that
** needs it), devices and runtimes, the settings (config), memory, synchronize, and the
** registration of the package's classes (Tensor, Job, the exceptions).
*/
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "pyx.h"

static xfer_ctx *ctx;

xfer_ctx *pyx_ctx(void)
{
  if (ctx) return ctx;
  xfer_error err;
  xfer_code rc;
  /* (the GIL held: one thread opens it; opening takes the drivers' time, once) */
  rc = xfer_ctx_open(&ctx, &err);
  if (rc) {
    ctx = NULL;
    pyx_raise(&err);
  }
  return ctx;
}

/* The devices found by name so far: a move names its target each call, and the core's lookup
** parses the name; this compares it with those seen (a few). */
#define KNOWN 64
static struct {
  char name[48];
  xfer_device *dev;
} known[KNOWN];
static int nknown;

static xfer_device *by_name(const char *name)
{
  for (int i = 0; i < nknown; i++)
    if (!strcmp(known[i].name, name)) {
      xfer_device *dev = known[i].dev;
      if (!xfer_device_is_closed(dev) && xfer_device_listed(dev)) return dev;
      known[i] = known[--nknown]; /* closed (found again reopens it) or gone: ask the core */
      break;
    }
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  xfer_device *dev;
  xfer_error err;
  if (xfer_device_find(c, name, &dev, &err)) {
    pyx_raise(&err);
    return NULL;
  }
  size_t len = strlen(name);
  if (nknown < KNOWN && len < sizeof known[0].name) {
    memcpy(known[nknown].name, name, len + 1);
    known[nknown++].dev = dev;
  }
  return dev;
}

xfer_device *pyx_device(PyObject *o)
{
  if (!o) return by_name("host");
  if (PyUnicode_Check(o)) {
    const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
    return s ? by_name(s) : NULL;
  }
  PyObject *name = PyObject_GetAttrString(o, "name"); /* an xferlua.Device */
  if (!name || !PyUnicode_Check(name)) {
    Py_XDECREF(name);
    PyErr_Clear();
    pyx_invalid("device", "a device is a name ('host', 'cuda:0', ...) or an xferlua.Device");
    return NULL;
  }
  xfer_device *dev = by_name(PyUnicode_AsUTF8AndSize(name, NULL));
  Py_DECREF(name);
  return dev;
}

/* -- devices and runtimes -- */

static PyObject *info_dict(xfer_device *dev)
{
  xfer_device_info i;
  xfer_error err;
  if (xfer_device_get_info(dev, &i, &err)) return pyx_raise(&err);
  char uuid[40] = "";
  if (i.has_uuid) xfer_uuid_text(i.uuid, uuid, sizeof uuid);
  return Py_BuildValue("{s:s,s:s,s:i,s:s,s:s,s:s,s:K,s:K,s:O,s:s,s:s,s:(ii),s:O,s:s,s:O}",
                       "name", i.name, "runtime", i.runtime, "index", i.index, "label", i.label,
                       "platform", i.platform, "vendor", i.vendor,
                       "total_memory", (unsigned long long)i.total_memory,
                       "max_alloc", (unsigned long long)i.max_alloc, "unified", i.unified ? Py_True : Py_False,
                       "uuid", uuid, "pci_bus_id", i.pci_bus_id, "compute_capability", i.cc_major, i.cc_minor,
                       "closed", i.closed ? Py_True : Py_False, "backing", i.backing,
                       "remote", i.remote ? Py_True : Py_False);
}

/* _devices() -> [info dict] of every device listed */
static PyObject *m_devices(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  PyObject *out = PyList_New(0);
  size_t n = xfer_device_count(c);
  for (size_t i = 0; out && i < n; i++) {
    xfer_device *dev = xfer_device_at(c, i);
    if (!dev || !xfer_device_listed(dev)) continue;
    PyObject *d = info_dict(dev);
    if (!d || PyList_Append(out, d)) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  return out;
}

/* _device_info(name) -> info dict (opens a closed device again, as xfer_device_find does) */
static PyObject *m_device_info(PyObject *m, PyObject *name)
{
  (void)m;
  xfer_device *dev = pyx_device(name);
  return dev ? info_dict(dev) : NULL;
}

/* _device_close(name): the device's memory and driver objects given back once its moves end */
static PyObject *m_device_close(PyObject *m, PyObject *name)
{
  (void)m;
  xfer_device *dev = pyx_device(name);
  if (!dev) return NULL;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_device_close(dev, &err));
  if (rc) return pyx_raise(&err);
  Py_RETURN_NONE;
}

static PyObject *m_runtimes(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  PyObject *out = PyList_New(0);
  for (size_t i = 0; out && i < xfer_runtime_count(c); i++) {
    xfer_runtime_info r;
    xfer_error err;
    if (xfer_runtime_get(c, i, &r, &err)) {
      Py_DECREF(out);
      return pyx_raise(&err);
    }
    PyObject *d = Py_BuildValue("{s:s,s:O,s:s,s:n}", "name", r.name, "available",
                                r.available ? Py_True : Py_False, "reason", r.reason, "devices",
                                (Py_ssize_t)r.device_count);
    if (!d || PyList_Append(out, d)) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  return out;
}

static PyObject *m_memory(PyObject *m, PyObject *name)
{
  (void)m;
  xfer_device *dev = pyx_device(name);
  if (!dev) return NULL;
  xfer_memory_info i;
  xfer_device_memory(dev, &i);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
                       "in_use", i.in_use, "peak", i.peak, "allocated", i.allocated,
                       "peak_allocated", i.peak_allocated, "reserved", i.reserved,
                       "peak_reserved", i.peak_reserved, "cached", i.cached, "buffers", i.buffers,
                       "segments", i.segments, "driver_allocs", i.driver_allocs, "driver_frees",
                       i.driver_frees, "cache_hits", i.cache_hits, "oom_retries", i.oom_retries,
                       "objects", i.objects, "held", i.held);
}

static PyObject *m_synchronize(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  PYX_UNLOCKED(xfer_synchronize(c));
  Py_RETURN_NONE;
}

static PyObject *m_empty_cache(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
  (void)m;
  xfer_ctx *c = pyx_ctx();
  xfer_device *dev = NULL;
  if (!c || (nargs && args[0] != Py_None && !(dev = pyx_device(args[0])))) return NULL;
  PYX_UNLOCKED(xfer_empty_cache(c, dev));
  Py_RETURN_NONE;
}

/* -- settings: config(**changes) -> every setting -- */

typedef enum { BYTES, COUNT, FLAG, SECONDS } kind;
#define SETTING(field, k) {#field, k, offsetof(xfer_config, field), sizeof(((xfer_config *)0)->field)}
static const struct {
  const char *key;
  kind k;
  size_t at, size;
} settings[] = {
  SETTING(staging_chunk, BYTES), SETTING(staging_depth, COUNT), SETTING(cache, FLAG),
  SETTING(cache_limit, BYTES), SETTING(setaside_after, COUNT), SETTING(remote_timeout, SECONDS),
  SETTING(remote_chunk, BYTES), SETTING(remote_depth, COUNT), SETTING(remote_device_chunk, BYTES),
  SETTING(verify, FLAG), SETTING(timeout, SECONDS),
};
#undef SETTING
#define NSETTINGS (sizeof settings / sizeof settings[0])

static int store(size_t i, PyObject *v, xfer_config *cfg)
{
  char *field = (char *)cfg + settings[i].at;
  if (settings[i].k == FLAG) {
    if (!PyBool_Check(v)) {
      pyx_invalid("config", "config: '%s' must be True or False", settings[i].key);
      return -1;
    }
    int flag = v == Py_True;
    memcpy(field, &flag, sizeof flag);
    return 0;
  }
  if (settings[i].k == SECONDS) {
    double s = v == Py_False ? 0 : PyFloat_AsDouble(v);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    memcpy(field, &s, sizeof s);
    return 0;
  }
  long long x = PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
  if (x < 0) {
    PyErr_Clear();
    pyx_invalid("config", "config: '%s' must be a whole number >= 0", settings[i].key);
    return -1;
  }
  if (settings[i].k == COUNT) {
    int count = x > 10000000 ? 10000000 : (int)x; /* the core refuses it, saying its range */
    memcpy(field, &count, sizeof count);
  } else if (settings[i].size == sizeof(size_t)) {
    size_t bytes = (size_t)x;
    memcpy(field, &bytes, sizeof bytes);
  } else {
    uint64_t bytes = (uint64_t)x;
    memcpy(field, &bytes, sizeof bytes);
  }
  return 0;
}

static PyObject *load(size_t i, const xfer_config *cfg)
{
  const char *field = (const char *)cfg + settings[i].at;
  int whole;
  double s;
  size_t bytes;
  uint64_t wide;
  switch (settings[i].k) {
  case FLAG: memcpy(&whole, field, sizeof whole); return PyBool_FromLong(whole);
  case COUNT: memcpy(&whole, field, sizeof whole); return PyLong_FromLong(whole);
  case SECONDS: memcpy(&s, field, sizeof s); return PyFloat_FromDouble(s);
  default:
    if (settings[i].size == sizeof(size_t)) {
      memcpy(&bytes, field, sizeof bytes);
      return PyLong_FromSize_t(bytes);
    }
    memcpy(&wide, field, sizeof wide);
    return PyLong_FromUnsignedLongLong(wide);
  }
}

static PyObject *m_config(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  if (PyTuple_Size(args)) {
    PyErr_SetString(PyExc_TypeError, "config() takes keyword arguments only: config(timeout=2.0)");
    return NULL;
  }
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  xfer_config cfg;
  xfer_config_get(c, &cfg);
  if (kwargs && PyDict_Size(kwargs)) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
      size_t i = 0;
      while (i < NSETTINGS && strcmp(settings[i].key, k)) i++;
      if (i == NSETTINGS) return pyx_invalid("config", "config: no setting '%s'", k);
      if (store(i, value, &cfg)) return NULL;
    }
    xfer_error err;
    if (xfer_config_set(c, &cfg, &err)) return pyx_raise(&err);
  }
  PyObject *out = PyDict_New();
  for (size_t i = 0; out && i < NSETTINGS; i++) {
    PyObject *v = load(i, &cfg);
    if (!v || PyDict_SetItemString(out, settings[i].key, v)) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

/* _register(tensor_class, job_class, errors): the package's classes */
static PyObject *m_register(PyObject *m, PyObject *args)
{
  (void)m;
  PyObject *tensor, *job, *errors;
  if (!PyArg_ParseTuple(args, "OOO:_register", &tensor, &job, &errors)) return NULL;
  if (pyx_tensor_register(tensor) || pyx_job_register(job) || pyx_errors_register(errors)) return NULL;
  Py_RETURN_NONE;
}

static PyObject *m_codes(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  PyObject *out = PyList_New(0);
  for (int c = 1; out && c < XFER_E__COUNT; c++) {
    PyObject *s = PyUnicode_FromString(xfer_code_name((xfer_code)c));
    if (!s || PyList_Append(out, s)) Py_CLEAR(out);
    Py_XDECREF(s);
  }
  return out;
}

/* -- fault injection (xferlua.faults) -- */

static PyObject *m_fault_inject(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static char *names[] = {"runtime", "op", "nth", "count", "native", NULL};
  const char *runtime, *op;
  int nth = 1, count = 1;
  long long native = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss|iiL:inject", names, &runtime, &op, &nth, &count, &native))
    return NULL;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  xfer_fault f;
  memset(&f, 0, sizeof f);
  snprintf(f.runtime, sizeof f.runtime, "%s", runtime);
  snprintf(f.op, sizeof f.op, "%s", op);
  f.nth = nth;
  f.count = count;
  f.native = native;
  xfer_error err;
  if (xfer_fault_inject(c, &f, &err)) return pyx_raise(&err);
  Py_RETURN_NONE;
}

static PyObject *m_fault_clear(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  xfer_fault_clear(c);
  Py_RETURN_NONE;
}

static PyObject *m_fault_list(PyObject *m, PyObject *unused)
{
  (void)m, (void)unused;
  xfer_ctx *c = pyx_ctx();
  if (!c) return NULL;
  xfer_fault rules[64];
  size_t n = xfer_fault_list(c, rules, 64);
  PyObject *out = PyList_New(0);
  for (size_t i = 0; out && i < n && i < 64; i++) {
    PyObject *d = Py_BuildValue("{s:s,s:s,s:i,s:i,s:L}", "runtime", rules[i].runtime, "op", rules[i].op,
                                "nth", rules[i].nth, "count", rules[i].count, "native", rules[i].native);
    if (!d || PyList_Append(out, d)) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  return out;
}

static PyMethodDef functions[] = {
  {"_devices", m_devices, METH_NOARGS, NULL},
  {"_device_info", m_device_info, METH_O, NULL},
  {"_device_close", m_device_close, METH_O, NULL},
  {"runtimes", m_runtimes, METH_NOARGS,
   "runtimes() -> list[dict]\n\nEvery runtime (host, cuda, vulkan, opencl, remote): name, "
   "available, reason (why not, or which devices were left out), devices."},
  {"memory", m_memory, METH_O,
   "memory(device) -> dict\n\nThe device's caching allocator: in_use, peak, allocated, reserved, "
   "cached, held, ... (as xfer.memory in Lua)."},
  {"synchronize", m_synchronize, METH_NOARGS,
   "synchronize()\n\nWaits until no asynchronous move is running (collected ones included)."},
  {"empty_cache", (PyCFunction)(void (*)(void))m_empty_cache, METH_FASTCALL,
   "empty_cache(device=None)\n\nGives cached memory back to the drivers (one device's, or every one's)."},
  {"config", (PyCFunction)(void (*)(void))m_config, METH_VARARGS | METH_KEYWORDS,
   "config(**settings) -> dict\n\nChanges the settings named (staging_chunk, staging_depth, cache, "
   "cache_limit, setaside_after, remote_timeout, remote_chunk, remote_depth, remote_device_chunk, "
   "verify, timeout) and returns them all."},
  {"_register", m_register, METH_VARARGS, NULL},
  {"_fault_inject", (PyCFunction)(void (*)(void))m_fault_inject, METH_VARARGS | METH_KEYWORDS, NULL},
  {"_fault_clear", m_fault_clear, METH_NOARGS, NULL},
  {"_fault_list", m_fault_list, METH_NOARGS, NULL},
  {"_codes", m_codes, METH_NOARGS, NULL},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
  PyModuleDef_HEAD_INIT, "_xferlua",
  "xferlua's C API as Python types and functions (the package xferlua is what to import).", -1,
  functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__xferlua(void)
{
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (pyx_tensor_init(m) || pyx_job_init(m) || pyx_batch_init(m) || pyx_remote_init(m) ||
      PyModule_AddFunctions(m, pyx_file_functions) ||
      PyModule_AddStringConstant(m, "version", XFER_VERSION)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
