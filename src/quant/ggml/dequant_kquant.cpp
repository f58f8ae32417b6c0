#include "base/scalar.h"
#include "quant/ggml/dequant.h"

namespace tf::quant {

void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  float d = f16_to_f32(load_u16(b + 80)), dmin = f16_to_f32(load_u16(b + 82));
  for (int e = 0; e < 256; ++e) {
    int n = e >> 7, j = (e >> 5) & 3, l = e & 31, s = e >> 4;
    int q = (qs[32 * n + l] >> (2 * j)) & 3;
    float dl = d * float(scales[s] & 15), ml = dmin * float(scales[s] >> 4);
    y[e] = dl * float(q) - ml;
  }
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  float d = f16_to_f32(load_u16(b + 108));
  int S[16];
  for (int i = 0; i < 16; ++i) {
    int low4 = i < 8 ? sc[i] & 15 : sc[i - 8] >> 4;
    int hi2 = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    S[i] = low4 | hi2 << 4;
  }
  for (int e = 0; e < 256; ++e) {
    int n = e >> 7, j = (e >> 5) & 3, l = e & 31, s = e >> 4;
    int lo = (qs[32 * n + l] >> (2 * j)) & 3;
    int hb = (hmask[l] >> (4 * n + j)) & 1;
    int q = lo - (hb ? 0 : 4);
    float dl = d * float(S[s] - 32);
    y[e] = dl * float(q);
  }
}

namespace {
// Q4_K and Q5_K share their scales and nibbles; Q5_K adds a fifth bit per element from qh (nullptr for Q4_K).
void dequant_k_scale_min(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  float d = f16_to_f32(load_u16(b)), dmin = f16_to_f32(load_u16(b + 2));
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, mn;
    q4k_scale_min(b + 4, s, sc, mn);
    float d1 = d * float(sc), m1 = dmin * float(mn);
    const uint8_t* q = qs + 32 * (s >> 1);
    for (int l = 0; l < 32; ++l) {
      int v = ((s & 1) ? q[l] >> 4 : q[l] & 15) + (qh ? 16 * ((qh[l] >> s) & 1) : 0);
      y[32 * s + l] = d1 * float(v) - m1;
    }
  }
}
}  // namespace

void dequant_q4_k(const uint8_t* b, float* y) { dequant_k_scale_min(b, nullptr, b + 16, y); }

void dequant_q5_k(const uint8_t* b, float* y) { dequant_k_scale_min(b, b + 16, b + 48, y); }

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  float d = f16_to_f32(load_u16(b + 208));
  for (int e = 0; e < 256; ++e) {
    int n = e >> 7, g = (e >> 5) & 3, l = e & 31, s = e >> 4;
    int byte = ql[64 * n + 32 * (g & 1) + l];
    int nib = g < 2 ? byte & 15 : byte >> 4;
    int q = (nib | ((qh[32 * n + l] >> (2 * g)) & 3) << 4) - 32;
    y[e] = (d * float(scales[s])) * float(q);
  }
}

}  // namespace tf::quant
