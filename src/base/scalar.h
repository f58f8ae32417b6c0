#pragma once
#include <cstdint>
#include <cstring>

namespace tf {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE binary16 to binary32, exact for every code (subnormals, inf, NaN payloads kept).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400) == 0);
    return bits_to_f32(sign | uint32_t(127 - 15 - e) << 23 | ((man & 0x3ff) << 13));
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint16_t f32_to_f16(float f);

// f16_to_f32 through a 64K-entry table built at start-up: the hot-loop form, same bits.
extern const float* const g_f16_table;
inline float f16_to_f32_fast(uint16_t h) { return g_f16_table[h]; }

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

}  // namespace tf
