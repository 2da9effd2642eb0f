/*
** tensor.h -- tensors: made, checked, read, written and freed (tensor.c), wrapped around an
** application's memory (wrap.c), viewed (view.c) and lent through DLPack (dlpack.c); a view's
** elements moved in and out are view_io.h's. Layer 8 of docs/architecture.md, after
** view_io.c: each file calls those before it, the context, memory and the backends.
*/
#ifndef XFER_TENSOR_H
#define XFER_TENSOR_H

#include "backend_call.h"
#include "hold.h"
#include "memory.h"
#include "sums.h"
#include "view_io.h"

/* -- tensor.c ---------------------------------------------------------------------------- */

/* XFER_E_OK where t may be used in `op`: not NULL, not freed (nor its base), its device
** neither closed nor lost (xfer_tensor_check with one of the XFER_OPS, no name looked up). */
xfer_code xfer_tensor_usable(const xfer_tensor *t, xfer_op op, xfer_error *err);
/* XFER_E_INVALID (op `op`) where a move into t ended with its bytes half written (timeout,
** canceled) and nothing wrote it since. */
xfer_code xfer_tensor_valid(const xfer_tensor *t, xfer_op op, xfer_error *err);
/* How the last move into t ended: XFER_E_TIMEOUT and XFER_E_CANCELED leave it not valid,
** XFER_E_OK (written) valid; other ends change nothing. */
void xfer_tensor_set_valid(xfer_tensor *t, xfer_code how);
/* A new tensor whose allocation failure names `from` (NULL: a fresh tensor). */
xfer_code xfer_tensor_alloc(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                            const xfer_device *from, xfer_tensor **out, xfer_error *err);
/* A new tensor of its device: the context retained, listed for closing. */
void xfer_tensor_adopt(xfer_tensor *t);

#endif
