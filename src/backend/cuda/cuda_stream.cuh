#pragma once
#include <cuda_runtime.h>

namespace tf::cuda {
// The stream every kernel of the backend is launched on (one per process; blocking, so plain copies order with it).
cudaStream_t launch_stream();
}  // namespace tf::cuda
