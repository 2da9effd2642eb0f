/*
** group.c -- a batch group's plan: the ways it may run, best first, decided once from its
** route (the device that takes all of it in one submission, an importer of the other
** runtime's memory, the runners of each end through host chunks, and last element by element),
** and the parts of the way in use -- its pieces as the runner reaches their memory, made once
** and again only when a way is refused. The runner (transfer.c) runs the group and asks for the
** next way; batch.c makes the groups of a batch.
*/
#include <stdlib.h>
#include <string.h>

#include "group.h"

/* Paths on which one device's runtime can run a whole group: within a device, host <-> device,
** two runtimes in one device's memory. */
static int one_device_path(xfer_path p)
{
  return p == XFER_PATH_SAME_DEVICE || p == XFER_PATH_HOST || p == XFER_PATH_INTEROP;
}

/* The device that runs a whole group at once, when there is one: the device end of a host <->
** device group, the device of a group within it, or the device whose memory both ends of an
** interop group live in -- where its runtime takes batches (copy->many). Where one end's memory
** is exported to the other's runtime (Vulkan's to CUDA on one GPU), the importer runs the group
** over the import; and a host <-> device group whose device's memory a runtime of its GPU
** imports and runs batches over (CUDA for Vulkan on NVIDIA: one kernel where Vulkan would make
** a copy-engine region a block) goes to that runtime too (*imports set). Between two GPUs, the
** source's runtime where its batches reach the other GPU's memory (xfer_many_across). */
static xfer_device *many_device(const xfer_group *g, int *imports)
{
  *imports = 0;
  if (g->planned) return NULL;
  xfer_path p = g->route.path;
  if (p == XFER_PATH_INTEROP &&
      (g->route.share == XFER_SHARE_SRC_EXPORTS || g->route.share == XFER_SHARE_DST_EXPORTS)) {
    xfer_device *importer = g->route.share == XFER_SHARE_SRC_EXPORTS ? g->to : g->from;
    *imports = xfer_be_has_many(importer);
    return *imports ? importer : NULL;
  }
  if (p == XFER_PATH_HOST) {
    xfer_device *importer = xfer_route_many_importer(xfer_is_host(g->from) ? g->to : g->from);
    if (importer) {
      *imports = 1;
      return importer;
    }
  }
  xfer_device *runner = one_device_path(p) ? xfer_many_runner(g->from, g->to) : NULL;
  /* two GPUs a runtime joins (cuda:0 -> cuda:1, or OpenCL ends living in CUDA's memory): the
  ** source's batches over the target's memory in place, where they reach it */
  if (!runner && (p == XFER_PATH_SAME_RUNTIME || p == XFER_PATH_INTEROP))
    runner = xfer_many_across(g->from, g->to);
  return runner;
}

/* A host <-> device or within-a-device group's runner among the devices themselves, for memory
** a backing device does not hold. */
static xfer_device *own_runner(const xfer_group *g)
{
  return one_device_path(g->route.path) ? xfer_many_runner_own(g->from, g->to) : NULL;
}

/* Two devices that share no memory (staged, or through the host): where each end's runtime takes
** batches with host memory, the group is packed into host memory by one submission of the
** source's runner and scattered from it by one of the target's (*through: the packer). */
static xfer_device *through_host(const xfer_group *g, xfer_device **through, int own)
{
  *through = NULL;
  xfer_path p = g->route.path;
  if (g->planned || (p != XFER_PATH_STAGED && p != XFER_PATH_HOST) || xfer_is_host(g->from) ||
      xfer_is_host(g->to))
    return NULL;
  xfer_device *host = xfer_host_of(g->from->ctx);
  xfer_device *(*runner)(xfer_device *, xfer_device *) = own ? xfer_many_runner_own : xfer_many_runner;
  xfer_device *packer = runner(g->from, host), *scatterer = runner(host, g->to);
  if (!packer || !scatterer) return NULL;
  *through = packer;
  return scatterer;
}

/* One end of a piece as the group's runner reaches it: in place (its own memory, host memory,
** the memory it backs), or -- a group over imports -- through the import of the tensor's
** segment, made now and remembered in the group. 0: it cannot be reached. */
static int piece_end(xfer_group *gr, const xfer_tensor *t, size_t at, xfer_piece_end *out,
                     xfer_error *err)
{
  if (xfer_piece_end_of(t, at, gr->many, out)) return 1;
  if (!gr->imports) return 0;
  size_t v = 0;
  while (v < gr->nviews && gr->views[v].t != t) v++;
  if (v == gr->nviews) {
    if (v == XFER_GROUP_VIEWS || xfer_interop_view(t, gr->many, &gr->views[v].view, err)) return 0;
    gr->views[v].t = t;
    gr->nviews++;
  }
  *out = (xfer_piece_end){gr->views[v].view, t->offset + at, NULL};
  return 1;
}

/* The devices a group's run holds: its route's, and a runner that is neither end. */
int xfer_group_devices(const xfer_group *gr, xfer_device *devs[6])
{
  int n = xfer_route_devices(&gr->route, devs);
  if (gr->many && gr->many != gr->from && gr->many != gr->to) devs[n++] = gr->many;
  if (gr->through && gr->through != gr->from && gr->through != gr->many) devs[n++] = gr->through;
  return n;
}

/* The pieces of a group one device runs at once, or none (memory the runner cannot reach: a
** segment not backed, an import refused), when it runs one by one. */
static xfer_code group_pieces(xfer_group *gr, xfer_error *err)
{
  free(gr->pieces); /* a try before, with another runner */
  gr->pieces = malloc((gr->count ? gr->count : 1) * sizeof *gr->pieces);
  if (!gr->pieces) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  xfer_device *devs[6];
  xfer_hold h;
  xfer_code rc = xfer_hold_take(&h, devs, gr->imports ? xfer_group_devices(gr, devs) : 0, NULL, 0, err);
  if (rc) return rc;
  for (size_t k = 0; k < gr->count; k++) {
    const xfer_batch_item *e = &gr->items[gr->order[gr->first + k]];
    xfer_piece *p = &gr->pieces[k];
    p->n = xfer_item_bytes(e); /* never 0: such an element is in no group (moves_nothing) */
    xfer_error ignored; /* an import refused is no error: the group runs one by one */
    if (!piece_end(gr, e->dst, e->dst_offset, &p->dst, &ignored) ||
        !piece_end(gr, e->src, e->src_offset, &p->src, &ignored)) {
      free(gr->pieces);
      gr->pieces = NULL;
      gr->many = NULL;
      break;
    }
  }
  xfer_hold_drop(&h);
  return XFER_E_OK;
}

/* A group through host memory: each element's source end as the packer reaches it and its
** target end as the scatterer does, cut into chunks (batch_through.c). */
static xfer_code staged_pieces(xfer_group *gr, xfer_error *err)
{
  xfer_through_free(&gr->staged); /* a try before, with other runners */
  xfer_piece *ends = malloc((gr->count ? gr->count : 1) * sizeof *ends);
  if (!ends) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  xfer_code rc = XFER_E_OK;
  for (size_t k = 0; k < gr->count; k++) {
    const xfer_batch_item *e = &gr->items[gr->order[gr->first + k]];
    ends[k].n = xfer_item_bytes(e); /* never 0 (moves_nothing) */
    if (!xfer_piece_end_of(e->src, e->src_offset, gr->through, &ends[k].src) ||
        !xfer_piece_end_of(e->dst, e->dst_offset, gr->many, &ends[k].dst)) {
      gr->many = gr->through = NULL; /* memory a runner cannot reach: one by one */
      break;
    }
  }
  if (gr->many) {
    gr->staged.packer = gr->through;
    gr->staged.scatterer = gr->many;
    rc = xfer_through_make(&gr->staged, ends, gr->count, xfer_route_through_chunk(), err);
  }
  free(ends);
  return rc;
}

/* What the group's runner kept of its pieces is let go: they are changing, or going. */
void xfer_group_forget(xfer_group *gr)
{
  if (gr->keep && gr->many) xfer_be_many_forget(gr->many, gr->keep);
  gr->keep = 0;
  gr->runs = 0;
}

/* Before a run over imports (devices held): an import the pieces were made with may have gone
** with its importer's close and been made anew -- the pieces then point at the new one. */
xfer_code xfer_group_views_current(xfer_group *gr, xfer_error *err)
{
  for (size_t v = 0; v < gr->nviews; v++) {
    void *now = NULL, *then = gr->views[v].view;
    xfer_code rc = xfer_interop_view(gr->views[v].t, gr->many, &now, err);
    if (rc) return rc;
    if (now == then) continue;
    xfer_group_forget(gr);
    for (size_t k = 0; k < gr->count; k++) {
      if (gr->pieces[k].dst.buf == then) gr->pieces[k].dst.buf = now;
      if (gr->pieces[k].src.buf == then) gr->pieces[k].src.buf = now;
    }
    for (size_t w = 0; w < gr->nviews; w++)
      if (gr->views[w].view == then) gr->views[w].view = now;
  }
  return XFER_E_OK;
}

/* Adds a way unless it is the last one again (two choices that came to the same runner). */
static void add_way(xfer_group *gr, xfer_device *many, xfer_device *through, int imports)
{
  if (!many) return;
  const xfer_group_way *last = gr->nways ? &gr->ways[gr->nways - 1] : NULL;
  if (last && last->many == many && last->through == through && last->imports == imports) return;
  gr->ways[gr->nways++] = (xfer_group_way){many, through, imports};
}

/* The ways a group may run, best first, once: at once by the device many_device names (an
** importer of the other runtime's memory, or the devices' own runner), then -- after an
** importer -- by the device's own runtime (memory the importer cannot take: host memory CUDA
** does not pin); or packed through host chunks by the runners of each end (those of a backing
** device first, then the ends' own); and always, last, element by element. */
void xfer_group_ways(xfer_group *gr)
{
  gr->nways = 0;
  gr->way = -1;
  int imports = 0;
  xfer_device *many = many_device(gr, &imports);
  if (many) {
    add_way(gr, many, NULL, imports);
    add_way(gr, own_runner(gr), NULL, 0);
  } else {
    xfer_device *packer = NULL;
    xfer_device *scatterer = through_host(gr, &packer, 0);
    add_way(gr, scatterer, packer, 0);
    scatterer = through_host(gr, &packer, 1);
    add_way(gr, scatterer, packer, 0);
  }
  gr->ways[gr->nways++] = (xfer_group_way){NULL, NULL, 0}; /* element by element */
}

/* The group's next way whose parts can be made (memory its runner reaches): the runner asks
** this when a way is refused, and takes what the plan lists -- it chooses nothing itself. */
xfer_code xfer_group_next_way(xfer_group *gr, xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  xfer_group_forget(gr);
  while (!rc && gr->way + 1 < gr->nways) {
    const xfer_group_way *w = &gr->ways[++gr->way];
    gr->many = w->many, gr->through = w->through, gr->imports = w->imports;
    gr->nviews = 0;
    if (!gr->many) break; /* element by element: nothing to make */
    rc = gr->through ? staged_pieces(gr, err) : group_pieces(gr, err);
    if (!rc && gr->many) break; /* its parts made (else memory it cannot reach: the next) */
  }
  return rc;
}

void xfer_group_free(xfer_group *gr)
{
  xfer_group_forget(gr);
  free(gr->pieces);
  free(gr->uses);
  xfer_through_free(&gr->staged);
  gr->pieces = NULL;
  gr->uses = NULL;
}
