#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace tf::cuda {
// The stream every kernel of the backend is launched on (one per process; blocking, so plain copies order with it).
cudaStream_t launch_stream();
cudaStream_t side_stream();  // created non-blocking: joins the launch stream only through side_fork / side_join
// Where launch_k puts this thread's kernels: the launch stream, or the side stream inside a SideLaunches scope.
cudaStream_t current_stream();
// The launch stream's device, read when the stream is created (before any capture): launchers size grids by it.
struct LaunchDevice {
  int major = 0, minor = 0, sm_count = 0;
  int64_t l2_bytes = 0;
};
const LaunchDevice& launch_device();
// Programmatic dependent launch, unless TF_CUDA_PDL=0 or the loaded kernels lack grid_wait's instruction.
bool pdl_on();

// Waits for the kernels before, then lets the next one be scheduled: first statement of every kernel, or after loads
// of what no kernel writes. ptxas moves ld.global.nc (__ldg) above it, so what comes after it is read by other loads.
__device__ __forceinline__ void grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Throws on a CUDA error, clearing it first so that the next round's launch checks do not report it again.
inline void cuda_check(cudaError_t e, const char* op) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(std::string("CUDA ") + op + ": " + cudaGetErrorString(e));
}

// cluster > 1: blocks in clusters of that many along x (compute capability 9.0; grid.x a multiple of it).
template <typename... P, typename... A>
void launch_kc(unsigned cluster, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_on() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = current_stream();
  cfg.attrs = attr, cfg.numAttrs = cluster > 1 ? 2 : 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next check does not report this launch again
    throw std::runtime_error(std::string("CUDA launch: ") + cudaGetErrorString(e));
  }
}

template <typename... P, typename... A>
void launch_k(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  launch_kc(1, kernel, grid, block, smem, std::forward<A>(args)...);
}

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
}  // namespace tf::cuda
