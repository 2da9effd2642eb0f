/*
** layout.c -- the arithmetic of a tensor's layout: packed strides, and how far a layout
** reaches. No memory is touched.
*/
#include "util.h"

void xfer_packed_strides(const xfer_shape *shape, int64_t *strides)
{
  int64_t step = 1;
  for (int i = shape->ndim; i-- > 0;) {
    strides[i] = step;
    step *= shape->dims[i] ? shape->dims[i] : 1;
  }
}

int xfer_strides_packed(const xfer_shape *shape, const int64_t *strides)
{
  int64_t step = 1;
  for (int i = shape->ndim; i-- > 0;) {
    if (shape->dims[i] == 0) return 1; /* no elements: any layout is packed */
    if (shape->dims[i] != 1 && strides[i] != step) return 0;
    step *= shape->dims[i];
  }
  return 1;
}

int64_t xfer_layout_extent(const xfer_shape *shape, const int64_t *strides)
{
  int64_t last = 0;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] == 0) return 0;
    last += (shape->dims[i] - 1) * strides[i];
  }
  return last + 1;
}
