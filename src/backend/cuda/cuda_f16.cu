// Prompt rows' products on Hopper (f16_prompt.cuh): which matrices take them, their scratch, and the launch.
#include <cuda_runtime.h>

#include <stdexcept>

#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/f16_prompt.cuh"
#include "base/env_switch.h"

namespace tf::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }
int64_t padded_rows(int64_t n_rows) { return (n_rows + kF16RowPad - 1) / kF16RowPad * kF16RowPad; }

// Whether the sm_90a build of this kernel loaded (the PTX of other architectures has no wgmma), with its shared memory.
template <int kType, int kN>
bool kernel_ready() {
  static const bool ready = [] {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, f16_wgmma_kernel<kType, kN>) != cudaSuccess || fa.binaryVersion != 90) {
      cudaGetLastError();
      return false;
    }
    const bool ok = cudaFuncSetAttribute(f16_wgmma_kernel<kType, kN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         f16_smem_bytes(kN)) == cudaSuccess;
    cudaGetLastError();
    return ok;
  }();
  return ready;
}

template <int kType>
bool type_ready() {
  return kernel_ready<kType, 128>() && kernel_ready<kType, 256>();
}

template <int kType, int kN>
void launch(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl) {
  const int64_t rows_pad = (n_rows + kN - 1) / kN * kN;
  uint8_t* base = mma_scratch_own(f16_scratch_bytes(w, n_rows));
  F16Args a{w, base, reinterpret_cast<const int*>(base + align256(size_t(padded_rows(n_rows) * w.n_in) * 2)),
            int(n_rows), y, residual, ctl};
  launch_k(f16_stage_kernel<kN>, unsigned(rows_pad), 256, 0, x, w.n_in, n_rows, base, const_cast<int*>(a.xe), ctl);
  const dim3 grid(unsigned(rows_pad / kN), unsigned(((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps));
  launch_k(f16_wgmma_kernel<kType, kN>, grid, kF16Warps * 32, f16_smem_bytes(kN), a);
}

template <int kType>
void launch_type(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl) {
  // 256 rows a block decode each weight for twice the rows, where the grid still fills the device twice over.
  const int64_t col_blocks = ((w.n_out + 15) / 16 + kF16Warps - 1) / kF16Warps;
  if ((n_rows + 255) / 256 * col_blocks >= 2 * int64_t(launch_device().sm_count))
    launch<kType, 256>(w, x, n_rows, y, residual, ctl);
  else
    launch<kType, 128>(w, x, n_rows, y, residual, ctl);
}

}  // namespace

bool f16_enabled() {
  static const bool on = env_switch("TF_CUDA_PROMPT_F16", 2, "0 keeps prompt rows on the decode products") != 0;
  return on;
}

bool f16_takes(const DeviceMatrix& w) {
  if (!w.mma || !w.f16 || w.n_in % 256 != 0 || !f16_enabled() || !mma_wgmma_device()) return false;
  if (w.type == GgmlType::Q4_K) return type_ready<int(GgmlType::Q4_K)>();
  if (w.type == GgmlType::Q6_K) return type_ready<int(GgmlType::Q6_K)>();
  return false;
}

size_t f16_scratch_bytes(const DeviceMatrix& w, int64_t n_rows) {
  if (!f16_takes(w) || n_rows <= 0) return 0;
  return align256(size_t(padded_rows(n_rows) * w.n_in) * 2) + align256(size_t(padded_rows(n_rows)) * 4);
}

void f16_gemm(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual, int ctl) {
  if (!f16_takes(w)) throw std::logic_error("CUDA prompt products: this matrix has no fp16 kernel here");
  if (n_rows <= 0) return;
  if (w.type == GgmlType::Q4_K)
    launch_type<int(GgmlType::Q4_K)>(w, x, n_rows, y, residual, ctl);
  else
    launch_type<int(GgmlType::Q6_K)>(w, x, n_rows, y, residual, ctl);
}

}  // namespace tf::cuda
