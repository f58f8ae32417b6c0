#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

// Median over five timed batches of `reps` calls, after one warm-up call (module load and first touch stay out).
inline float time_ms(const std::function<void()>& fn, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  fn();
  cudaDeviceSynchronize();
  std::vector<float> t;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a);
    for (int r = 0; r < reps; ++r) fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms / float(reps));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
