// Benchmark, not a test: cuBLAS's bf16 peak, and our row-invariant BF16 and prompt image products against cuBLAS on
// the Llama-3-8B shapes (the cost of row invariance), in one run.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_ops.h"
#include "bench_timer.h"

namespace {

void* dev_fill(size_t bytes, unsigned char v) {
  void* p = nullptr;
  cudaMalloc(&p, bytes);
  cudaMemset(p, v, bytes);
  return p;
}

// Q4_K blocks with small finite scales and random values, so that the weights fit fp16 and take a prompt image.
std::vector<uint8_t> q4k_blocks(int64_t n_in, int64_t n_out) {
  std::vector<uint8_t> b(size_t(n_in / 256 * n_out) * 144);
  uint32_t s = 12345;
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
  for (size_t i = 0; i < b.size(); i += 144) b[i] = 0, b[i + 1] = 0x14, b[i + 2] = 0, b[i + 3] = 0x10;
  return b;
}

// The prompt rows' image product (x staged to fp16, then the product) in blocks of each output width against cuBLAS's
// fp16 GEMM, 8B prompt shapes; "rule" marks the width a loaded model's image takes.
void prompt_image_table(cublasHandle_t h) {
  using namespace tf;
  const float one = 1.0f, zero = 0.0f;
  std::printf(
      "| prompt image W (n_in x n_out) | width | rows | ours us | ours TFLOP/s | cuBLAS fp16 us | ours / cuBLAS |\n");
  for (auto [n_in, n_out] :
       {std::pair<int64_t, int64_t>{4096, 28672}, {14336, 4096}, {4096, 4096}, {4096, 6144}, {4096, 1024}}) {
    const auto blocks = q4k_blocks(n_in, n_out);
    void* wd = nullptr;
    cudaMalloc(&wd, cuda::device_matrix_bytes(GgmlType::Q4_K, n_in, n_out));
    const cuda::DeviceMatrix m0 = cuda::upload_matrix(GgmlType::Q4_K, blocks.data(), n_in, n_out, wd);
    void* wb = dev_fill(size_t(n_in * n_out) * 2, 0x3c);
    const int rule = cuda::prompt_image_width(n_out);
    for (int64_t rows : {512, 4096}) {
      void* x = dev_fill(size_t(rows * n_in) * 4, 0x3c);
      void* xb = dev_fill(size_t(rows * n_in) * 2, 0x3c);
      void* y = dev_fill(size_t(rows * n_out) * 4, 0);
      const float theirs = time_ms(
          [&] {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n_out), int(rows), int(n_in), &one, wb, CUDA_R_16F, int(n_in),
                         xb, CUDA_R_16F, int(n_in), &zero, y, CUDA_R_32F, int(n_out), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
          },
          10);
      for (int width : {128, 192, 224, 256}) {
        const int before = cuda::set_prompt_image_width(width);
        cuda::DeviceMatrix m = m0;
        const size_t img = cuda::prompt_image_bytes(m);
        if (img == 0) {
          std::printf("| %lld x %lld | %d | no prompt image on this device |\n", (long long)n_in, (long long)n_out,
                      width);
          cuda::set_prompt_image_width(before);
          continue;
        }
        void* wi = dev_fill(img, 0);
        cuda::prompt_image_build(m, wi);
        cuda::set_prompt_image_width(before);
        const float ours =
            time_ms([&] { cuda::gemv_prompt(m, static_cast<float*>(x), rows, static_cast<float*>(y)); }, 10);
        std::printf("| %lld x %lld | %d%s | %lld | %.1f | %.0f | %.1f | %.2f |\n", (long long)n_in, (long long)n_out,
                    width, width == rule ? " rule" : "", (long long)rows, ours * 1e3,
                    2.0 * n_in * n_out * rows / (ours * 1e-3) / 1e12, theirs * 1e3, ours / theirs);
        cudaFree(wi);
      }
      cudaFree(x), cudaFree(xb), cudaFree(y);
    }
    cudaFree(wd), cudaFree(wb);
  }
}

// SwiGLU then the down product: swiglu_pairs stored and the product staging it, against the stage making it itself.
void prompt_swiglu_table() {
  using namespace tf;
  const int64_t F = 14336, E = 4096;
  std::printf("| down %lld x %lld after SwiGLU | rows | swiglu_pairs + product us | SwiGLU in the stage us | ratio |\n",
              (long long)F, (long long)E);
  const auto blocks = q4k_blocks(F, E);
  void* wd = nullptr;
  cudaMalloc(&wd, cuda::device_matrix_bytes(GgmlType::Q4_K, F, E));
  cuda::DeviceMatrix m = cuda::upload_matrix(GgmlType::Q4_K, blocks.data(), F, E, wd);
  if (!cuda::gemv_prompt_takes(m)) {
    std::printf("| no prompt products on this device |\n");
    cudaFree(wd);
    return;
  }
  const size_t img = cuda::prompt_image_bytes(m);
  void* wi = img ? dev_fill(img, 0) : nullptr;
  if (img) cuda::prompt_image_build(m, wi);
  for (int64_t rows : {512, 4096}) {
    auto* gu = static_cast<float*>(dev_fill(size_t(rows * 2 * F) * 4, 0));
    {  // gate and up values as a model's: SwiGLU's exp and division depend on them
      std::vector<float> h(size_t(rows * 2 * F));
      uint32_t st = 777;
      for (float& v : h) v = float(int((st = st * 1664525u + 1013904223u) >> 16) - 32768) / 8192.0f;
      cudaMemcpy(gu, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    }
    auto* u = static_cast<float*>(dev_fill(size_t(rows * F) * 4, 0));
    auto* y = static_cast<float*>(dev_fill(size_t(rows * E) * 4, 0));
    const float both = time_ms([&] { cuda::swiglu_pairs(gu, rows, F, u), cuda::gemv_prompt(m, u, rows, y); }, 10);
    const float fused = time_ms(
        [&] { cuda::gemv_prompt_stage_swiglu(m, gu, rows), cuda::gemv_prompt(m, gu, rows, y, nullptr, true); }, 10);
    std::printf("| | %lld | %.1f | %.1f | %.2f |\n", (long long)rows, both * 1e3, fused * 1e3, fused / both);
    cudaFree(gu), cudaFree(u), cudaFree(y);
  }
  cudaFree(wd), cudaFree(wi);
}

}  // namespace

int main() {
  using namespace tf;
  if (cuda::device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  {
    const int n = 8192;
    void *A = dev_fill(size_t(n) * n * 2, 0x3c), *B = dev_fill(size_t(n) * n * 2, 0x3c),
         *C = dev_fill(size_t(n) * n * 4, 0);
    float ms = time_ms(
        [&] {
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                       CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        },
        10);
    std::printf("cuBLAS bf16 GEMM 8192^3 (f32 out): %.0f TFLOP/s = the dense tensor-core peak used below\n",
                2.0 * n * double(n) * n / (ms * 1e-3) / 1e12);
    cudaFree(A), cudaFree(B), cudaFree(C);
  }
  std::printf("| W (n_in x n_out) | rows | ours BF16 us | cuBLAS bf16 us | ours / cuBLAS |\n");
  for (auto [n_in, n_out] : {std::pair<int64_t, int64_t>{4096, 14336}, {14336, 4096}, {4096, 4096}}) {
    std::vector<unsigned short> wh(size_t(n_in * n_out), 0x3c00);
    void* wd = nullptr;
    cudaMalloc(&wd, cuda::device_matrix_bytes(GgmlType::BF16, n_in, n_out));
    const cuda::DeviceMatrix m = cuda::upload_matrix(GgmlType::BF16, wh.data(), n_in, n_out, wd);
    void* wb = dev_fill(size_t(n_in * n_out) * 2, 0x3c);
    for (int64_t rows : {1, 8, 32, 128, 512}) {
      void* x = dev_fill(size_t(rows * n_in) * 4, 0x3c);
      void* xb = dev_fill(size_t(rows * n_in) * 2, 0x3c);
      void* y = dev_fill(size_t(rows * n_out) * 4, 0);
      float ours = time_ms([&] { cuda::gemv(m, static_cast<float*>(x), rows, static_cast<float*>(y)); }, 10);
      float theirs = time_ms(
          [&] {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n_out), int(rows), int(n_in), &one, wb, CUDA_R_16BF,
                         int(n_in), xb, CUDA_R_16BF, int(n_in), &zero, y, CUDA_R_32F, int(n_out), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
          },
          10);
      std::printf("| %lld x %lld | %lld | %.1f | %.1f | %.2f |\n", (long long)n_in, (long long)n_out, (long long)rows,
                  ours * 1e3, theirs * 1e3, ours / theirs);
      cudaFree(x), cudaFree(xb), cudaFree(y);
    }
    cudaFree(wd), cudaFree(wb);
  }
  prompt_image_table(h);
  prompt_swiglu_table();
  cublasDestroy(h);
  return 0;
}
