// Benchmark, not a test: GEMV time on Llama-3-8B-shaped weights against the copy bandwidth measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backend/cuda/cuda_gemv.h"
#include "bench_timer.h"
#include "io/ggml_types.h"

int main() {
  using namespace tf;
  if (cuda::device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  const size_t copy_bytes = size_t(4) << 30;
  void* s = cuda::device_alloc(copy_bytes);
  void* d = cuda::device_alloc(copy_bytes);
  cudaMemset(s, 1, copy_bytes);
  float copy_ms = time_ms([&] { cudaMemcpy(d, s, copy_bytes, cudaMemcpyDeviceToDevice); }, 5);
  const double bw = 2.0 * double(copy_bytes) / (copy_ms * 1e-3);  // bytes read plus written
  cuda::device_free(s);
  cuda::device_free(d);
  // The floor's divisor is the copy rate counting bytes read plus written, as the CUDA issue defines it.
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", bw / 1e9);
  std::printf("| weight (n_in x n_out) | format | rows | us | GB/s | of floor (copy bw) |\n");
  std::mt19937 rng(1);
  for (auto [n_in, n_out] : {std::pair<int64_t, int64_t>{4096, 14336}, {14336, 4096}, {4096, 128256}}) {
    for (GgmlType t :
         {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::BF16}) {
      auto info = *ggml_type_info(uint32_t(t));
      const size_t wbytes = size_t(n_in / info.block_elems * info.block_bytes) * size_t(n_out);
      std::vector<uint8_t> w(wbytes);
      for (auto& b : w) b = uint8_t(rng() & 0x3b);  // small finite scales and values
      void* dw = cuda::device_alloc(cuda::device_matrix_bytes(t, n_in, n_out));
      const cuda::DeviceMatrix m = cuda::upload_matrix(t, w.data(), n_in, n_out, dw);
      for (int64_t rows : {1, 8}) {
        void* dx = cuda::device_alloc(size_t(rows * n_in) * 4);
        void* dy = cuda::device_alloc(size_t(rows * n_out) * 4);
        cudaMemset(dx, 0x3c, size_t(rows * n_in) * 4);
        float ms = time_ms([&] { cuda::gemv(m, static_cast<float*>(dx), rows, static_cast<float*>(dy)); }, 20);
        const double moved = double(wbytes) + double(rows * (n_in + n_out)) * 4;
        std::printf("| %lld x %lld | %s | %lld | %.1f | %.0f | %.1f%% |\n", (long long)n_in, (long long)n_out,
                    info.name.data(), (long long)rows, ms * 1e3, moved / (ms * 1e-3) / 1e9,
                    100.0 * moved / (ms * 1e-3) / bw);
        cuda::device_free(dx);
        cuda::device_free(dy);
      }
      cuda::device_free(dw);
    }
  }
  return 0;
}
