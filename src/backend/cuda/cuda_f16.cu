// Prompt rows' products on Hopper (f16_prompt.cuh): which matrices take them, their scratch, and the launch.
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>

#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/f16_image_gemm.cuh"
#include "backend/cuda/f16_prompt.cuh"
#include "base/env_switch.h"

namespace tf::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }
int64_t padded_rows(int64_t n_rows) { return (n_rows + kF16RowPad - 1) / kF16RowPad * kF16RowPad; }

// Whether the sm_90a build of a kernel loaded (the PTX of other architectures has no wgmma), with its shared memory.
template <typename K>
bool sm90a_ready(K kernel, int smem) {
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.binaryVersion != 90) {
    cudaGetLastError();
    return false;
  }
  const bool ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess;
  cudaGetLastError();
  return ok;
}

template <int kType, int kN>
bool kernel_ready() {
  static const bool ready = sm90a_ready(f16_wgmma_kernel<kType, kN>, f16_smem_bytes(kN));
  return ready;
}

bool image_gemm_ready() {
  static const bool ready = sm90a_ready(f16_image_gemm_kernel, kImgSmemBytes);
  return ready;
}

template <int kType>
bool type_ready() {
  return kernel_ready<kType, 128>() && kernel_ready<kType, 256>();
}

// What f16_stage left in the scratch: staged products must match it, or they would read another x's image.
struct Staged {
  const float* x = nullptr;
  int64_t n_in = -1, n_rows = -1;
  uint64_t epoch = 0;
};
Staged g_staged;

int* exps_of(uint8_t* base, int64_t n_in, int64_t n_rows) {
  return reinterpret_cast<int*>(base + align256(size_t(padded_rows(n_rows) * n_in) * 2));
}

template <int kN, int kSrc = kStageX>
uint8_t* stage(const DeviceMatrix& w, const float* x, int64_t n_rows, int ctl, const float* norm_w = nullptr,
               float eps = 0.0f) {
  uint8_t* base = mma_scratch_own(f16_scratch_bytes(w, n_rows));
  // Rows of up to 4,096 columns keep their two chunks a thread in registers; longer ones keep eight (16,384 columns).
  const unsigned blocks = unsigned((n_rows + kN - 1) / kN * kN);
  int* xe = exps_of(base, w.n_in, n_rows);
  // SwiGLU rows are long and their values costly: 1,024 threads of two chunks hide more latency than 256 of eight.
  if constexpr (kSrc == kStageSwiglu) {
    if (w.n_in > 4096) {
      launch_k(f16_stage_kernel<kN, 2, kSrc, 1024>, blocks, 1024, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w, eps);
      return base;
    }
  }
  if (w.n_in <= 4096)
    launch_k(f16_stage_kernel<kN, 2, kSrc>, blocks, kRmsThreads, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w, eps);
  else
    launch_k(f16_stage_kernel<kN, 8, kSrc>, blocks, kRmsThreads, 0, x, w.n_in, n_rows, base, xe, ctl, norm_w, eps);
  return base;
}

template <int kType, int kN>
void launch(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
            bool staged) {
  const int64_t rows_pad = (n_rows + kN - 1) / kN * kN;
  uint8_t* base = staged ? mma_scratch_base() : stage<kN>(w, x, n_rows, ctl);
  F16Args a{w, base, exps_of(base, w.n_in, n_rows), int(n_rows), y, residual, ctl};
  const dim3 grid(unsigned(rows_pad / kN), unsigned(((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps));
  if constexpr (kN == 128)
    if (w.f16w) return launch_k(f16_image_gemm_kernel, grid, kImgThreads, kImgSmemBytes, a);
  launch_k(f16_wgmma_kernel<kType, kN>, grid, kF16Warps * 32, f16_smem_bytes(kN), a);
}

template <int kType>
void launch_type(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
                 bool staged) {
  // 256 rows halve the decode where the grid fills the device twice; staged x and images take 128-row blocks.
  const int64_t col_blocks = ((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps;
  if (!staged && !w.f16w && (n_rows + 255) / 256 * col_blocks >= 2 * int64_t(launch_device().sm_count))
    launch<kType, 256>(w, x, n_rows, y, residual, ctl, false);
  else
    launch<kType, 128>(w, x, n_rows, y, residual, ctl, staged);
}

}  // namespace

bool f16_enabled() {
  static const bool on = env_switch("TF_CUDA_PROMPT_F16", 2, "0 keeps prompt rows on the decode products") != 0;
  return on;
}

namespace {
std::atomic<int> g_image_mode{-2};       // -2: not read yet
std::atomic<int64_t> g_fused_stages{0};  // for tests: that the model's prompt rows took these stages
}  // namespace

int f16_image_mode() {
  int m = g_image_mode.load();
  if (m == -2) {
    m = env_switch("TF_CUDA_PROMPT_IMAGE", 2, "0 never keeps prompt images, 1 always; unset: where they fit");
    int unread = -2;
    if (!g_image_mode.compare_exchange_strong(unread, m)) m = unread;  // f16_set_image_mode came first
  }
  return m;
}

void f16_set_image_mode(int mode) {
  if (mode < -1 || mode > 1) throw std::invalid_argument("prompt image mode: -1 (unset), 0 or 1");
  g_image_mode.store(mode);
}

namespace {
// What the format and row length allow, before and after upload (which also needs the values to fit fp16).
bool shape_takes(GgmlType type, int64_t n_in) {
  if (n_in % 256 != 0 || !f16_enabled() || !mma_wgmma_device()) return false;
  if (type == GgmlType::Q4_K) return type_ready<int(GgmlType::Q4_K)>();
  if (type == GgmlType::Q6_K) return type_ready<int(GgmlType::Q6_K)>();
  return false;
}
}  // namespace

bool f16_takes(const DeviceMatrix& w) { return w.mma && w.f16 && shape_takes(w.type, w.n_in); }

size_t f16_scratch_bytes(const DeviceMatrix& w, int64_t n_rows) {
  if (!f16_takes(w) || n_rows <= 0) return 0;
  return align256(size_t(padded_rows(n_rows) * w.n_in) * 2) + align256(size_t(padded_rows(n_rows)) * 4);
}

size_t f16_image_size(const DeviceMatrix& w) {
  if (!f16_takes(w)) return 0;
  const bool ready = image_gemm_ready();
  return ready ? size_t(f16_image_bytes(w.n_out, w.units)) : 0;
}

size_t f16_image_size_for(GgmlType type, int64_t n_in, int64_t n_out) {
  return shape_takes(type, n_in) && image_gemm_ready() ? size_t(f16_image_bytes(n_out, n_in / 64)) : 0;
}

void f16_image(DeviceMatrix& w, void* dst, int ctl) {
  if (f16_image_size(w) == 0) throw std::logic_error("CUDA prompt products: this matrix has no prompt image here");
  const dim3 grid(unsigned((w.units + 3) / 4), unsigned((w.n_out + 127) / 128 * 8));
  w.f16w = nullptr;
  if (w.type == GgmlType::Q4_K)
    launch_k(f16_image_kernel<int(GgmlType::Q4_K)>, grid, 128, 0, w, static_cast<uint8_t*>(dst), ctl);
  else
    launch_k(f16_image_kernel<int(GgmlType::Q6_K)>, grid, 128, 0, w, static_cast<uint8_t*>(dst), ctl);
  w.f16w = static_cast<const uint8_t*>(dst);
}

void f16_stage(const DeviceMatrix& w, const float* x, int64_t n_rows, int ctl, bool swiglu) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  g_staged = {};
  if (n_rows <= 0) return;
  if (swiglu)
    stage<128, kStageSwiglu>(w, x, n_rows, ctl), g_fused_stages.fetch_add(1);
  else
    stage<128>(w, x, n_rows, ctl);
  g_staged = {x, w.n_in, n_rows, mma_scratch_epoch()};
}

void f16_stage_norm(const DeviceMatrix& w, const float* x, const float* norm_w, float eps, int64_t n_rows,
                    const float* as, int ctl) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  g_staged = {};
  if (n_rows <= 0) return;
  stage<128, kStageNorm>(w, x, n_rows, ctl, norm_w, eps);
  g_fused_stages.fetch_add(1);
  g_staged = {as, w.n_in, n_rows, mma_scratch_epoch()};
}

int64_t f16_fused_stages() { return g_fused_stages.load(); }

void f16_gemm(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl,
              bool staged) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  if (n_rows <= 0) return;
  if (staged && (g_staged.x != x || g_staged.n_in != w.n_in || g_staged.n_rows != n_rows ||
                 g_staged.epoch != mma_scratch_epoch()))
    throw std::logic_error(
        "CUDA prompt products: a staged product must follow gemv_prompt_stage of its x, with only "
        "staged products between");
  if (!staged) g_staged = {};
  if (w.type == GgmlType::Q4_K)
    launch_type<int(GgmlType::Q4_K)>(w, x, n_rows, y, residual, ctl, staged);
  else
    launch_type<int(GgmlType::Q6_K)>(w, x, n_rows, y, residual, ctl, staged);
}

}  // namespace tf::cuda
