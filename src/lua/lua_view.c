/*
** lua_view.c -- the tensor methods that look at part of a tensor: views (view, reshape,
** narrow, select, transpose, permute, slice, t[...]), one element (get, set, item), and the
** in-place writes (fill, zero, write). Indices are 1-based, as in Lua and Torch7.
*/
#include <stdio.h>
#include <string.h>

#include "binding.h"

static xfer_tensor *live(lua_State *L, int idx, const char *fname)
{
  xfer_tensor *t = xl_check_tensor(L, idx, fname);
  xfer_error err;
  if (xfer_tensor_check(t, fname, &err)) xl_raise(L, &err);
  return t;
}

/* A whole number in [lo, hi] at idx, or an invalid error naming `what`. */
static int64_t whole(lua_State *L, int idx, const char *fname, const char *what, int64_t lo,
                     int64_t hi)
{
  if (lua_type(L, idx) != LUA_TNUMBER)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number, not %s", fname, what,
                  lua_isnone(L, idx) ? "nothing" : luaL_typename(L, idx));
  lua_Number n = lua_tonumber(L, idx);
  if (!(n >= (lua_Number)lo && n <= (lua_Number)hi) || n != (lua_Number)(int64_t)n)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number in %lld..%lld, not %s",
                  fname, what, (long long)lo, (long long)hi, lua_tostring(L, idx));
  return (int64_t)n;
}

/* An index into a dimension of `size` entries: 1..size, or counted from the end -size..-1
** (-1 the last, as Python's); the 1-based index, or an invalid error naming `what`. */
static int64_t index_arg(lua_State *L, int idx, const char *fname, const char *what, int64_t size)
{
  if (lua_type(L, idx) == LUA_TNUMBER && lua_tonumber(L, idx) < 0 && size > 0) {
    lua_Number n = lua_tonumber(L, idx);
    if (n >= (lua_Number)-size && n == (lua_Number)(int64_t)n) return size + 1 + (int64_t)n;
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number in 1..%lld or -%lld..-1, not %s",
                  fname, what, (long long)size, (long long)size, lua_tostring(L, idx));
  }
  if (lua_type(L, idx) == LUA_TNUMBER && size > 0) {
    lua_Number n = lua_tonumber(L, idx);
    if (!(n >= 1 && n <= (lua_Number)size) || n != (lua_Number)(int64_t)n)
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number in 1..%lld or -%lld..-1, not %s",
                    fname, what, (long long)size, (long long)size, lua_tostring(L, idx));
  }
  return whole(L, idx, fname, what, 1, size);
}

static int dim_arg(lua_State *L, int idx, const char *fname, const xfer_shape *shape)
{
  if (shape->ndim == 0)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a 0-d tensor has no dimensions", fname);
  return (int)whole(L, idx, fname, "the dimension", 1, shape->ndim) - 1;
}

/* Pushes a view of t (a new userdata), or raises the core's error. */
static int push_view(lua_State *L, xfer_tensor *t, const xfer_shape *shape,
                     const int64_t *strides, int64_t first)
{
  void *box = xl_new_tensor_box(L);
  xfer_tensor *v;
  xfer_error err;
  if (xfer_tensor_view(t, shape, strides, first, &v, &err)) xl_raise(L, &err);
  xl_tensor_box_adopt(L, box, v);
  return 1;
}

struct layout {
  xfer_shape shape;
  int64_t strides[XFER_MAX_DIMS];
  int64_t first;
};

static void layout_of(xfer_tensor *t, struct layout *out)
{
  out->shape = *xfer_tensor_shape(t);
  memcpy(out->strides, xfer_tensor_strides(t), sizeof out->strides);
  out->first = (int64_t)xfer_tensor_first(t);
}

/* -- Views ------------------------------------------------------------------------------ */

/* The shape of view/reshape: a table, or the numbers from `idx` on; one -1 is inferred. */
static void new_shape(lua_State *L, int idx, const char *fname, size_t numel, xfer_shape *shape)
{
  int table = lua_istable(L, idx);
  int n = table ? (int)lua_objlen(L, idx) : lua_gettop(L) - idx + 1;
  if (n < 0) n = 0;
  if (n > XFER_MAX_DIMS)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a tensor has at most %d dimensions, not %d",
                  fname, XFER_MAX_DIMS, n);
  memset(shape, 0, sizeof *shape);
  shape->ndim = n;
  int infer = -1;
  size_t known = 1;
  for (int i = 0; i < n; i++) {
    if (table) lua_rawgeti(L, idx, i + 1);
    else lua_pushvalue(L, idx + i);
    char what[32];
    snprintf(what, sizeof what, "size %d", i + 1);
    int64_t d = whole(L, -1, fname, what, -1, (int64_t)9e15);
    lua_pop(L, 1);
    if (d == -1) {
      if (infer >= 0)
        xl_raise_code(L, XFER_E_INVALID, fname, "%s: only one size may be -1", fname);
      infer = i;
      d = 1;
    } else {
      known *= (size_t)d;
    }
    shape->dims[i] = d;
  }
  if (infer >= 0) {
    if (known != 0 && numel % known == 0) {
      shape->dims[infer] = (int64_t)(numel / known);
      known = numel;
    } else if (known == 0) { /* as PyTorch refuses it */
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: a shape with a size 0 holds 0 elements whatever "
                    "its size -1 is: give that size", fname);
    } else {
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: %zu elements do not divide into that shape",
                    fname, numel);
    }
  }
  if (known != numel)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a shape of %zu elements for a tensor of %zu",
                  fname, known, numel);
}

static void packed_strides(const xfer_shape *shape, int64_t *strides)
{
  int64_t step = 1;
  for (int i = shape->ndim; i-- > 0;) {
    strides[i] = step;
    step *= shape->dims[i] ? shape->dims[i] : 1;
  }
}

/* t:view(shape): the same elements in another shape; a contiguous tensor only. */
static int m_view(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "view");
  if (!xfer_tensor_is_contiguous(t))
    xl_raise_code(L, XFER_E_INVALID, "view", "view: the tensor is not contiguous (its strides do "
                  "not allow that shape): t:reshape(...) or t:contiguous():view(...)");
  xfer_shape shape;
  int64_t strides[XFER_MAX_DIMS];
  new_shape(L, 2, "view", xfer_tensor_numel(t), &shape);
  packed_strides(&shape, strides);
  return push_view(L, t, &shape, strides, (int64_t)xfer_tensor_first(t));
}

/* t:contiguous(): t itself when its elements lie packed, else a packed copy on its device. */
static int m_contiguous(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "contiguous");
  lua_settop(L, 1);
  if (xfer_tensor_is_contiguous(t)) return 1;
  void *box = xl_new_tensor_box(L);
  xfer_tensor *copy;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_to(t, xfer_tensor_device(t), NULL, &copy, &err)))
    xl_raise(L, &err);
  xl_tensor_box_adopt(L, box, copy);
  return 1;
}

/* t:reshape(shape): a view when the layout allows, else a view of a packed copy. */
static int m_reshape(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "reshape");
  xfer_shape shape;
  int64_t strides[XFER_MAX_DIMS];
  new_shape(L, 2, "reshape", xfer_tensor_numel(t), &shape);
  packed_strides(&shape, strides);
  if (xfer_tensor_is_contiguous(t))
    return push_view(L, t, &shape, strides, (int64_t)xfer_tensor_first(t));
  lua_pushcfunction(L, m_contiguous);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  xfer_tensor *packed = xl_check_tensor(L, -1, "reshape");
  return push_view(L, packed, &shape, strides, (int64_t)xfer_tensor_first(packed));
}

/* t:narrow(dim, start, length): `length` entries of dimension `dim` from `start`. */
static int m_narrow(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "narrow");
  struct layout v;
  layout_of(t, &v);
  int d = dim_arg(L, 2, "narrow", &v.shape);
  int64_t size = v.shape.dims[d];
  int64_t start = size ? index_arg(L, 3, "narrow", "the start", size) : whole(L, 3, "narrow", "the start", 1, 1);
  int64_t len = whole(L, 4, "narrow", "the length", 0, size - start + 1);
  v.first += (start - 1) * v.strides[d];
  v.shape.dims[d] = len;
  return push_view(L, t, &v.shape, v.strides, v.first);
}

static void drop_dim(struct layout *v, int d)
{
  for (int i = d; i + 1 < v->shape.ndim; i++) {
    v->shape.dims[i] = v->shape.dims[i + 1];
    v->strides[i] = v->strides[i + 1];
  }
  v->shape.ndim--;
}

/* t:select(dim, i): entry i of dimension dim, that dimension gone. */
static int m_select(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "select");
  struct layout v;
  layout_of(t, &v);
  int d = dim_arg(L, 2, "select", &v.shape);
  int64_t i = index_arg(L, 3, "select", "the index", v.shape.dims[d]);
  v.first += (i - 1) * v.strides[d];
  drop_dim(&v, d);
  return push_view(L, t, &v.shape, v.strides, v.first);
}

/* t:transpose([a, b]): dimensions a and b swapped (1 and 2 by default). */
static int m_transpose(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "transpose");
  struct layout v;
  layout_of(t, &v);
  int a = 0, b = 1;
  if (!lua_isnoneornil(L, 2) || !lua_isnoneornil(L, 3)) {
    a = dim_arg(L, 2, "transpose", &v.shape);
    b = dim_arg(L, 3, "transpose", &v.shape);
  } else if (v.shape.ndim < 2) {
    lua_settop(L, 1); /* nothing to swap: the tensor as it is, as torch.t does */
    return push_view(L, t, &v.shape, v.strides, v.first);
  }
  int64_t d = v.shape.dims[a], s = v.strides[a];
  v.shape.dims[a] = v.shape.dims[b];
  v.strides[a] = v.strides[b];
  v.shape.dims[b] = d;
  v.strides[b] = s;
  return push_view(L, t, &v.shape, v.strides, v.first);
}

/* t:permute(p1, p2, ...) or t:permute{...}: dimension i of the view is dimension p_i of t. */
static int m_permute(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "permute");
  struct layout from, v;
  layout_of(t, &from);
  v = from;
  int table = lua_istable(L, 2);
  int n = table ? (int)lua_objlen(L, 2) : lua_gettop(L) - 1;
  if (n != from.shape.ndim)
    xl_raise_code(L, XFER_E_INVALID, "permute", "permute: %d dimensions given for a tensor of %d",
                  n, from.shape.ndim);
  int used[XFER_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    if (table) lua_rawgeti(L, 2, i + 1);
    else lua_pushvalue(L, i + 2);
    int d = dim_arg(L, lua_gettop(L), "permute", &from.shape);
    lua_pop(L, 1);
    if (used[d]++)
      xl_raise_code(L, XFER_E_INVALID, "permute", "permute: dimension %d given twice", d + 1);
    v.shape.dims[i] = from.shape.dims[d];
    v.strides[i] = from.strides[d];
  }
  return push_view(L, t, &v.shape, v.strides, v.first);
}

/* An index of a slice entry: 1..size, or -1 for the last, -2 before it, ... */
static int64_t slice_index(lua_State *L, int idx, int64_t size, int dim, const char *fname)
{
  char what[48];
  snprintf(what, sizeof what, "the index for dimension %d", dim + 1);
  int64_t i = whole(L, idx, fname, what, -size, size);
  if (i == 0)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s is 0 (indices start at 1; -1 is the last)",
                  fname, what);
  return i < 0 ? size + i + 1 : i;
}

/* t:slice{e1, e2, ...}: per dimension, a number (that entry, the dimension dropped), {a, b}
** (entries a..b, both included; negative counts from the end), {a, b, step} (every step-th
** of them), {a} (entry a, kept), or {} / nothing (all of it). */
static int slice(lua_State *L, xfer_tensor *t, int spec, const char *fname)
{
  struct layout v;
  layout_of(t, &v);
  int n = (int)lua_objlen(L, spec);
  if (n > v.shape.ndim)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %d entries for a tensor of %d dimensions",
                  fname, n, v.shape.ndim);
  int drop[XFER_MAX_DIMS] = {0};
  for (int d = 0; d < n; d++) {
    lua_rawgeti(L, spec, d + 1);
    int e = lua_gettop(L);
    int64_t size = v.shape.dims[d];
    if (lua_type(L, e) == LUA_TNUMBER) {
      v.first += (slice_index(L, e, size, d, fname) - 1) * v.strides[d];
      drop[d] = 1;
    } else if (lua_istable(L, e)) {
      int parts = (int)lua_objlen(L, e);
      if (parts > 3)
        xl_raise_code(L, XFER_E_INVALID, fname, "%s: entry %d has %d numbers ({a, b, step} at "
                      "most)", fname, d + 1, parts);
      if (parts > 0) {
        lua_rawgeti(L, e, 1);
        int64_t a = slice_index(L, -1, size, d, fname);
        int64_t b = a;
        if (parts >= 2) {
          lua_rawgeti(L, e, 2);
          b = slice_index(L, -1, size, d, fname);
        }
        int64_t step = 1;
        if (parts == 3) {
          lua_rawgeti(L, e, 3);
          step = whole(L, -1, fname, "a step", 1, size ? size : 1);
        }
        if (b < a)
          xl_raise_code(L, XFER_E_INVALID, fname, "%s: entry %d runs from %lld back to %lld",
                        fname, d + 1, (long long)a, (long long)b);
        v.first += (a - 1) * v.strides[d];
        v.shape.dims[d] = (b - a) / step + 1;
        v.strides[d] *= step;
      }
    } else if (!lua_isnil(L, e)) {
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: entry %d is a %s (a number, {a, b} or {})",
                    fname, d + 1, luaL_typename(L, e));
    }
    lua_settop(L, e - 1);
  }
  for (int d = v.shape.ndim; d-- > 0;)
    if (drop[d]) drop_dim(&v, d);
  return push_view(L, t, &v.shape, v.strides, v.first);
}

static int m_slice(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "slice");
  if (!lua_istable(L, 2)) xl_arg_error(L, 2, "slice", "table of entries");
  return slice(L, t, 2, "slice");
}

static int m_is_contiguous(lua_State *L)
{
  lua_pushboolean(L, xfer_tensor_is_contiguous(live(L, 1, "is_contiguous")));
  return 1;
}

/* -- Elements -------------------------------------------------------------------------- */

static void push_element(lua_State *L, xfer_dtype dtype, const void *elem)
{
  xfer_shape scalar = {0, {0}};
  xl_push_values(L, dtype, &scalar, elem, 0);
}

/* The 0-based index given by n 1-based numbers from `idx`. */
static void element_index(lua_State *L, int idx, int n, const xfer_shape *shape, int64_t *index,
                          const char *fname)
{
  if (n != shape->ndim)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %d indices for a tensor of %d dimensions", fname,
                  n, shape->ndim);
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "index %d", i + 1);
    if (shape->dims[i] == 0)
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: dimension %d is empty", fname, i + 1);
    index[i] = index_arg(L, idx + i, fname, what, shape->dims[i]) - 1;
  }
}

/* t:get(i, j, ...): one element, one small read. */
static int m_get(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "get");
  int64_t index[XFER_MAX_DIMS];
  element_index(L, 2, lua_gettop(L) - 1, xfer_tensor_shape(t), index, "get");
  unsigned char elem[8];
  xfer_error err;
  if (xfer_tensor_get(t, index, lua_gettop(L) - 1, elem, &err)) xl_raise(L, &err);
  push_element(L, xfer_tensor_dtype(t), elem);
  return 1;
}

/* t:item(): the value of a one-element tensor. */
static int m_item(lua_State *L)
{
  xl_no_args_after(L, 1, "item");
  xfer_tensor *t = live(L, 1, "item");
  if (xfer_tensor_numel(t) != 1)
    xl_raise_code(L, XFER_E_INVALID, "item", "item: the tensor has %zu elements, not 1 "
                  "(t:get(i, ...) reads one of them)", xfer_tensor_numel(t));
  int64_t index[XFER_MAX_DIMS] = {0};
  unsigned char elem[8];
  xfer_error err;
  if (xfer_tensor_get(t, index, xfer_tensor_shape(t)->ndim, elem, &err)) xl_raise(L, &err);
  push_element(L, xfer_tensor_dtype(t), elem);
  return 1;
}

/* t:set(i, j, ..., value): one element, one small write; returns t. */
static int m_set(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "set");
  int n = lua_gettop(L) - 2;
  if (n < 0) xl_raise_code(L, XFER_E_INVALID, "set", "set: indices and a value expected");
  int64_t index[XFER_MAX_DIMS];
  element_index(L, 2, n, xfer_tensor_shape(t), index, "set");
  unsigned char elem[8];
  xl_store_value(L, lua_gettop(L), xfer_tensor_dtype(t), elem, "set", "");
  xfer_error err;
  if (xfer_tensor_set(t, index, n, elem, &err)) xl_raise(L, &err);
  lua_settop(L, 1);
  return 1;
}

/* -- In-place writes ------------------------------------------------------------------------ */

static int fill_with(lua_State *L, xfer_tensor *t, const void *elem)
{
  xfer_error err;
  if (xfer_tensor_fill(t, elem, &err)) xl_raise(L, &err);
  lua_settop(L, 1);
  return 1;
}

/* t:fill(v): every element v, in place on its device; returns t. */
static int m_fill(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "fill");
  if (lua_gettop(L) != 2) xl_raise_code(L, XFER_E_INVALID, "fill", "fill: one value expected");
  unsigned char elem[8];
  xl_store_value(L, 2, xfer_tensor_dtype(t), elem, "fill", "");
  return fill_with(L, t, elem);
}

static int m_zero(lua_State *L)
{
  xl_no_args_after(L, 1, "zero");
  unsigned char elem[8] = {0};
  return fill_with(L, live(L, 1, "zero"), elem);
}

/* t:write(data[, offset]): a string of raw bytes or a table of values written over the
** elements from `offset` (0: the first) in row-major order, in place; returns t. */
static int m_write(lua_State *L)
{
  xfer_tensor *t = live(L, 1, "write");
  xfer_dtype dtype = xfer_tensor_dtype(t);
  size_t esize = xfer_dtype_size(dtype), numel = xfer_tensor_numel(t);
  int64_t offset = lua_isnoneornil(L, 3) ? 0 : whole(L, 3, "write", "the offset", 0, (int64_t)numel);
  size_t n;
  const void *bytes;
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t len;
    bytes = lua_tolstring(L, 2, &len);
    if (len % esize)
      xl_raise_code(L, XFER_E_INVALID, "write", "write: %zu bytes are not whole %s elements (%zu "
                    "bytes each)", len, xfer_dtype_name(dtype), esize);
    n = len / esize;
  } else if (lua_istable(L, 2)) {
    xfer_shape shape;
    xl_table_shape(L, 2, &shape);
    n = 1;
    for (int i = 0; i < shape.ndim; i++) n *= (size_t)shape.dims[i];
    if (n > numel)
      xl_raise_code(L, XFER_E_INVALID, "write", "write: %zu values for a tensor of %zu", n, numel);
    void *packed = lua_newuserdata(L, n > 0 ? n * esize : 1); /* collected with the call */
    xl_table_store(L, 2, &shape, dtype, packed);
    bytes = packed;
  } else {
    xl_arg_error(L, 2, "write", "string or table");
  }
  if ((size_t)offset + n > numel)
    xl_raise_code(L, XFER_E_INVALID, "write", "write: %zu elements from offset %lld run past the "
                  "%zu of the tensor", n, (long long)offset, numel);
  xfer_error err;
  xfer_code rc;
  if (offset == 0 && n == numel) {
    rc = xfer_tensor_write(t, bytes, n * esize, &err);
  } else {
    if (!xfer_tensor_is_contiguous(t))
      xl_raise_code(L, XFER_E_INVALID, "write", "write: part of a non-contiguous tensor: write "
                    "all of it, or a view of the part (t:narrow, t:slice)");
    /* the part as a 1-D view of its own */
    xfer_shape line = {1, {(int64_t)n}};
    int64_t stride = 1;
    xfer_tensor *part;
    rc = xfer_tensor_view(t, &line, &stride, (int64_t)xfer_tensor_first(t) + offset, &part, &err);
    if (!rc) {
      rc = xfer_tensor_write(part, bytes, n * esize, &err);
      xfer_tensor_release(part);
    }
  }
  if (rc) xl_raise(L, &err);
  lua_settop(L, 1);
  return 1;
}

/* -- t[...] ----------------------------------------------------------------------------------- */

static int tensor_index(lua_State *L, xfer_tensor *t, int key)
{
  if (lua_istable(L, key)) {
    live(L, 1, "index");
    return slice(L, t, key, "index");
  }
  if (lua_type(L, key) != LUA_TNUMBER) return 0;
  live(L, 1, "index");
  const xfer_shape *shape = xfer_tensor_shape(t);
  if (shape->ndim == 0)
    xl_raise_code(L, XFER_E_INVALID, "index", "index: a 0-d tensor has no entries (t:item())");
  int64_t i = index_arg(L, key, "index", "the index", shape->dims[0]);
  if (shape->ndim == 1) { /* t[i] of a vector is its element, as in Torch7 */
    int64_t index[1] = {i - 1};
    unsigned char elem[8];
    xfer_error err;
    if (xfer_tensor_get(t, index, 1, elem, &err)) xl_raise(L, &err);
    push_element(L, xfer_tensor_dtype(t), elem);
    return 1;
  }
  struct layout v;
  layout_of(t, &v);
  v.first += (i - 1) * v.strides[0];
  drop_dim(&v, 0);
  return push_view(L, t, &v.shape, v.strides, v.first);
}

/* t[i] = v: element i of a vector, or every element of entry i of a larger tensor (a value
** filled in, or a tensor of that entry's shape copied in) -- so t[i][j] = v sets one element
** of a matrix. Other keys: fields are read-only. */
static int t_newindex(lua_State *L)
{
  if (lua_type(L, 2) != LUA_TNUMBER) return xl_read_only(L);
  xfer_tensor *t = live(L, 1, "newindex");
  const xfer_shape *shape = xfer_tensor_shape(t);
  if (shape->ndim == 0)
    xl_raise_code(L, XFER_E_INVALID, "newindex", "newindex: a 0-d tensor has no entries (t:fill(v))");
  int64_t i = index_arg(L, 2, "newindex", "the index", shape->dims[0]);
  xfer_error err;
  if (shape->ndim == 1) {
    int64_t index[1] = {i - 1};
    unsigned char elem[8];
    xl_store_value(L, 3, xfer_tensor_dtype(t), elem, "newindex", "");
    if (xfer_tensor_set(t, index, 1, elem, &err)) xl_raise(L, &err);
    return 0;
  }
  struct layout v;
  layout_of(t, &v);
  v.first += (i - 1) * v.strides[0];
  drop_dim(&v, 0);
  push_view(L, t, &v.shape, v.strides, v.first);
  xfer_tensor *row = xl_check_tensor(L, -1, "newindex");
  if (xl_test_udata(L, 3, XL_TENSOR)) {
    xfer_tensor *from = xl_check_tensor(L, 3, "newindex");
    if (xfer_transfer_copy(row, from, NULL, &err)) xl_raise(L, &err);
  } else if (lua_type(L, 3) == LUA_TNUMBER || lua_type(L, 3) == LUA_TBOOLEAN) {
    unsigned char elem[8];
    xl_store_value(L, 3, xfer_tensor_dtype(t), elem, "newindex", "");
    if (xfer_tensor_fill(row, elem, &err)) xl_raise(L, &err);
  } else {
    xl_raise_code(L, XFER_E_INVALID, "newindex", "newindex: t[i] = v takes a number, a boolean or an "
                  "xfer.Tensor of entry i's shape, not a %s", luaL_typename(L, 3));
  }
  return 0;
}

void xl_view_methods(lua_State *L, int methods)
{
  static const luaL_Reg fns[] = {
    {"view", m_view}, {"reshape", m_reshape}, {"contiguous", m_contiguous},
    {"is_contiguous", m_is_contiguous}, {"narrow", m_narrow}, {"select", m_select},
    {"transpose", m_transpose}, {"permute", m_permute}, {"slice", m_slice},
    {"get", m_get}, {"set", m_set}, {"item", m_item},
    {"fill", m_fill}, {"zero", m_zero}, {"write", m_write}, {NULL, NULL},
  };
  for (const luaL_Reg *f = fns; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, methods, f->name);
  }
}

/* xfer.Tensor's __index: a method (upvalue 1: xfer.Tensor, where scripts add their own), a
** field (upvalue 2: its getter's number, lua_tensor.c), or the element or view an index
** names. */
static int t_index(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "index");
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);
  if (lua_type(L, 2) != LUA_TSTRING) return tensor_index(L, t, 2); /* t[i], t[{...}] */
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(2));
  if (lua_isnil(L, -1)) return 0;
  return xl_tensor_field(L, t, (int)lua_tointeger(L, -1));
}

void xl_tensor_access(lua_State *L, int mt, int methods)
{
  lua_pushcfunction(L, t_newindex);
  lua_setfield(L, mt, "__newindex");
  lua_pushvalue(L, methods);
  lua_getfield(L, mt, "fields");
  lua_pushcclosure(L, t_index, 2);
  lua_setfield(L, mt, "__index");
}
