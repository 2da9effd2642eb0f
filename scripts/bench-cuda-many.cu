// scripts/bench-cuda-many.cu -- a probe, not part of the build: for a batch of scattered blocks between
// pinned host memory and an H200 (4096 x 16 KiB and 1024 x 256 KiB in 1 GiB), the copy kernel's shapes
// (a block per piece, loads ahead, persistent blocks, a warp per piece) against the copy engine (a
// cudaMemcpyAsync per block, cudaMemcpyBatchAsync, both side by side with the kernel). Run on the GPU
// machine: nvcc -O2 -arch=sm_90 -o /tmp/many scripts/bench-cuda-many.cu && /tmp/many
// (docs/performance.md, 2026-12-04: every kernel shape 0.92-0.93x the DMA engine host -> device).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <algorithm>
#include <vector>
struct D { uint64_t dst, src, n; };
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)

__global__ void k0(const D *d) {          // current: block per piece, one 16 B per step
  D p = d[blockIdx.x];
  for (uint64_t o = threadIdx.x * 16; o < p.n; o += blockDim.x * 16)
    *(uint4 *)(p.dst + o) = __ldg((const uint4 *)(p.src + o));
}
// one piece by one block, each thread U loads of 16 bytes ahead of its stores
template <int U> __device__ void block_copy(const D &p) {
  uint64_t step = blockDim.x * 16;
  for (uint64_t o = threadIdx.x * 16; o < p.n; o += step * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) if (o + u * step < p.n) v[u] = __ldg((const uint4 *)(p.src + o + u * step));
#pragma unroll
    for (int u = 0; u < U; u++) if (o + u * step < p.n) *(uint4 *)(p.dst + o + u * step) = v[u];
  }
}
template <int U> __global__ void k1(const D *d) { block_copy<U>(d[blockIdx.x]); }  // block per piece
template <int U> __global__ void kp(const D *d, unsigned n) {   // persistent blocks walk pieces
  for (unsigned i = blockIdx.x; i < n; i += gridDim.x) block_copy<U>(d[i]);
}
template <int U> __global__ void kw(const D *d, unsigned n) {   // a warp per piece, persistent
  unsigned warps = gridDim.x * (blockDim.x / 32), w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned i = w; i < n; i += warps) {
    D p = d[i];
    for (uint64_t o = lane * 16; o < p.n; o += 512 * U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; u++) if (o + u * 512 < p.n) v[u] = __ldg((const uint4 *)(p.src + o + u * 512));
#pragma unroll
      for (int u = 0; u < U; u++) if (o + u * 512 < p.n) *(uint4 *)(p.dst + o + u * 512) = v[u];
    }
  }
}

static float med(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  size_t span = (size_t)1 << 30;
  char *host; CK(cudaHostAlloc(&host, span, cudaHostAllocPortable));
  char *dev; CK(cudaMalloc(&dev, span));
  for (size_t i = 0; i < span; i += 4096) host[i] = (char)i;
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const int REPS = 15;
  size_t sizes[2] = {16 << 10, 256 << 10}; int counts[2] = {4096, 1024};
  for (int c = 0; c < 2; c++) {
    size_t bs = sizes[c]; int n = counts[c]; size_t slots = span / bs;
    std::vector<size_t> perm(slots); for (size_t i = 0; i < slots; i++) perm[i] = i;
    srand(7); std::random_shuffle(perm.begin(), perm.end());
    std::vector<size_t> perm2 = perm; std::random_shuffle(perm2.begin(), perm2.end());
    for (int dir = 0; dir < 2; dir++) {
      std::vector<D> t(n);
      for (int i = 0; i < n; i++) {
        char *h = host + perm[i] * bs, *g = dev + perm2[i] * bs;
        t[i] = dir == 0 ? D{(uint64_t)g, (uint64_t)h, bs} : D{(uint64_t)h, (uint64_t)g, bs};
      }
      D *dt; CK(cudaMalloc(&dt, n * sizeof(D)));
      CK(cudaMemcpy(dt, t.data(), n * sizeof(D), cudaMemcpyHostToDevice));
      double bytes = (double)n * bs;
      auto timeit = [&](const char *name, auto launch) {
        std::vector<float> ms;
        for (int r = 0; r < REPS + 2; r++) {
          cudaEventRecord(a, s); launch(); cudaEventRecord(b, s); CK(cudaEventSynchronize(b));
          float m; cudaEventElapsedTime(&m, a, b); if (r >= 2) ms.push_back(m);
        }
        float m = med(ms);
        printf("%-10s %6d x %4zu KiB %-26s %8.3f ms %7.2f GB/s\n", dir ? "dev->host" : "host->dev", n, bs >> 10, name, m, bytes / m / 1e6);
      };
      timeit("contiguous copy engine", [&] { if (dir == 0) cudaMemcpyAsync(dev, host, (size_t)bytes, cudaMemcpyHostToDevice, s); else cudaMemcpyAsync(host, dev, (size_t)bytes, cudaMemcpyDeviceToHost, s); });
      unsigned pieces = n * (unsigned)(bs > (256u << 10) ? bs / (256u << 10) : 1);
      timeit("k0 block/piece 512", [&] { k0<<<pieces, 512, 0, s>>>(dt); });
      timeit("k0 + table upload", [&] { cudaMemcpyAsync(dt, t.data(), n * sizeof(D), cudaMemcpyHostToDevice, s); k0<<<pieces, 512, 0, s>>>(dt); });
      timeit("k1<2> 512", [&] { k1<2><<<pieces, 512, 0, s>>>(dt); });
      timeit("k1<4> 256", [&] { k1<4><<<pieces, 256, 0, s>>>(dt); });
      timeit("k1<8> 128", [&] { k1<8><<<pieces, 128, 0, s>>>(dt); });
      for (int per = 2; per <= 8; per *= 2) {
        char nm[64]; snprintf(nm, sizeof nm, "kp<4> 256 x%d/SM", per);
        timeit(nm, [&] { kp<4><<<sms * per, 256, 0, s>>>(dt, n); });
      }
      timeit("kw<4> 256 x8/SM", [&] { kw<4><<<sms * 8, 256, 0, s>>>(dt, n); });
      timeit("kw<8> 256 x8/SM", [&] { kw<8><<<sms * 8, 256, 0, s>>>(dt, n); });
      timeit("kw<8> 512 x4/SM", [&] { kw<8><<<sms * 4, 512, 0, s>>>(dt, n); });
      timeit("kw<4> 1024 x2/SM", [&] { kw<4><<<sms * 2, 1024, 0, s>>>(dt, n); });
      cudaStream_t s2; cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
      cudaEvent_t j1, j2; cudaEventCreateWithFlags(&j1, cudaEventDisableTiming); cudaEventCreateWithFlags(&j2, cudaEventDisableTiming);
      auto ce = [&](int lo, int hi, cudaStream_t st) {
        for (int i = lo; i < hi; i++) cudaMemcpyAsync((void *)t[i].dst, (void *)t[i].src, t[i].n, cudaMemcpyDefault, st);
      };
      timeit("CE loop async", [&] { ce(0, n, s); });
      std::vector<void *> ds(n), ss(n); std::vector<size_t> ns(n);
      for (int i = 0; i < n; i++) { ds[i] = (void *)t[i].dst; ss[i] = (void *)t[i].src; ns[i] = t[i].n; }
      cudaMemcpyAttributes at = {}; at.srcAccessOrder = cudaMemcpySrcAccessOrderStream; size_t ai = 0;
      timeit("CE cudaMemcpyBatchAsync", [&] { cudaError_t e = cudaMemcpyBatchAsync(ds.data(), ss.data(), ns.data(), n, &at, &ai, 1, s); if (e) printf("batch: %s\n", cudaGetErrorString(e)); });
      for (int pct = 25; pct <= 75; pct += 25) {
        char nm[64]; snprintf(nm, sizeof nm, "hybrid kernel %d%% + CE", pct);
        int cut = n * pct / 100;
        timeit(nm, [&] {
          cudaEventRecord(j1, s); cudaStreamWaitEvent(s2, j1, 0);
          k0<<<cut, 512, 0, s>>>(dt); ce(cut, n, s2);
          cudaEventRecord(j2, s2); cudaStreamWaitEvent(s, j2, 0);
        });
      }
      // check bytes of the last run
      std::vector<char> back(bs);
      D l = t[n - 1]; 
      if (dir == 0) { cudaMemcpy(back.data(), (void *)l.dst, bs, cudaMemcpyDeviceToHost); if (memcmp(back.data(), (void *)l.src, bs)) printf("MISMATCH\n"); }
      cudaFree(dt);
    }
  }
  return 0;
}
