#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_mma.h"
#include "backend/cuda/cuda_stream.cuh"
#include "base/env_switch.h"

namespace tf::cuda {
namespace {
constexpr auto& check = cuda_check;

// Whether the loaded device code has griddepcontrol (grid_wait is empty below sm_90, e.g. JIT from older PTX).
__global__ void pdl_probe_kernel(int* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  *out = 1;
#else
  *out = 0;
#endif
}

bool g_pdl_code = false;

bool probe_pdl_code(cudaStream_t s) {
  int* d = nullptr;
  int h = 0;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return cudaGetLastError(), false;
  pdl_probe_kernel<<<1, 1, 0, s>>>(d);
  const bool ok = cudaStreamSynchronize(s) == cudaSuccess &&
                  cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d);
  if (!ok) cudaGetLastError();
  return ok && h == 1;
}
}  // namespace

namespace {
cudaEvent_t g_fork = nullptr, g_join = nullptr;
LaunchDevice g_dev;
}  // namespace

cudaStream_t launch_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    check(cudaStreamCreate(&t), "stream create");
    // Device facts now, so no kernel launcher asks the driver for them inside a stream capture.
    int dev = 0;
    cudaDeviceProp p{};
    check(cudaGetDevice(&dev), "current device");
    check(cudaGetDeviceProperties(&p, dev), "device properties");
    g_dev = LaunchDevice{p.major, p.minor, p.multiProcessorCount, int64_t(p.l2CacheSize)};
    g_pdl_code = probe_pdl_code(t);  // before any capture can start, which needs this stream
    // The side stream and its events too, so no capture ever creates them.
    side_stream();
    check(cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming), "event create");
    check(cudaEventCreateWithFlags(&g_join, cudaEventDisableTiming), "event create");
    return t;
  }();
  return s;
}

const LaunchDevice& launch_device() {
  launch_stream();
  return g_dev;
}

static bool pdl_wanted() {  // the switch alone, so read_switches touches no device
  static const bool wanted = env_switch("TF_CUDA_PDL", 2, "0 turns programmatic dependent launch off") != 0;
  return wanted;
}

bool pdl_on() {
  static const bool on = [] {
    const bool wanted = pdl_wanted();
    launch_stream();
    return wanted && g_pdl_code;
  }();
  return on;
}

static int prefetch_switch() {
  static const int m = env_switch("TF_CUDA_PREFETCH", 2, "0 turns the L2 weight prefetch off");
  return m;
}
// Unset: pulls only where products wait before their first weight loads (with them, pulls took DRAM from the products).
static std::atomic<int> g_prefetch_set{-1};  // set_prefetch_mode's choice; -1: the environment's
int prefetch_mode() {
  if (const int m = g_prefetch_set.load(); m >= 0) return m;
  return prefetch_switch() >= 0 ? prefetch_switch() : mma_prewait() ? 0 : 1;
}
void set_prefetch_mode(int mode) { g_prefetch_set.store(mode); }

void read_switches() {
  attention_read_switches();
  mma_read_switches();
  pdl_wanted();
  prefetch_switch();
}

cudaStream_t side_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    check(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), "side stream create");
    return t;
  }();
  return s;
}

namespace {
thread_local bool g_on_side = false;
}  // namespace
cudaStream_t current_stream() { return g_on_side ? side_stream() : launch_stream(); }
SideLaunches::SideLaunches() : was(g_on_side) { g_on_side = true; }
SideLaunches::~SideLaunches() { g_on_side = was; }

void side_fork() {
  const cudaStream_t s = launch_stream();  // first: it creates the events
  check(cudaEventRecord(g_fork, s), "fork record");
  check(cudaStreamWaitEvent(side_stream(), g_fork, 0), "fork wait");
}

bool side_join() noexcept {
  const cudaStream_t s = launch_stream();
  return cudaEventRecord(g_join, side_stream()) == cudaSuccess && cudaStreamWaitEvent(s, g_join, 0) == cudaSuccess;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "device properties");
  DeviceInfo d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  check(cudaSetDevice(device), "set device");
  check(cudaMemGetInfo(&d.free_bytes, &d.total_bytes), "memory info");
  return d;
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), "pinned host allocation");
  return p;
}
void host_free_pinned(void* p) { cudaFreeHost(p); }

void copy_to_device_async(void* dst, const void* src, size_t n) {
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, launch_stream()), "async copy to device");
}
void copy_to_host_async(void* dst, const void* src, size_t n) {
  check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, launch_stream()), "async copy to host");
}
void stream_sync() { check(cudaStreamSynchronize(launch_stream()), "stream synchronize"); }

void capture_begin() {
  check(cudaStreamBeginCapture(launch_stream(), cudaStreamCaptureModeThreadLocal), "begin capture");
}

void* capture_end() {
  cudaGraph_t g = nullptr;
  check(cudaStreamEndCapture(launch_stream(), &g), "end capture");
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  check(e, "graph instantiate");
  return exec;
}

void capture_abort() noexcept {
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(launch_stream(), &g) == cudaSuccess && g) cudaGraphDestroy(g);
  cudaGetLastError();  // an invalidated capture reports here; the next round starts clean
}

void graph_launch(void* graph) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), launch_stream()), "graph launch");
}
void graph_destroy(void* graph) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)); }

void* event_record_now() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "event create");
  const cudaError_t r = cudaEventRecord(e, launch_stream());
  if (r != cudaSuccess) cudaEventDestroy(e);
  check(r, "event record");
  return e;
}
float event_ms(void* a, void* b) {
  float ms = 0;
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(b)), "event synchronize");
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a), static_cast<cudaEvent_t>(b)), "event elapsed");
  return ms;
}
void event_destroy(void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n), "cudaMalloc");
  check(cudaMalloc(&b, n), "cudaMalloc");
  cudaMemsetAsync(a, 1, n, launch_stream());
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    void* e0 = event_record_now();
    check(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, launch_stream()), "copy");
    void* e1 = event_record_now();
    ms.push_back(event_ms(e0, e1));
    event_destroy(e0);
    event_destroy(e1);
  }
  cudaFree(a);
  cudaFree(b);
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(n) / (double(ms[ms.size() / 2]) * 1e-3);
}

}  // namespace tf::cuda
