// Tensor-core products for Q4_0, Q4_1 and Q8_0: instantiated apart so each file compiles in parallel.
#include "backend/cuda/mma_kernels.cuh"

namespace tf::cuda {

bool mma_kernels_a(const MmaArgs& a) {
  switch (a.w.type) {
    case GgmlType::Q4_0:
      launch_mma<int(GgmlType::Q4_0)>(a);
      return true;
    case GgmlType::Q4_1:
      launch_mma<int(GgmlType::Q4_1)>(a);
      return true;
    case GgmlType::Q8_0:
      launch_mma<int(GgmlType::Q8_0)>(a);
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cuda
