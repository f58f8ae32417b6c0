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

// FP8 E4M3 (fn: no infinities) to f32, exactly: bias 7, subnormals m * 2^-9, codes 0x7F and 0xFF are NaN.
inline float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80) << 24, e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7F) == 0x7F) return bits_to_f32(sign | 0x7FC00000u);
  if (e == 0) return bits_to_f32(sign | f32_to_bits(float(m) * 0x1.0p-9f));
  return bits_to_f32(sign | (e + 120) << 23 | m << 20);
}

// E8M0 (an unsigned power-of-two exponent, bias 127) to f32: 2^(e-127) exactly (e = 0 is the subnormal 2^-127);
// 255 is NaN.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 255) return bits_to_f32(0x7FC00000u);
  return e == 0 ? bits_to_f32(0x00400000u) : bits_to_f32(uint32_t(e) << 23);
}

// FP4 E2M1 code (low 4 bits) to f32: 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (8 is -0).
inline float e2m1_to_f32(uint8_t c) {
  static constexpr float kLut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kLut[c & 15];
}

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace tf
