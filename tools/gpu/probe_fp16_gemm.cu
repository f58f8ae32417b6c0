// Probe, not a server kernel: the prompt rows' Q4_K product of f16_prompt.cuh (one fp16 wgmma a 16-column step)
// timed against cuBLAS on the 8B shapes, its bits checked against an mma.sync kernel over the same fragments (what a
// one-row kernel would run) and its error against float64. Build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -I src -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_f16 \
//     tools/gpu/probe_fp16_gemm.cu -lcublas && /tmp/probe_f16
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/f16_prompt.cuh"
#include "backend/cuda/mma_ops.cuh"

namespace {

using tf::cuda::F16Args;
using tf::cuda::F16W;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kQ4K = int(tf::GgmlType::Q4_K);

// What decode would run: a warp per 16 outputs x 8 rows, one mma.sync m16n8k16 a step over the same fragments.
__global__ void ref_kernel(tf::cuda::DeviceMatrix w, const __half* __restrict__ x16, const int* __restrict__ xe,
                           float* __restrict__ y, int64_t n_rows) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x, row0 = int64_t(blockIdx.y) * 8;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint32_t meta[2][5];
  for (int64_t u = 0; u < w.units; ++u) {
    if (u % 4 == 0) {
      const uint32_t* p = reinterpret_cast<const uint32_t*>(w.s) + ((tile * w.slices + u / 4) * 16 + g) * 5;
      for (int hr = 0; hr < 2; ++hr)
        for (int k = 0; k < 5; ++k) meta[hr][k] = p[40 * hr + k];
    }
    uint32_t a[4][4];
    F16W<kQ4K>::frags(meta, int(u % 4), {reinterpret_cast<const uint4*>(w.q)[(tile * w.units + u) * 32 + lane]},
                      ldexpf(1.0f, w.f16_exp), a);
    for (int st = 0; st < 4; ++st) {
      const __half* xr = x16 + (row0 + g) * w.n_in + u * 64 + st * 16 + 2 * t;
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xr), b1 = *reinterpret_cast<const uint32_t*>(xr + 8);
      tf::cuda::mma_m16n8k16_f16(c, a[st], b0, b1);
    }
  }
  for (int e = 0; e < 4; ++e) {
    const int64_t o = tile * 16 + g + 8 * (e >> 1), row = row0 + 2 * t + (e & 1);
    if (o < w.n_out && row < n_rows) y[row * w.n_out + o] = ldexpf(c[e], -(xe[row] + w.f16_exp));
  }
}

// x as the stage kernel rounds it (fp16 of x * 2^e_r), in plain rows for ref_kernel.
__global__ void plain_kernel(const float* __restrict__ x, const int* __restrict__ xe, int64_t n_in, int64_t n_rows,
                             __half* __restrict__ x16) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, r = i / n_in;
  if (r < n_rows) x16[i] = __float2half_rn(ldexpf(x[i], xe[r]));
}

uint64_t rng_state = 0x1234567;
uint32_t rnd() {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return uint32_t(rng_state >> 11);
}
uint16_t f2h(float f) {
  const __half h = __float2half_rn(f);
  return *reinterpret_cast<const uint16_t*>(&h);
}
float h2f_host(uint16_t b) {
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

struct Case {
  int64_t n_in, n_out, rows;
};

template <class F>
float time_us(F&& f, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return 1000.0f * ms / float(reps);
}

}  // namespace

int main() {
  using tf::cuda::f16_smem_bytes;
  using tf::cuda::f16_stage_kernel;
  using tf::cuda::f16_wgmma_kernel;
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  double peak = 0.0;
  {
    const int n = 8192;
    void *A, *B, *C;
    CK(cudaMalloc(&A, size_t(n) * n * 2));
    CK(cudaMalloc(&B, size_t(n) * n * 2));
    CK(cudaMalloc(&C, size_t(n) * n * 4));
    CK(cudaMemset(A, 0x3C, size_t(n) * n * 2));
    CK(cudaMemset(B, 0x3C, size_t(n) * n * 2));
    const float us = time_us(
        [&] {
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                       CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        10);
    peak = 2.0 * n * n * double(n) / (us * 1e-6) / 1e12;
    std::printf("cuBLAS bf16 GEMM 8192^3 (f32 out): %.0f TFLOP/s = the peak below\n", peak);
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
  }
  CK(cudaFuncSetAttribute(f16_wgmma_kernel<kQ4K, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          f16_smem_bytes(128)));
  CK(cudaFuncSetAttribute(f16_wgmma_kernel<kQ4K, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          f16_smem_bytes(256)));
  const Case cases[] = {{4096, 28672, 512},  {14336, 4096, 512}, {4096, 4096, 512}, {4096, 1024, 512},
                        {4096, 28672, 4096}, {4096, 28672, 100}, {4096, 4096, 1}};
  int fails = 0;
  for (const Case& cs : cases) {
    const int64_t K = cs.n_in, M = cs.n_out, R = cs.rows, tiles = (M + 15) / 16, units = K / 64, sbs = K / 256;
    const int64_t rpad = (R + 255) / 256 * 256;
    std::vector<uint32_t> hq(size_t(tiles * units * 32 * 4)), hm(size_t(tiles * sbs * 16 * 5));
    std::vector<uint8_t> nib(size_t(M * K));
    std::vector<float> hx(size_t(R * K));
    for (int64_t o = 0; o < M; ++o)
      for (int64_t sb = 0; sb < sbs; ++sb) {
        uint32_t* m = &hm[size_t(((o / 16 * sbs + sb) * 16 + o % 16) * 5)];
        m[0] = f2h(std::ldexp(1.0f + float(rnd() % 1024) / 1024.0f, -8 - int(rnd() % 3))) |
               (uint32_t(f2h(std::ldexp(1.0f + float(rnd() % 1024) / 1024.0f, -9 - int(rnd() % 3)))) << 16);
        for (int j = 0; j < 8; ++j) {
          m[1 + j / 4] |= (rnd() % 64) << (8 * (j % 4));
          m[3 + j / 4] |= (rnd() % 64) << (8 * (j % 4));
        }
      }
    for (auto& v : nib) v = uint8_t(rnd() % 16);
    // mma_pack.cpp's layout: lane (g, t), step st, pair i: output g + 8 (i & 1), columns 2t + 8 (i >> 1) and the next.
    for (int64_t tl = 0; tl < tiles; ++tl)
      for (int64_t u = 0; u < units; ++u)
        for (int lane = 0; lane < 32; ++lane)
          for (int st = 0; st < 4; ++st) {
            uint32_t w = 0;
            for (int i = 0; i < 4; ++i) {
              const int64_t o = tl * 16 + (lane >> 2) + 8 * (i & 1);
              const int64_t k = u * 64 + st * 16 + 2 * (lane & 3) + 8 * (i >> 1);
              if (o < M)
                w |= uint32_t(nib[size_t(o * K + k)]) << (4 * i) | uint32_t(nib[size_t(o * K + k + 1)]) << (4 * i + 16);
            }
            hq[size_t(((tl * units + u) * 32 + lane) * 4 + st)] = w;
          }
    for (int64_t r = 0; r < R; ++r) {
      const float sc = std::ldexp(1.0f, int(r % 7) * 3 - 9);
      for (int64_t k = 0; k < K; ++k) hx[size_t(r * K + k)] = sc * (float(int(rnd() % 20001) - 10000) / 3000.0f);
      if (r % 5 == 1) hx[size_t(r * K + (r * 37) % K)] = 2.0e4f * sc;  // an outlier fp16 alone could not hold
    }
    uint4* dq;
    uint32_t* dm;
    float *dx, *dy, *dr, *dyb;
    uint8_t* dxw;
    __half *dx16, *dxh, *dwh;
    int* de;
    CK(cudaMalloc(&dq, hq.size() * 4));
    CK(cudaMalloc(&dm, hm.size() * 4));
    CK(cudaMalloc(&dx, hx.size() * 4));
    CK(cudaMalloc(&dy, size_t(R * M) * 4));
    CK(cudaMalloc(&dr, size_t(R * M) * 4));
    CK(cudaMalloc(&dyb, size_t(R * M) * 4));
    CK(cudaMalloc(&dxw, size_t(rpad * K) * 2));
    CK(cudaMalloc(&dx16, size_t(rpad * K) * 2));
    CK(cudaMalloc(&dxh, size_t(R * K) * 2));
    CK(cudaMalloc(&dwh, size_t(M * K) * 2));
    CK(cudaMalloc(&de, size_t(rpad) * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dm, hm.data(), hm.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dx16, 0, size_t(rpad * K) * 2));
    CK(cudaMemset(dxh, 0x3C, size_t(R * K) * 2));  // nonzero operands for cuBLAS's timing
    CK(cudaMemset(dwh, 0x3C, size_t(M * K) * 2));
    tf::cuda::DeviceMatrix W;
    W.type = tf::GgmlType::Q4_K, W.q = reinterpret_cast<const uint8_t*>(dq), W.s = reinterpret_cast<const uint8_t*>(dm);
    W.n_in = K, W.n_out = M, W.units = units, W.slices = int(sbs), W.mma = true, W.f16 = true, W.f16_exp = 0;
    const unsigned cbs = unsigned((tiles + 7) / 8);
    auto stage = [&](int n) {
      auto* k = n == 128 ? f16_stage_kernel<128, 8> : f16_stage_kernel<256, 8>;
      k<<<unsigned((R + n - 1) / n * n), 256>>>(dx, K, R, dxw, de, 0, nullptr, 0.0f);
    };
    auto run = [&](int n, int ctl) {
      const F16Args a{W, dxw, de, int(R), dy, nullptr, ctl};
      auto* k = n == 128 ? f16_wgmma_kernel<kQ4K, 128> : f16_wgmma_kernel<kQ4K, 256>;
      k<<<dim3(unsigned((R + n - 1) / n), cbs), 256, f16_smem_bytes(n)>>>(a);
    };
    stage(128);
    plain_kernel<<<unsigned((R * K + 255) / 256), 256>>>(dx, de, K, R, dx16);
    ref_kernel<<<dim3(unsigned(tiles), unsigned(rpad / 8)), 32>>>(W, dx16, de, dr, R);
    CK(cudaMemset(dxw, 0x5A, 2));  // planted: row 0's first value of x changed in the image
    run(128, 0);
    CK(cudaDeviceSynchronize());
    std::vector<float> y(size_t(R * M)), yr(size_t(R * M));
    CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yr.data(), dr, yr.size() * 4, cudaMemcpyDeviceToHost));
    int64_t planted = 0;
    for (size_t i = 0; i < y.size(); ++i) planted += std::memcmp(&y[i], &yr[i], 4) != 0;
    const double flop = 2.0 * double(R) * double(K) * double(M);
    const float us_stage = time_us([&] { stage(128); });
    const float us_bf16 = time_us([&] {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(R), int(K), &one, dwh, CUDA_R_16BF, int(K), dxh,
                   CUDA_R_16BF, int(K), &zero, dyb, CUDA_R_32F, int(M), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    std::printf(
        "%5lld x %5lld, %4lld rows: cuBLAS bf16 %.1f us (%.1f TFLOP/s); x stage %.1f us; planted fault changed "
        "%lld of %lld outputs\n",
        (long long)K, (long long)M, (long long)R, us_bf16, flop / us_bf16 * 1e-6, us_stage, (long long)planted,
        (long long)y.size());
    fails += planted == 0;
    for (int n : {128, 256}) {
      stage(n);
      run(n, 0);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
      int64_t differ = 0;
      for (size_t i = 0; i < y.size(); ++i) differ += std::memcmp(&y[i], &yr[i], 4) != 0;
      // Float64 against the GGUF dequantisation d*sc*q - dmin*m; bound in units of sum (|d sc q| + |dmin m|) |x|.
      double worst = 0.0;
      for (int sample = 0; sample < 400; ++sample) {
        const int64_t r = rnd() % R, o = rnd() % M;
        double ref = 0.0, cond = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const uint32_t* m = &hm[size_t(((o / 16 * sbs + k / 256) * 16 + o % 16) * 5)];
          const int j = int(k % 256 / 32);
          const double d = h2f_host(uint16_t(m[0])), dmin = h2f_host(uint16_t(m[0] >> 16));
          const double sc = (m[1 + j / 4] >> (8 * (j % 4))) & 63, mn = (m[3 + j / 4] >> (8 * (j % 4))) & 63;
          const double q = nib[size_t(o * K + k)], x = hx[size_t(r * K + k)];
          ref += (d * sc * q - dmin * mn) * x;
          cond += (std::fabs(d * sc * q) + std::fabs(dmin * mn)) * std::fabs(x);
        }
        if (cond > 0) worst = std::max(worst, std::fabs(double(y[size_t(r * M + o)]) - ref) / cond);
      }
      const double bound = 4.0 * std::ldexp(1.0, -11);
      const bool ok = differ == 0 && worst <= bound;
      fails += !ok;
      const float us = time_us([&] { run(n, 0); });
      CK(cudaGetLastError());
      std::printf(
          "  %d rows a block: %8.1f us, %5.1f TFLOP/s = %4.1f%% of peak, %.2f of cuBLAS bf16 | differ from "
          "mma.sync %lld | err/cond %.2e (bound %.2e) %s\n",
          n, us, flop / us * 1e-6, 100.0 * flop / us * 1e-6 / peak, us_bf16 / us, (long long)differ, worst, bound,
          ok ? "ok" : "FAIL");
    }
    for (void* p : {(void*)dq, (void*)dm, (void*)dx, (void*)dy, (void*)dr, (void*)dyb, (void*)dxw, (void*)dx16,
                    (void*)dxh, (void*)dwh, (void*)de})
      CK(cudaFree(p));
  }
  cublasDestroy(h);
  std::printf("SUMMARY probe_fp16_gemm: %s\n", fails ? "FAIL" : "all cases ok");
  return fails ? 1 : 0;
}
