#pragma once
#include <cstdint>

#include "io/ggml_types.h"

namespace tf::cpu {

constexpr int kMaxTileRows = 4;

// out[r] = dot(weight row, x + r * x_stride) for r < nr (1..kMaxTileRows), decoding the stored format in
// registers. Each row's arithmetic is the same whatever nr is: this is what makes batches row-invariant.
void dot_tile(GgmlType type, const uint8_t* wrow, int64_t n_in, const float* x, int64_t x_stride, int nr, float* out,
              int64_t out_stride);

// For batches: decode_row writes a weight row's n_in values with the kernels' own chunk decode; dot_tile_decoded
// then gives exactly dot_tile's results from that decoded row (`type` only selects the block and planted controls).
void decode_row(GgmlType type, const uint8_t* wrow, int64_t n_in, float* out);
void dot_tile_decoded(GgmlType type, const float* wrow, int64_t n_in, const float* x, int64_t x_stride, int nr,
                      float* out, int64_t out_stride);

// True when dot_tile reads `type` directly (the rest go through the generic block decode).
bool dot_has_direct_kernel(GgmlType type);

}  // namespace tf::cpu
