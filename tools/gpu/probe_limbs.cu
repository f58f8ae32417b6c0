// Probe, not a server kernel: how fast can a one-row Q4_K product run if x enters the tensor cores as signed fixed
// point per 32 columns (a power-of-two scale, the integer split into int8 limbs) against the nibbles as u8? Each
// limb's dot is an exact int32 (mma m16n8k32), so the only roundings are a few defined float steps per group,
// which this probe replays on the CPU and compares bit for bit; it also times the kernel against the copy rate.
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -I src -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_limbs tools/gpu/probe_limbs.cu
//   /tmp/probe_limbs
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../tests/bench/bench_timer.h"
#include "backend/cuda/mma_formats.cuh"

namespace {

using tf::cuda::mma_ubyte_float;

constexpr uint32_t kMask = 0x0F0F0F0Fu;

template <bool kSignedB>
__device__ __forceinline__ void imma(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kSignedB)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

__host__ __device__ inline float byte_of(uint32_t w, int k) { return float((w >> (8 * k)) & 0xFF); }

// The group's integer dots of its limbs, combined: two limbs exactly (|D| < 2^24), three with two roundings.
template <int L>
__host__ __device__ inline float combine(const int (&d)[3]) {
  if constexpr (L == 2)
    return fmaf(float(d[0]), 256.0f, float(d[1]));
  else
    return fmaf(float(d[0]), 65536.0f, float(d[1] * 256 + d[2]));
}

// The limb dots of one 32-column step (column 0 of each C: x fills every column of B).
template <int L>
__device__ __forceinline__ void step_dots(const uint32_t (&a)[4], const uint2* xl, int grp, int t, int (&c)[3][4]) {
#pragma unroll
  for (int k = 0; k < L; ++k) {
    const uint2 b = __ldg(xl + (int64_t(grp) * L + k) * 4 + t);
    if (k == 0)
      imma<true>(c[k], a, b.x, b.y);
    else
      imma<false>(c[k], a, b.x, b.y);
  }
}

// Warp: a 16-output tile x KS slices; lane t takes output g + 8 (t & 1) (its 16q dot: 1/16 on the scale), kPair groups.
template <int L, int KS, bool kPair>
__global__ void __launch_bounds__(256) limb_kernel(const uint4* q, const uint32_t* meta, const uint2* xl,
                                                   const float2* gx, int n_in, int n_out, float* part) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, h = t & 1, par = kPair ? t >> 1 : 0;
  const int chunks = n_in / 256 / KS, tiles = n_out / 16;
  const int w = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (w >= tiles * chunks) return;
  const int tile = w / chunks, kc = w % chunks, steps = n_in / 32, slices = n_in / 256;
  uint4 wq[KS * 4];
#pragma unroll
  for (int i = 0; i < KS * 4; ++i) wq[i] = __ldg(q + (int64_t(tile) * (steps / 2) + kc * KS * 4 + i) * 32 + lane);
  const float unit = h ? 0.0625f : 1.0f;
  float p = 0.0f;
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    const int sl = kc * KS + s;
    uint32_t m[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) m[k] = __ldg(meta + ((int64_t(tile) * slices + sl) * 16 + g + 8 * h) * 5 + k);
    const float dq = __half2float(__ushort_as_half(uint16_t(m[0])));
    const float dm = __half2float(__ushort_as_half(uint16_t(m[0] >> 16)));
#pragma unroll
    for (int j = 0; j < 8; j += kPair ? 2 : 1) {
      const uint4 v = wq[s * 4 + j / 2];
      int d[3] = {0, 0, 0};
      int ce[3][4], co[3][4];
      {
        const uint32_t w0 = (j & 1) ? v.z : v.x, w1 = (j & 1) ? v.w : v.y;
        const uint32_t a[4] = {w0 & kMask, w0 & ~kMask, w1 & kMask, w1 & ~kMask};
        step_dots<L>(a, xl, sl * 8 + j, t, ce);
      }
      if constexpr (kPair) {
        const uint32_t a[4] = {v.z & kMask, v.z & ~kMask, v.w & kMask, v.w & ~kMask};
        step_dots<L>(a, xl, sl * 8 + j + 1, t, co);
      }
#pragma unroll
      for (int k = 0; k < L; ++k) {
        const int e = h ? ce[k][2] : ce[k][0];
        d[k] = kPair && par ? (h ? co[k][2] : co[k][0]) : e;
      }
      const int jj = j + par, grp = sl * 8 + jj;
      const float2 gs = __ldg(gx + grp);  // x's 2^-s and its group sum
      const float f = combine<L>(d);
      const float sc = __fmul_rn(__fmul_rn(dq, mma_ubyte_float(m[1 + j / 4], jj & 3)), __fmul_rn(gs.x, unit));
      const float mn = -__fmul_rn(dm, mma_ubyte_float(m[3 + j / 4], jj & 3));
      p = fmaf(mn, gs.y, fmaf(sc, f, p));
    }
  }
  if constexpr (kPair) p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, 2));  // even groups' sum + odd groups'
  if (t < 2) part[int64_t(kc) * n_out + tile * 16 + g + 8 * h] = p;
}

__global__ void reduce_kernel(const float* part, int chunks, int n_out, float* y) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= n_out) return;
  float s = part[o];
  for (int c = 1; c < chunks; ++c) s = __fadd_rn(s, part[int64_t(c) * n_out + o]);
  y[o] = s;
}

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Case {
  int n_in, n_out;
};

template <int L, int KS, bool kPair>
int run(const Case& cs, double copy_bw) {
  const int n_in = cs.n_in, n_out = cs.n_out, steps = n_in / 32, slices = n_in / 256, tiles = n_out / 16;
  std::vector<uint8_t> wv(size_t(n_out) * n_in);  // nibbles 0..15
  std::vector<uint32_t> meta(size_t(tiles) * slices * 16 * 5);
  uint64_t h = 12345;
  for (auto& v : wv) v = uint8_t((h = mix(h)) & 15);
  for (int o = 0; o < n_out; ++o)
    for (int sl = 0; sl < slices; ++sl) {
      uint32_t* m = &meta[((size_t(o / 16) * slices + sl) * 16 + o % 16) * 5];
      const uint16_t d = __half_as_ushort(__float2half(0.0005f + float((h = mix(h)) % 1000) * 1e-5f));
      const uint16_t dm = __half_as_ushort(__float2half(0.0002f + float((h = mix(h)) % 1000) * 1e-5f));
      m[0] = d | (uint32_t(dm) << 16);
      for (int k = 1; k < 5; ++k) m[k] = uint32_t(mix(h = mix(h))) & 0x3F3F3F3Fu;
    }
  // x: mostly unit-scale values with a few large outliers, as residual streams have.
  std::vector<float> x(n_in);
  for (int i = 0; i < n_in; ++i) {
    const double u = double((h = mix(h)) >> 11) * 0x1.0p-53 - 0.5;
    x[i] = float(u * ((h = mix(h)) % 64 == 0 ? 300.0 : 2.0));
  }
  // Limbs: per group a power-of-two scale with max |x| * 2^s < 2^(8L-1), the integer rounded to nearest.
  std::vector<int32_t> xi(n_in);
  std::vector<float2> gxs(steps);
  std::vector<uint2> xl(size_t(steps) * L * 4);
  const double top = std::ldexp(1.0, 8 * L - 1);
  for (int gI = 0; gI < steps; ++gI) {
    double mx = 0;
    for (int k = 0; k < 32; ++k) mx = std::fmax(mx, std::fabs(double(x[gI * 32 + k])));
    const int e = mx > 0 ? std::ilogb(mx) : 0, s = 8 * L - 2 - e;
    int64_t sum = 0;
    for (int k = 0; k < 32; ++k) {
      double v = std::nearbyint(std::ldexp(double(x[gI * 32 + k]), s));
      v = std::fmin(std::fmax(v, -top), top - 1);
      xi[gI * 32 + k] = int32_t(v);
      sum += int64_t(v);
    }
    gxs[gI] = make_float2(std::ldexp(1.0f, -s), std::ldexp(float(sum), -s));
    for (int t = 0; t < 4; ++t)
      for (int k = 0; k < L; ++k) {
        uint32_t b[2] = {0, 0};
        for (int half = 0; half < 2; ++half)
          for (int i = 0; i < 4; ++i) {
            const uint32_t u = uint32_t(xi[gI * 32 + 16 * half + 4 * t + i]);
            b[half] |= ((u >> (8 * (L - 1 - k))) & 0xFF) << (8 * i);
          }
        xl[(size_t(gI) * L + k) * 4 + t] = make_uint2(b[0], b[1]);
      }
  }
  // Weights: per tile, per pair of 32-column steps, per lane a uint4 of (w0, w1) for the two steps.
  std::vector<uint4> qv(size_t(tiles) * (steps / 2) * 32);
  for (int tile = 0; tile < tiles; ++tile)
    for (int sp = 0; sp < steps / 2; ++sp)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        uint32_t wd[4] = {0, 0, 0, 0};
        for (int jj = 0; jj < 2; ++jj)
          for (int half = 0; half < 2; ++half)
            for (int i = 0; i < 4; ++i) {
              const int col = (2 * sp + jj) * 32 + 16 * half + 4 * t + i;
              const uint32_t lo = wv[size_t(tile * 16 + g) * n_in + col],
                             hi = wv[size_t(tile * 16 + g + 8) * n_in + col];
              wd[2 * jj + half] |= (lo | (hi << 4)) << (8 * i);
            }
        qv[(size_t(tile) * (steps / 2) + sp) * 32 + lane] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
      }
  // The CPU replay of the same steps, and a float64 dot of the unrounded x for the error.
  const int chunks = slices / KS;
  std::vector<float> want(n_out);
  double worst = 0;
  for (int o = 0; o < n_out; ++o) {
    float tot = 0.0f;
    double exact = 0, cond = 0;
    for (int kc = 0; kc < chunks; ++kc) {
      float pp[2] = {0.0f, 0.0f};  // even and odd groups' sums under kPair, else one sum
      for (int sl = kc * KS; sl < (kc + 1) * KS; ++sl) {
        const uint32_t* m = &meta[((size_t(o / 16) * slices + sl) * 16 + o % 16) * 5];
        for (int j = 0; j < 8; ++j) {
          const int grp = sl * 8 + j;
          int d[3] = {0, 0, 0};
          for (int k = 0; k < 32; ++k) {
            const int u = xi[grp * 32 + k], wq = wv[size_t(o) * n_in + grp * 32 + k];
            for (int l = 0; l < L; ++l) {
              const int limb = l == 0 ? (u >> (8 * (L - 1))) : ((u >> (8 * (L - 1 - l))) & 0xFF);
              d[l] += wq * limb;
            }
          }
          const float f = combine<L>(d);
          const float dq = __half2float(__ushort_as_half(uint16_t(m[0])));
          const float dm = __half2float(__ushort_as_half(uint16_t(m[0] >> 16)));
          const float sc = (dq * byte_of(m[1 + j / 4], j & 3)) * gxs[grp].x;
          const float mn = -(dm * byte_of(m[3 + j / 4], j & 3));
          float& p = pp[kPair ? j & 1 : 0];
          p = std::fmaf(mn, gxs[grp].y, std::fmaf(sc, f, p));
          for (int k = 0; k < 32; ++k) {
            const double wf =
                double(dq) * byte_of(m[1 + j / 4], j & 3) * wv[size_t(o) * n_in + grp * 32 + k] + double(mn);
            exact += wf * x[grp * 32 + k];
            cond += std::fabs(wf * x[grp * 32 + k]);
          }
        }
      }
      const float p = kPair ? pp[0] + pp[1] : pp[0];
      tot = kc == 0 ? p : tot + p;
    }
    want[o] = tot;
    worst = std::fmax(worst, std::fabs(double(tot) - exact) / cond);
  }
  // Enough copies of the weights to stream past the 50 MB L2 on every call.
  const size_t wbytes = qv.size() * sizeof(uint4) + meta.size() * 4;
  const int copies = int((size_t(256) << 20) / wbytes) + 1;
  std::vector<uint4*> dq(copies);
  std::vector<uint32_t*> dmeta(copies);
  for (int c = 0; c < copies; ++c) {
    cudaMalloc(&dq[c], qv.size() * sizeof(uint4));
    cudaMalloc(&dmeta[c], meta.size() * 4);
    cudaMemcpy(dq[c], qv.data(), qv.size() * sizeof(uint4), cudaMemcpyHostToDevice);
    cudaMemcpy(dmeta[c], meta.data(), meta.size() * 4, cudaMemcpyHostToDevice);
  }
  uint2* dxl;
  float2* dgx;
  float *dpart, *dy;
  cudaMalloc(&dxl, xl.size() * sizeof(uint2));
  cudaMalloc(&dgx, gxs.size() * sizeof(float2));
  cudaMalloc(&dpart, size_t(chunks) * n_out * 4);
  cudaMalloc(&dy, size_t(n_out) * 4);
  cudaMemcpy(dxl, xl.data(), xl.size() * sizeof(uint2), cudaMemcpyHostToDevice);
  cudaMemcpy(dgx, gxs.data(), gxs.size() * sizeof(float2), cudaMemcpyHostToDevice);
  const int warps = tiles * chunks, blocks = (warps + 7) / 8;
  int at = 0;
  auto call = [&] {
    limb_kernel<L, KS, kPair><<<blocks, 256>>>(dq[at], dmeta[at], dxl, dgx, n_in, n_out, dpart);
    reduce_kernel<<<(n_out + 255) / 256, 256>>>(dpart, chunks, n_out, dy);
    at = (at + 1) % copies;
  };
  call();
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    std::printf("launch: %s\n", cudaGetErrorString(e));
    return 1;
  }
  std::vector<float> got(n_out);
  cudaMemcpy(got.data(), dy, size_t(n_out) * 4, cudaMemcpyDeviceToHost);
  const bool same = std::memcmp(got.data(), want.data(), size_t(n_out) * 4) == 0;
  int diff = 0;
  for (int o = 0; o < n_out; ++o) diff += std::memcmp(&got[o], &want[o], 4) != 0;
  const float ms = time_ms(call, 50);
  const float ms_k = time_ms(
      [&] {
        limb_kernel<L, KS, kPair><<<blocks, 256>>>(dq[at], dmeta[at], dxl, dgx, n_in, n_out, dpart);
        at = (at + 1) % copies;
      },
      50);
  const double floor_us = double(wbytes) / copy_bw * 1e6;
  std::printf("| %d x %d | %d limbs | %d slices a warp%s | %.2f | %.2f | %.2f | %.1f%% | %s (%d differ) | %.2e |\n",
              n_in, n_out, L, KS, kPair ? ", groups in pairs" : "", ms * 1e3, ms_k * 1e3, floor_us,
              100.0 * floor_us / (ms_k * 1e3), same ? "bit-equal to the CPU replay" : "DIFFERS", diff, worst);
  for (int c = 0; c < copies; ++c) cudaFree(dq[c]), cudaFree(dmeta[c]);
  cudaFree(dxl), cudaFree(dgx), cudaFree(dpart), cudaFree(dy);
  return same ? 0 : 1;
}

}  // namespace

int main() {
  const size_t copy_bytes = size_t(2) << 30;
  void *s, *d;
  cudaMalloc(&s, copy_bytes);
  cudaMalloc(&d, copy_bytes);
  cudaMemset(s, 1, copy_bytes);
  const float copy_ms = time_ms([&] { cudaMemcpy(d, s, copy_bytes, cudaMemcpyDeviceToDevice); }, 5);
  const double bw = 2.0 * double(copy_bytes) / (copy_ms * 1e-3);
  cudaFree(s), cudaFree(d);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", bw / 1e9);
  std::printf(
      "| Q4_K-like n_in x n_out | x | split | us with the slice sum | us alone | floor us (copy bw) | of floor (alone) "
      "| bits | max err / sum|wx| |\n");
  int bad = 0;
  for (const Case& c : {Case{4096, 28672}, Case{14336, 4096}, Case{4096, 4096}, Case{4096, 1024}}) {
    bad += run<3, 1, false>(c, bw);
    bad += run<3, 1, true>(c, bw);
    bad += run<3, 2, true>(c, bw);
    bad += run<2, 1, true>(c, bw);
  }
  std::printf("PROBE limbs: %s\n", bad ? "some outputs differ from the CPU replay" : "every output bit-equal");
  return bad ? 1 : 0;
}
