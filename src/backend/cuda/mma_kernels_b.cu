// Tensor-core products for Q4_K, Q6_K and BF16: instantiated apart so each file compiles in parallel.
#include "backend/cuda/mma_kernels.cuh"

namespace tf::cuda {

bool mma_kernels_b(const MmaArgs& a) {
  switch (a.w.type) {
    case GgmlType::Q4_K:
      launch_mma<int(GgmlType::Q4_K)>(a);
      return true;
    case GgmlType::Q6_K:
      launch_mma<int(GgmlType::Q6_K)>(a);
      return true;
    case GgmlType::BF16:
      launch_mma<int(GgmlType::BF16)>(a);
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cuda
