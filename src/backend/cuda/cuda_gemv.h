#pragma once
#include <cstddef>
#include <cstdint>

#include "io/ggml_types.h"

// Host interface of the CUDA backend's first kernels; includes no CUDA header, so any module can call it.
namespace tf::cuda {

int device_count();  // 0 without a driver or a device
bool gemv_supports(GgmlType type);

// y[r, o] = sum_c W[o, c] * x[r, c] on the device: one warp per output column, lanes over blocks, a fixed shuffle
// tree; each row's arithmetic is the same whatever n_rows is. Pointers are device memory.
void gemv(GgmlType type, const void* w, int64_t n_in, int64_t n_out, int64_t row_bytes, const float* x,
          int64_t n_rows, float* y);

void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

}  // namespace tf::cuda
