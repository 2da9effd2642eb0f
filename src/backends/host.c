/*
** host.c -- the host runtime: tensors in page-aligned process memory, behind the same
** tables as every GPU runtime, so transfers and fault injection treat it alike.
*/
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/backend.h"

/* -- The checked wrapper ---------------------------------------------------------- */

/* Every host "driver" call (allocation, memcpy) asks here first whether a fault is
** injected, and reports a failure -- real (errno) or injected -- through host_fail. */
static int host_injected(xfer_device *dev, xfer_op op, int *errnum)
{
  long long native;
  if (!xfer_fault_hit(dev->ctx, "host", op, &native)) return 0;
  *errnum = native ? (int)native : op == XFER_OP_ALLOC ? ENOMEM : EIO;
  return 1;
}

static xfer_code host_fail(xfer_op op, int errnum, int injected, xfer_error *err)
{
  xfer_code code = xfer_op_failure(op); /* write, copy: the target failed */
  const char *name = strerrorname_np(errnum);
  int retryable = errnum == ENOMEM || errnum == EAGAIN || errnum == EINTR;
  return xfer_err_native(err, code, op, errnum, name ? name : "errno", strerror(errnum),
                         retryable, injected);
}

/* -- Vtable ----------------------------------------------------------------------- */

static void read_cpu_label(char *label, size_t cap)
{
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  char model[96] = "CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (strncmp(line, "model name", 10) || !colon) continue;
      snprintf(model, sizeof model, "%s", colon + 2);
      model[strcspn(model, "\n")] = '\0';
      break;
    }
    fclose(f);
  }
  snprintf(label, cap, "%s (%ld cores)", model, cores);
}

static xfer_code host_memory(xfer_device *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                             xfer_error *err)
{
  (void)dev;
  long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES),
       total = sysconf(_SC_PHYS_PAGES);
  if (page < 0 || avail < 0 || total < 0)
    return xfer_err_native(err, XFER_E_UNAVAILABLE, XFER_OP_MEMORY, errno, "sysconf",
                           strerror(errno), 0, 0);
  *free_bytes = (uint64_t)avail * (uint64_t)page;
  *total_bytes = (uint64_t)total * (uint64_t)page;
  return XFER_E_OK;
}

static xfer_code host_open(xfer_runtime *rt, xfer_error *err)
{
  xfer_device *dev = xfer_runtime_add_device(rt, err);
  if (!dev) return XFER_E_UNAVAILABLE;
  read_cpu_label(dev->label, sizeof dev->label);
  dev->unified = 1;
  uint64_t free_bytes = 0;
  if (host_memory(dev, &free_bytes, &dev->total_memory, err)) return XFER_E_UNAVAILABLE;
  return XFER_E_OK;
}

static xfer_code host_alloc(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err)
{
  int errnum;
  if (host_injected(dev, XFER_OP_ALLOC, &errnum)) return host_fail(XFER_OP_ALLOC, errnum, 1, err);
  *buf = xfer_host_pages_alloc(nbytes);
  if (!*buf) return host_fail(XFER_OP_ALLOC, ENOMEM, 0, err);
  return XFER_E_OK;
}

static void host_free(xfer_device *dev, void *buf, size_t nbytes)
{
  (void)dev; /* runtimes let go of it first: memory.c has them unpin the segment */
  xfer_host_pages_free(buf, nbytes);
}

static xfer_code host_write(xfer_device *dev, void *buf, size_t offset, const void *src,
                            size_t n, xfer_error *err)
{
  int errnum;
  if (host_injected(dev, XFER_OP_WRITE, &errnum)) return host_fail(XFER_OP_WRITE, errnum, 1, err);
  memcpy((char *)buf + offset, src, n);
  return XFER_E_OK;
}

static xfer_code host_read(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                           xfer_error *err)
{
  int errnum;
  if (host_injected(dev, XFER_OP_READ, &errnum)) return host_fail(XFER_OP_READ, errnum, 1, err);
  memcpy(dst, (const char *)buf + offset, n);
  return XFER_E_OK;
}

static xfer_code host_copy(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                           size_t src_offset, size_t n, xfer_error *err)
{
  int errnum;
  if (host_injected(dev, XFER_OP_COPY, &errnum)) return host_fail(XFER_OP_COPY, errnum, 1, err);
  memmove((char *)dst + dst_offset, (const char *)src + src_offset, n);
  return XFER_E_OK;
}

/* A batch within host memory: one fault check for the whole submission, as a GPU runtime's
** batch is one driver call. */
static xfer_code host_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  int errnum;
  if (host_injected(dev, XFER_OP_COPY, &errnum)) return host_fail(XFER_OP_COPY, errnum, 1, err);
  for (size_t i = 0; i < n; i++) {
    const xfer_piece *p = &pieces[i];
    char *dst = p->dst.buf ? (char *)p->dst.buf + p->dst.offset : p->dst.host;
    const char *src = p->src.buf ? (const char *)p->src.buf + p->src.offset : p->src.host;
    memcpy(dst, src, p->n);
  }
  return XFER_E_OK;
}

static void *host_address(xfer_device *dev, void *buf)
{
  (void)dev;
  return buf;
}

/* Memory the application owns: its pointer is the buffer (host_address gives it back). */
static xfer_code host_wrap(xfer_device *dev, const xfer_external *mem, void **buf, xfer_error *err)
{
  (void)dev;
  (void)err;
  *buf = mem->ptr;
  return XFER_E_OK;
}

static xfer_code host_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                           int to_device, xfer_error *err)
{
  return to_device ? host_write(dev, buf, offset, host, n, err)
                   : host_read(dev, buf, offset, host, n, err);
}

static const xfer_runtime_ops host_runtime = {
  .open = host_open,
  .close = NULL, /* the host device is freed with the context */
};
static const xfer_memory_ops host_memory_ops = {
  .alloc = host_alloc,
  .free = host_free,
  .host_address = host_address,
  .wrap = host_wrap,
  .info = host_memory,
};
static const xfer_copy_ops host_copies = {
  .host = host_move,
  .within = host_copy,
  .many = host_many,
};
const xfer_backend xfer_backend_host = {
  .version = XFER_BACKEND_VERSION,
  .name = "host",
  .alias = "cpu" /* what PyTorch users call it */,
  .external_kind = XFER_EXTERNAL_HOST,
  .dlpack_device_type = 1 /* kDLCPU */,
  .runtime = &host_runtime,
  .memory = &host_memory_ops,
  .copy = &host_copies,
};
