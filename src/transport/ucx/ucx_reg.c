/*
** ucx_reg.c -- host memory registered with a UCX context once (ucp_mem_map). xferlua's host
** tensors are carved from host segments; a message sent from or received into one carries the
** segment's memory handle, mapped the first time the node meets the segment, so that a
** transport that needs registered memory (RDMA: InfiniBand, RoCE) registers each segment once
** instead of looking the buffer up in its cache per message. Over tcp and shared memory UCX
** registers nothing, and the handle changes nothing there. The handle is kept with the
** segment (a pin the node owns, memory.c) and undone when the segment goes back to the system
** or the node closes. Memory that is not xferlua's (a wrapped host buffer outside the pool) is
** sent without a handle: UCX manages it itself.
*/
#include <string.h>

#include "../../core/faults.h"
#include "ucx_api.h"

/* Undoes a mapping and uncounts it. Runs under the host allocator's lock when the segment
** goes: UCX only, nothing of xferlua's. */
static void unmap(void *key, void *base, size_t size, void *pin)
{
  (void)base;
  ucx_node *node = key;
  ucs_status_t s = node->api->ucp_mem_unmap(node->context, pin);
  __atomic_sub_fetch(&node->mapped_segments, 1, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&node->mapped_bytes, size, __ATOMIC_RELAXED);
  if (s != UCS_OK) __atomic_add_fetch(&node->map_failures, 1, __ATOMIC_RELAXED); /* nothing else to do */
}

/* 1 with the host segment holding [ptr, ptr+n) where the node registers memory, else 0 */
static int segment_of(const ucx_node *node, const void *ptr, size_t n, xfer_host_span *span)
{
  return node->registers && node->context && node->ctx && n &&
         xfer_host_span_of(node->ctx, ptr, n, span);
}

ucp_mem_h xfer_ucx_memh_known(ucx_node *node, const void *ptr, size_t n)
{
  xfer_host_span span;
  return segment_of(node, ptr, n, &span) ? xfer_host_pin(node->ctx, span.base, node) : NULL;
}

ucp_mem_h xfer_ucx_memh(ucx_node *node, const void *ptr, size_t n)
{
  xfer_ctx *ctx = node->ctx;
  xfer_host_span span;
  if (!segment_of(node, ptr, n, &span)) return NULL;
  ucp_mem_h memh = xfer_host_pin(ctx, span.base, node);
  if (memh) return memh;
  ucp_mem_map_params_t mp;
  memset(&mp, 0, sizeof mp);
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = span.base;
  mp.length = span.size;
  long long native = 0; /* XFER_FAULTS=remote:map: a mapping refused (moves go on without) */
  if (xfer_fault_hit(ctx, "remote", XFER_OP_MAP, &native) ||
      node->api->ucp_mem_map(node->context, &mp, &memh) != UCS_OK) {
    __atomic_add_fetch(&node->map_failures, 1, __ATOMIC_RELAXED); /* UCX registers it itself */
    return NULL;
  }
  /* counted before it is kept: once kept, another thread may undo it (and uncount it) */
  __atomic_add_fetch(&node->mapped_segments, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&node->mapped_bytes, span.size, __ATOMIC_RELAXED);
  if (xfer_host_pin_keep_owned(ctx, span.base, node, memh, unmap)) {
    __atomic_add_fetch(&node->maps_made, 1, __ATOMIC_RELAXED);
    return memh;
  }
  /* another thread kept one first, or the segment has no room for another pin: this one
  ** would outlive the message unrecorded, so it is undone now (the other one, if any, is
  ** used; else UCX registers the buffer itself) */
  unmap(node, span.base, span.size, memh);
  return xfer_host_pin(ctx, span.base, node);
}

void xfer_ucx_request_memh(ucp_request_param_t *prm, ucp_mem_h memh)
{
  if (!memh) return;
  prm->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  prm->memh = memh;
}

void xfer_ucx_registered(const ucx_node *node, xfer_registered *out)
{
  out->segments = __atomic_load_n(&node->mapped_segments, __ATOMIC_RELAXED);
  out->bytes = __atomic_load_n(&node->mapped_bytes, __ATOMIC_RELAXED);
  out->made = __atomic_load_n(&node->maps_made, __ATOMIC_RELAXED);
  out->refused = __atomic_load_n(&node->map_failures, __ATOMIC_RELAXED);
}

void xfer_ucx_unmap_all(ucx_node *node)
{
  if (node->context && node->ctx) xfer_host_unpin_owner(node->ctx, node);
}

void xfer_ucx_request_kind(ucp_request_param_t *prm, xfer_memory_kind kind)
{
  if (kind != XFER_MEMORY_CUDA) return;
  prm->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  prm->memory_type = UCS_MEMORY_TYPE_CUDA;
}
