#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_gemv.h"

// The tensor-core weight layout (host side): which formats use it and how a GGUF tensor is repacked into it.
namespace tf::cuda {

// Bytes per lane per 64 columns of fragment integers, scale words per row per 256-column slice, GGUF block size.
struct MmaFormat {
  int q_bytes, meta_words, block, block_bytes;
};
MmaFormat mma_format(GgmlType t);  // q_bytes 0: not a tensor-core format
size_t mma_matrix_bytes(GgmlType t, int64_t n_in, int64_t n_out);
// Repacks on the host, chunk by chunk, and copies each chunk with `to_device`.
DeviceMatrix mma_upload(GgmlType t, const void* host, int64_t n_in, int64_t n_out, void* dst,
                        void (*to_device)(void*, const void*, size_t));

}  // namespace tf::cuda
