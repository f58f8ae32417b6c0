// Weight kernels (GEMV and embedding) for F32 F16 BF16 Q8_0: instantiated apart so each file compiles in parallel.
#include "backend/cuda/gemv_formats.cuh"

namespace tf::cuda {

bool weight_kernels_float(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual,
                          const int32_t* ids, float* emb_out, int ctl) {
  switch (w.type) {
    case GgmlType::F32:
      launch_weight_kernels<int(GgmlType::F32)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::F16:
      launch_weight_kernels<int(GgmlType::F16)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::BF16:
      launch_weight_kernels<int(GgmlType::BF16)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::Q8_0:
      launch_weight_kernels<int(GgmlType::Q8_0)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cuda
