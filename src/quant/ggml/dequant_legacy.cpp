#include "base/scalar.h"
#include "quant/ggml/dequant.h"

namespace tf::quant {

void dequant_q4_0(const uint8_t* b, float* y) {
  float d = f16_to_f32(load_u16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = float((qs[j] & 15) - 8) * d;
    y[j + 16] = float((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  float d = f16_to_f32(load_u16(b)), m = f16_to_f32(load_u16(b + 2));
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(qs[j] & 15) * d + m;
    y[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

void dequant_q5_0(const uint8_t* b, float* y) {
  float d = f16_to_f32(load_u16(b));
  uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 15) | int((qh >> j) & 1) << 4;
    int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = float(lo - 16) * d;
    y[j + 16] = float(hi - 16) * d;
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  float d = f16_to_f32(load_u16(b)), m = f16_to_f32(load_u16(b + 2));
  uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 15) | int((qh >> j) & 1) << 4;
    int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = float(lo) * d + m;
    y[j + 16] = float(hi) * d + m;
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  float d = f16_to_f32(load_u16(b));
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
}

bool has_reference_decode(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  using BlockFn = void (*)(const uint8_t*, float*);
  BlockFn fn = nullptr;
  switch (type) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) dst[i] = bits_to_f32(load_u32(src + 4 * i));
      return true;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      return true;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return true;
    case GgmlType::Q4_0: fn = dequant_q4_0; break;
    case GgmlType::Q4_1: fn = dequant_q4_1; break;
    case GgmlType::Q5_0: fn = dequant_q5_0; break;
    case GgmlType::Q5_1: fn = dequant_q5_1; break;
    case GgmlType::Q8_0: fn = dequant_q8_0; break;
    case GgmlType::Q2_K: fn = dequant_q2_k; break;
    case GgmlType::Q3_K: fn = dequant_q3_k; break;
    case GgmlType::Q4_K: fn = dequant_q4_k; break;
    case GgmlType::Q5_K: fn = dequant_q5_k; break;
    case GgmlType::Q6_K: fn = dequant_q6_k; break;
    default: return false;
  }
  auto info = ggml_type_info(uint32_t(type));
  for (int64_t b = 0; b < n / info->block_elems; ++b) fn(src + b * info->block_bytes, dst + b * info->block_elems);
  return true;
}

}  // namespace tf::quant
