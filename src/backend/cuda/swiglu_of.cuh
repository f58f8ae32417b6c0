#pragma once
#include <cuda_runtime.h>

// SwiGLU of one gate and up value: swiglu_pairs and the down product's stage share it, so they share its bits.
namespace tf::cuda {

__device__ __forceinline__ float swiglu_value(float g, float up, bool sign_slip) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(sign_slip ? g : -g))), up);
}

}  // namespace tf::cuda
