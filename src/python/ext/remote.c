/*
** remote.c -- remote devices from Python: connect(url, timeout=, token=) -> a Peer (name,
** devices, lost, close(); its devices move like any other, "nodeB/cuda:0"), serve(url, name=,
** token=, client_memory=) -> a Listener serving this process's devices on a thread of its own
** (url, stats(), close()). Both close when collected; the GIL is released while they connect.
*/
#include <string.h>

#include "pyx.h"
#include "xfer_remote.h"

typedef struct {
  PyObject_HEAD
  xfer_peer *peer; /* NULL once closed */
} pyx_peer;

typedef struct {
  PyObject_HEAD
  xfer_listener *listener;
} pyx_listener;

static PyTypeObject *peer_type, *listener_type;

static void peer_dealloc(PyObject *self)
{
  xfer_peer_close(((pyx_peer *)self)->peer); /* (NULL: closed already) */
  pyx_free(self);
}

static PyObject *p_close(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_peer *p = ((pyx_peer *)self)->peer;
  ((pyx_peer *)self)->peer = NULL;
  PYX_UNLOCKED(xfer_peer_close(p));
  Py_RETURN_NONE;
}

static xfer_peer *live_peer(PyObject *self)
{
  xfer_peer *p = ((pyx_peer *)self)->peer;
  if (!p) pyx_invalid("peer", "the peer was closed");
  return p;
}

static PyObject *p_name(PyObject *self, void *c)
{
  (void)c;
  xfer_peer *p = live_peer(self);
  return p ? PyUnicode_FromString(xfer_peer_name(p)) : NULL;
}

static PyObject *p_devices(PyObject *self, void *c)
{
  (void)c;
  xfer_peer *p = live_peer(self);
  if (!p) return NULL;
  PyObject *out = PyList_New(0);
  for (size_t i = 0; out && i < xfer_peer_device_count(p); i++) {
    PyObject *s = PyUnicode_FromString(xfer_device_name(xfer_peer_device(p, i)));
    if (!s || PyList_Append(out, s)) Py_CLEAR(out);
    Py_XDECREF(s);
  }
  return out;
}

static PyObject *p_lost(PyObject *self, void *c)
{
  (void)c;
  xfer_peer *p = ((pyx_peer *)self)->peer;
  return PyBool_FromLong(!p || xfer_peer_is_lost(p));
}

static PyObject *enter(PyObject *self, PyObject *unused)
{
  (void)unused;
  return Py_NewRef(self);
}

static PyObject *p_exit(PyObject *self, PyObject *args)
{
  (void)args;
  Py_DECREF(p_close(self, NULL));
  Py_RETURN_FALSE;
}

static PyGetSetDef peer_getset[] = {
  {"name", p_name, NULL, "what the server calls its machine ('nodeB')", NULL},
  {"devices", p_devices, NULL, "its devices' names here ('nodeB/cuda:0', ...)", NULL},
  {"lost", p_lost, NULL, "True once the peer was lost or closed", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef peer_methods[] = {
  {"close", p_close, METH_NOARGS, "close()\n\nDisconnects: its devices' tensors raise xferlua.PeerLost."},
  {"__enter__", enter, METH_NOARGS, NULL},
  {"__exit__", p_exit, METH_VARARGS, "closed at the block's end"},
  {NULL, NULL, 0, NULL},
};

static void listener_dealloc(PyObject *self)
{
  xfer_listener *l = ((pyx_listener *)self)->listener;
  if (l) {
    PYX_UNLOCKED(xfer_listener_close(l)); /* its thread ends first */
  }
  pyx_free(self);
}

static PyObject *l_close(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_listener *l = ((pyx_listener *)self)->listener;
  ((pyx_listener *)self)->listener = NULL;
  if (l) {
    PYX_UNLOCKED(xfer_listener_close(l));
  }
  Py_RETURN_NONE;
}

static PyObject *l_url(PyObject *self, void *c)
{
  (void)c;
  xfer_listener *l = ((pyx_listener *)self)->listener;
  if (!l) return pyx_invalid("serve", "the listener was closed");
  return PyUnicode_FromString(xfer_listener_url(l));
}

static PyObject *l_stats(PyObject *self, PyObject *unused)
{
  (void)unused;
  xfer_listener *l = ((pyx_listener *)self)->listener;
  if (!l) return pyx_invalid("serve", "the listener was closed");
  uint64_t clients, served, dropped;
  xfer_listener_stats(l, &clients, &served, &dropped);
  return Py_BuildValue("{s:K,s:K,s:K,s:K}", "clients", (unsigned long long)clients, "served",
                       (unsigned long long)served, "dropped", (unsigned long long)dropped, "canceled",
                       (unsigned long long)xfer_listener_canceled(l));
}

static PyObject *l_exit(PyObject *self, PyObject *args)
{
  (void)args;
  Py_DECREF(l_close(self, NULL));
  Py_RETURN_FALSE;
}

static PyGetSetDef listener_getset[] = {
  {"url", l_url, NULL, "where it listens ('ucx://127.0.0.1:40123': the port chosen for port 0)", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef listener_methods[] = {
  {"stats", l_stats, METH_NOARGS, "stats() -> dict\n\nclients now, requests served, clients dropped, requests canceled."},
  {"close", l_close, METH_NOARGS, "close()\n\nStops serving; its clients lose this peer."},
  {"__enter__", enter, METH_NOARGS, NULL},
  {"__exit__", l_exit, METH_VARARGS, "closed at the block's end"},
  {NULL, NULL, 0, NULL},
};

/* connect(url, timeout=None, token=None) -> Peer */
static PyObject *m_connect(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static char *names[] = {"url", "timeout", "token", NULL};
  const char *url, *token = NULL;
  double timeout = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|dz:connect", names, &url, &timeout, &token)) return NULL;
  xfer_ctx *ctx = pyx_ctx();
  if (!ctx) return NULL;
  xfer_connect_opts opts = {timeout, token};
  xfer_peer *peer;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_connect(ctx, url, &opts, &peer, &err));
  if (rc) return pyx_raise(&err);
  pyx_peer *o = (pyx_peer *)pyx_alloc(peer_type);
  if (!o) {
    xfer_peer_close(peer);
    return NULL;
  }
  o->peer = peer;
  return (PyObject *)o;
}

/* serve(url, name=None, token=None, client_memory=0) -> Listener, on a thread of its own */
static PyObject *m_serve(PyObject *m, PyObject *args, PyObject *kwargs)
{
  (void)m;
  static char *names[] = {"url", "name", "token", "client_memory", NULL};
  const char *url, *name = NULL, *token = NULL;
  unsigned long long quota = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|zzK:serve", names, &url, &name, &token, &quota)) return NULL;
  xfer_ctx *ctx = pyx_ctx();
  if (!ctx) return NULL;
  xfer_listen_opts opts = {name, token, 1, quota};
  xfer_listener *l;
  xfer_error err;
  xfer_code rc;
  PYX_UNLOCKED(rc = xfer_listen(ctx, url, &opts, &l, &err));
  if (rc) return pyx_raise(&err);
  pyx_listener *o = (pyx_listener *)pyx_alloc(listener_type);
  if (!o) {
    xfer_listener_close(l);
    return NULL;
  }
  o->listener = l;
  return (PyObject *)o;
}

static PyMethodDef remote_functions[] = {
  {"connect", (PyCFunction)(void (*)(void))m_connect, METH_VARARGS | METH_KEYWORDS,
   "connect(url, timeout=None, token=None) -> Peer\n\nJoins another machine's devices (a server: "
   "xferlua --serve, or xferlua.serve there) to this process's: they move like any other device, "
   "named 'NAME/DEVICE'. timeout: seconds a request may take before the peer is lost."},
  {"serve", (PyCFunction)(void (*)(void))m_serve, METH_VARARGS | METH_KEYWORDS,
   "serve(url, name=None, token=None, client_memory=0) -> Listener\n\nServes this process's devices "
   "at url ('ucx://0.0.0.0:13337'; port 0: one chosen) on a thread of its own until close()."},
  {NULL, NULL, 0, NULL},
};

static PyTypeObject *new_type(PyObject *module, const char *name, size_t size, void (*dealloc)(PyObject *),
                              PyMethodDef *methods, PyGetSetDef *getset, const char *doc)
{
  PyType_Slot slots[] = {
    {Py_tp_dealloc, dealloc}, {Py_tp_methods, methods}, {Py_tp_getset, getset},
    {Py_tp_doc, (void *)doc}, {0, NULL},
  };
  return pyx_add_type(module, name, size, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots);
}

int pyx_remote_init(PyObject *module)
{
  peer_type = new_type(module, "xferlua.Peer", sizeof(pyx_peer), peer_dealloc, peer_methods,
                       peer_getset, "A connection to another machine's devices (xferlua.connect).");
  listener_type = new_type(module, "xferlua.Listener", sizeof(pyx_listener), listener_dealloc,
                           listener_methods, listener_getset, "A server of this process's devices (xferlua.serve).");
  if (!peer_type || !listener_type) return -1;
  return PyModule_AddFunctions(module, remote_functions);
}
