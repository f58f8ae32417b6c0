// Weight kernels (GEMV and embedding) for Q4_0 Q4_1 Q4_K Q6_K: instantiated apart so each file compiles in parallel.
#include "backend/cuda/gemv_formats.cuh"

namespace tf::cuda {

bool weight_kernels_quant(const DeviceMatrix& w, const float* x, int64_t n_rows, float* y, const float* residual,
                          const int32_t* ids, float* emb_out, int ctl) {
  switch (w.type) {
    case GgmlType::Q4_0:
      launch_weight_kernels<int(GgmlType::Q4_0)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::Q4_1:
      launch_weight_kernels<int(GgmlType::Q4_1)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::Q4_K:
      launch_weight_kernels<int(GgmlType::Q4_K)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    case GgmlType::Q6_K:
      launch_weight_kernels<int(GgmlType::Q6_K)>(w, x, n_rows, y, residual, ids, emb_out, ctl);
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cuda
