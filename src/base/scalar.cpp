#include "base/scalar.h"

namespace tf {

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (a < 0x38800000u) {                                  // subnormal or zero in f16
    float v = bits_to_f32(a) * 16777216.0f;               // scale by 2^24: exact integer count of 2^-24 units
    uint32_t m = uint32_t(v);
    float rem = v - float(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1);
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

namespace {
float g_table_storage[65536];
}  // namespace

const float* const g_f16_table = [] {
  for (uint32_t i = 0; i < 65536; ++i) g_table_storage[i] = f16_to_f32(uint16_t(i));
  return g_table_storage;
}();

}  // namespace tf
