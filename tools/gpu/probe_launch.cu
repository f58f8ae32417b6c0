// Probe, not a server kernel: what a kernel boundary costs in a decode-like CUDA graph. Replays graphs of N kernels
// that do almost nothing (wait on the previous kernel, read one value, write one) with and without programmatic
// dependent launch, at the grid sizes of a one-row decode, and prints microseconds per kernel.
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_launch tools/gpu/probe_launch.cu
//   /tmp/probe_launch
#include <cuda_runtime.h>

#include <cstdio>

namespace {

__global__ void step_kernel(const float* in, float* out, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Microseconds per kernel of a graph of `kernels` launches of `blocks` x 256 threads, replayed `reps` times.
float per_kernel_us(cudaStream_t s, float* a, float* b, int kernels, int blocks, bool pdl, int reps) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(256), cfg.stream = s, cfg.attrs = attr, cfg.numAttrs = 1;
  const int n = blocks * 256;
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  for (int k = 0; k < kernels; ++k)
    check(cudaLaunchKernelEx(&cfg, step_kernel, (const float*)(k & 1 ? b : a), k & 1 ? a : b, n), "launch");
  check(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t ge;
  check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaGraphLaunch(ge, s);
  cudaStreamSynchronize(s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int r = 0; r < reps; ++r) cudaGraphLaunch(ge, s);
  cudaEventRecord(e1, s);
  check(cudaEventSynchronize(e1), "sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
  return ms * 1e3f / float(reps * kernels);
}

}  // namespace

int main() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  float *a, *b;
  check(cudaMalloc(&a, size_t(4) << 20), "alloc"), check(cudaMalloc(&b, size_t(4) << 20), "alloc");
  cudaMemset(a, 0, size_t(4) << 20), cudaMemset(b, 0, size_t(4) << 20);
  std::printf("| kernels a graph | blocks of 256 | PDL | us per kernel |\n| --- | --- | --- | --- |\n");
  for (int blocks : {8, 132, 264, 1024, 3584})
    for (bool pdl : {true, false})
      std::printf("| 290 | %d | %s | %.2f |\n", blocks, pdl ? "on" : "off",
                  per_kernel_us(s, a, b, 290, blocks, pdl, 50));
  std::printf("PROBE launch: done\n");
  return 0;
}
