/*
** bench-cuda-raw.c -- the yardstick for scripts/bench: host<->device copies made with raw
** cuMemcpy* calls, no xferlua in between. Prints one line per measurement:
**   <direction> <memory> <bytes> <median seconds>
** for direction h2d/d2h and memory pinned (cuMemHostAlloc) or pageable (malloc).
**   cc bench-cuda-raw.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
*/
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      const char *name_ = "?";                                                        \
      cuGetErrorName(r_, &name_);                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_);    \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_copy(int h2d, CUdeviceptr dev, void *host, size_t n, int reps)
{
  double times[256] = {0};
  if (reps > 256) reps = 256;
  for (int i = -1; i < reps; i++) { /* run -1 warms up */
    double t0 = now();
    if (h2d)
      CHECK(cuMemcpyHtoD(dev, host, n));
    else
      CHECK(cuMemcpyDtoH(host, dev, n));
    if (i >= 0) times[i] = now() - t0;
  }
  qsort(times, (size_t)reps, sizeof times[0], by_value);
  return times[reps / 2];
}

int main(int argc, char **argv)
{
  CUdevice device;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&device, argc > 1 ? atoi(argv[1]) : 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, device));
  CHECK(cuCtxSetCurrent(ctx));
  for (int a = 2; a < argc; a++) {
    size_t n = strtoull(argv[a], NULL, 10);
    int reps = n >= (1u << 30) ? 10 : n >= (64u << 20) ? 20 : 100;
    CUdeviceptr dev;
    void *pinned, *pageable = malloc(n);
    CHECK(cuMemAlloc(&dev, n));
    CHECK(cuMemHostAlloc(&pinned, n, 0));
    memset(pinned, 1, n);
    memset(pageable, 1, n);
    for (int h2d = 1; h2d >= 0; h2d--) {
      printf("%s pinned %zu %.9f\n", h2d ? "h2d" : "d2h", n, median_copy(h2d, dev, pinned, n, reps));
      printf("%s pageable %zu %.9f\n", h2d ? "h2d" : "d2h", n,
             median_copy(h2d, dev, pageable, n, reps));
    }
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(dev));
    free(pageable);
  }
  CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
