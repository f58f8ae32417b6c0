#pragma once
#include <cstdint>

#include "io/ggml_types.h"

namespace tf::quant {

// Exact reference decode of `n` elements (a multiple of the block size) in the f32 operation order gguf-py uses.
// Returns false for a type without a reference decode.
bool dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n);
bool has_reference_decode(GgmlType type);

void dequant_q4_0(const uint8_t* b, float* y);
void dequant_q4_1(const uint8_t* b, float* y);
void dequant_q5_0(const uint8_t* b, float* y);
void dequant_q5_1(const uint8_t* b, float* y);
void dequant_q8_0(const uint8_t* b, float* y);
void dequant_q2_k(const uint8_t* b, float* y);
void dequant_q3_k(const uint8_t* b, float* y);
void dequant_q4_k(const uint8_t* b, float* y);
void dequant_q5_k(const uint8_t* b, float* y);
void dequant_q6_k(const uint8_t* b, float* y);

// Q4_K / Q5_K packed 6-bit scale and min of sub-block k (0..7).
inline void q4k_scale_min(const uint8_t* s, int k, uint8_t& sc, uint8_t& mn) {
  if (k < 4) {
    sc = s[k] & 63;
    mn = s[k + 4] & 63;
  } else {
    sc = uint8_t((s[k + 4] & 15) | ((s[k - 4] >> 6) << 4));
    mn = uint8_t((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
  }
}

}  // namespace tf::quant
