// Highway runtime dispatch: this file is compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/dot_scaled.cpp"
#include "backend/cpu/dot_scaled.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstring>

#include "backend/ctl.h"
#include "base/scalar.h"

HWY_BEFORE_NAMESPACE();
namespace tf::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "backend/cpu/dot_accumulate-inl.h"

// Every E4M3 code's value, built once from the exact scalar decode.
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = e4m3_to_f32(uint8_t(c));
  }
};

// A 32-element group of one row decoded into `buf`: code value times the group's scale (one f32 product each).
HWY_INLINE void DecodeGroup(const ScaledRow& w, int64_t b, float* buf) {
  static const E4m3Table kE4m3;
  const int64_t j = b * 32;
  if (w.kind == quant::ScaledKind::Mxfp4) {
    const float s = e8m0_to_f32(w.scale[b]);
    const uint8_t* q = w.q + j / 2;
    const bool swap = TF_CTL_ON(61);  // planted: high nibble read first
    for (int k = 0; k < 16; ++k) {
      buf[2 * k] = e2m1_to_f32(uint8_t(swap ? q[k] >> 4 : q[k])) * s;
      buf[2 * k + 1] = e2m1_to_f32(uint8_t(swap ? q[k] : q[k] >> 4)) * s;
    }
    return;
  }
  const int64_t col = TF_CTL_ON(62) ? 0 : j / w.block;  // planted: every group takes the row's first scale
  float s;
  if (w.kind == quant::ScaledKind::Fp8F32) {
    std::memcpy(&s, w.scale + 4 * col, 4);
  } else {
    s = e8m0_to_f32(w.scale[col]);
    if (TF_CTL_ON(60) && w.scale[col] != 255) s *= 0.5f;  // planted: E8M0 read with bias 128
  }
  for (int k = 0; k < 32; ++k) buf[k] = kE4m3.v[w.q[j + k]] * s;
}

template <int NR>
void DotScaledN(const ScaledRow& w, int64_t n_in, const float* x, int64_t xs, float* out, int64_t os) {
  HWY_ALIGN float buf[32];
  auto prep = [&](int64_t b) {
    DecodeGroup(w, b, buf);
    return b;
  };
  auto chunk = [&](int64_t, int i) { return hn::Load(D(), buf + i); };
  const Ctl ctl = w.kind == quant::ScaledKind::Mxfp4    ? Ctl{63, 0, 0, 0, 0}
                  : w.kind == quant::ScaledKind::Fp8F32 ? Ctl{0, 0, 65, 0, 0}
                                                        : Ctl{0, 0, 0, 0, 0};
  Accumulate<NR, 32>(n_in, prep, chunk, x, xs, out, os, ctl);
}

void DotScaled(const ScaledRow& w, int64_t n_in, const float* x, int64_t xs, int nr, float* out, int64_t os) {
  switch (nr) {
    case 1:
      return DotScaledN<1>(w, n_in, x, xs, out, os);
    case 2:
      return DotScaledN<2>(w, n_in, x, xs, out, os);
    case 3:
      return DotScaledN<3>(w, n_in, x, xs, out, os);
    default:
      return DotScaledN<4>(w, n_in, x, xs, out, os);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tf::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tf::cpu {
HWY_EXPORT(DotScaled);

void dot_tile_scaled(const ScaledRow& w, int64_t n_in, const float* x, int64_t x_stride, int nr, float* out,
                     int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotScaled)(w, n_in, x, x_stride, nr, out, out_stride);
}

}  // namespace tf::cpu
#endif
