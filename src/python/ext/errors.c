/*
** errors.c -- xferlua's error record as a Python exception: xferlua.Error and one subclass per
** code (xferlua.Timeout, xferlua.Corrupt, ...: the package defines them and registers them
** here), with every field the record has, as the Lua error has them.
*/
#include <stdarg.h>
#include <stdio.h>

#include "pyx.h"

static PyObject *by_code; /* code name -> class */

int pyx_errors_register(PyObject *classes)
{
  if (!PyDict_Check(classes)) {
    PyErr_SetString(PyExc_TypeError, "_register: errors must be a dict of code name -> class");
    return -1;
  }
  Py_XDECREF(by_code);
  Py_INCREF(classes);
  by_code = classes;
  return 0;
}

static int set_str(PyObject *e, const char *name, const char *value, int none_if_empty)
{
  PyObject *v = none_if_empty && !value[0] ? Py_NewRef(Py_None)
                                           : PyUnicode_DecodeUTF8(value, (Py_ssize_t)strlen(value), "replace");
  if (!v) return -1;
  int rc = PyObject_SetAttrString(e, name, v);
  Py_DECREF(v);
  return rc;
}

static int set_obj(PyObject *e, const char *name, PyObject *v)
{
  if (!v) return -1;
  int rc = PyObject_SetAttrString(e, name, v);
  Py_DECREF(v);
  return rc;
}

static int fill(PyObject *e, const xfer_error *err, const char *code)
{
  const char *what = xfer_code_what(err->code);
  int file = err->file[0] != 0;
  if (set_str(e, "code", code, 0) || set_str(e, "what", what ? what : "", 0) ||
      set_str(e, "op", err->op, 0) || set_str(e, "from_", err->from, 0) ||
      set_str(e, "to", err->to, 0) || set_str(e, "device", err->device, 0) ||
      set_obj(e, "native", PyLong_FromLongLong(err->native)) ||
      set_str(e, "native_name", err->native_name, 0) ||
      set_obj(e, "retryable", PyBool_FromLong(err->retryable)) ||
      set_obj(e, "injected", PyBool_FromLong(err->injected)) ||
      set_obj(e, "element", err->element ? PyLong_FromLongLong(err->element) : Py_NewRef(Py_None)) ||
      set_str(e, "file", err->file, 1) || set_str(e, "tensor", file ? err->tensor : "", 1) ||
      set_obj(e, "offset", file && err->offset >= 0 ? PyLong_FromLongLong(err->offset) : Py_NewRef(Py_None)) ||
      set_str(e, "message", err->message, 0))
    return -1;
  return 0;
}

PyObject *pyx_raise(const xfer_error *err)
{
  const char *code = xfer_code_name(err->code);
  if (!code) code = "invalid";
  PyObject *cls = by_code ? PyDict_GetItemString(by_code, code) : NULL; /* borrowed */
  if (!cls && by_code) cls = PyDict_GetItemString(by_code, "");
  if (!cls) cls = PyExc_RuntimeError;
  PyObject *e = PyObject_CallFunction(cls, "s", err->message);
  if (!e) return NULL;
  if (cls != PyExc_RuntimeError && fill(e, err, code)) {
    Py_DECREF(e);
    return NULL;
  }
  PyErr_SetObject(cls, e);
  Py_DECREF(e);
  return NULL;
}

PyObject *pyx_invalid(const char *op, const char *fmt, ...)
{
  xfer_error err;
  memset(&err, 0, sizeof err);
  err.code = XFER_E_INVALID;
  err.op_id = XFER_OP_OTHER;
  err.offset = -1;
  snprintf(err.op, sizeof err.op, "%s", op);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err.message, sizeof err.message, fmt, ap);
  va_end(ap);
  return pyx_raise(&err);
}
