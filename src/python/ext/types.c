/*
** types.c -- what every type of the extension does the same way on the stable ABI: made from
** its slots and added to the module, its objects allocated by the type's own allocator (a
** subclass's too), and given back with the reference each object holds on its heap type.
*/
#include "pyx.h"

PyTypeObject *pyx_add_type(PyObject *module, const char *name, size_t size, unsigned int flags,
                           PyType_Slot *slots)
{
  PyType_Spec spec = {name, (int)size, 0, flags, slots};
  PyTypeObject *type = (PyTypeObject *)PyType_FromSpec(&spec);
  if (!type) return NULL;
  const char *short_name = strrchr(name, '.') ? strrchr(name, '.') + 1 : name;
  Py_INCREF(type); /* the module's reference, taken by PyModule_AddObject on success */
  if (PyModule_AddObject(module, short_name, (PyObject *)type)) {
    Py_DECREF(type);
    Py_DECREF(type);
    return NULL;
  }
  return type; /* and the caller's */
}

PyObject *pyx_alloc(PyTypeObject *type)
{
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  return alloc(type, 0);
}

void pyx_free(PyObject *self)
{
  PyTypeObject *type = Py_TYPE(self);
  freefunc free_ = (freefunc)PyType_GetSlot(type, Py_tp_free);
  free_(self);
  Py_DECREF(type); /* a heap type's objects hold a reference on it */
}
