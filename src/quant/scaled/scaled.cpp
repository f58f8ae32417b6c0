#include "quant/scaled/scaled.h"

#include <fmt/format.h>

#include <cstring>

#include "base/scalar.h"

namespace tf::quant {

const char* scaled_kind_name(ScaledKind k) {
  switch (k) {
    case ScaledKind::Fp8E8M0: return "fp8_block (E4M3, E8M0 scales)";
    case ScaledKind::Fp8F32: return "fp8_block (E4M3, F32 scales)";
    case ScaledKind::Mxfp4: return "mxfp4 (E2M1, E8M0 scale per 32)";
  }
  return "?";
}

std::string scaled_refusal(const ScaledWeight& w) {
  if (w.n_in < 1 || w.n_out < 1) return fmt::format("tensor '{}': empty shape [{}, {}]", w.name, w.n_out, w.n_in);
  if (w.kind == ScaledKind::Mxfp4) {
    if (w.block != 32) return fmt::format("tensor '{}': mxfp4 scales cover 32 elements, not {}", w.name, w.block);
    if (w.n_in % 32 != 0)
      return fmt::format("tensor '{}': mxfp4 rows of {} elements are not whole 32-element groups", w.name, w.n_in);
    return {};
  }
  if (w.block < 32 || w.block % 32 != 0)
    return fmt::format("tensor '{}': fp8 block size {} is not a multiple of 32", w.name, w.block);
  return {};
}

ScaledWeight ScaledWeight::rows(int64_t first, int64_t n) const {
  ScaledWeight w = *this;
  w.row0 = row0 + first, w.n_out = n;
  return w;
}

const uint8_t* ScaledWeight::scale_row(int64_t o) const {
  const int64_t r = kind == ScaledKind::Mxfp4 ? row0 + o : (row0 + o) / block;
  return scale + r * scale_cols() * (kind == ScaledKind::Fp8F32 ? 4 : 1);
}

float scaled_group_scale(ScaledKind kind, const uint8_t* scale_row, int64_t block, int64_t j) {
  const int64_t c = j / block;
  if (kind == ScaledKind::Fp8F32) {
    float s;
    std::memcpy(&s, scale_row + 4 * c, 4);
    return s;
  }
  return e8m0_to_f32(scale_row[c]);
}

void scaled_decode(const ScaledWeight& w, int64_t o, int64_t j0, int64_t n, float* out) {
  const uint8_t* q = w.row(o);
  const uint8_t* s = w.scale_row(o);
  for (int64_t j = j0; j < j0 + n; ++j) {
    const float sc = scaled_group_scale(w.kind, s, w.block, j);
    const float v = w.kind == ScaledKind::Mxfp4 ? e2m1_to_f32(uint8_t(q[j / 2] >> (4 * (j & 1)))) : e4m3_to_f32(q[j]);
    out[j - j0] = v * sc;
  }
}

std::vector<double> scaled_decode_f64(const ScaledWeight& w) {
  std::vector<double> out(size_t(w.n_in * w.n_out));
  for (int64_t o = 0; o < w.n_out; ++o) {
    const uint8_t* q = w.row(o);
    const uint8_t* s = w.scale_row(o);
    for (int64_t j = 0; j < w.n_in; ++j) {
      const double sc = scaled_group_scale(w.kind, s, w.block, j);
      const double v =
          w.kind == ScaledKind::Mxfp4 ? e2m1_to_f32(uint8_t(q[j / 2] >> (4 * (j & 1)))) : e4m3_to_f32(q[j]);
      out[size_t(o * w.n_in + j)] = v * sc;
    }
  }
  return out;
}

}  // namespace tf::quant
