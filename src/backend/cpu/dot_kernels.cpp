// Highway runtime dispatch: this file is compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/dot_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "backend/cpu/dot_kernels.h"
#include "backend/ctl.h"
#include "base/scalar.h"
#include "quant/ggml/dequant.h"

HWY_BEFORE_NAMESPACE();
namespace tf::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 float lanes, so AVX2 and AVX-512 machines share one lane layout (and so the same bits).
using D = hn::CappedTag<float, 8>;
using V = hn::Vec<D>;
using DI = hn::Rebind<int32_t, D>;
using DU8 = hn::Rebind<uint8_t, D>;
using DI8 = hn::Rebind<int8_t, D>;
using DU16 = hn::Rebind<uint16_t, D>;
using DU32 = hn::Rebind<uint32_t, D>;
using DF16 = hn::Rebind<hwy::float16_t, D>;

// Control ids planted in the shared accumulation loop of one format (0: none).
struct Ctl {
  int nonfinite_zero = 0, lost_block = 0, fp16_acc = 0, neighbour_row = 0, past_end = 0;
};

HWY_INLINE V U8Nibbles(const uint8_t* p, bool high) {
  const DI di;
  auto v = hn::PromoteTo(di, hn::LoadU(DU8(), p));
  return hn::ConvertTo(D(), high ? hn::ShiftRight<4>(v) : hn::And(v, hn::Set(di, 15)));
}

HWY_INLINE V LoadX(const float* p, const Ctl& ctl) {
  const D d;
  if (TF_CTL_ON(ctl.nonfinite_zero) && ctl.nonfinite_zero) {
    HWY_ALIGN float tmp[8];
    for (size_t i = 0; i < hn::Lanes(d); ++i) tmp[i] = std::isfinite(p[i]) ? p[i] : 0.0f;
    return hn::Load(d, tmp);
  }
  return hn::LoadU(d, p);
}

// Fixed accumulation: per row two accumulators alternating over chunks, blocks in order, one final reduction.
template <int NR, class Decode>
HWY_INLINE void Accumulate(int64_t n_in, int64_t block_elems, const Decode& decode, const float* x, int64_t xs,
                           float* out, int64_t os, const Ctl& ctl) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  V acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  const int64_t nb = n_in / block_elems;
  for (int64_t b = 0; b < nb; ++b) {
    if (TF_CTL_ON(ctl.lost_block) && ctl.lost_block && b == nb - 1) break;
    for (int64_t i = 0; i < block_elems; i += N) {
      V w = decode(b, i);
      int k = int((i / N) & 1);
      for (int r = 0; r < NR; ++r) {
        int rx = (TF_CTL_ON(ctl.neighbour_row) && ctl.neighbour_row && r > 0 && b == 0) ? r - 1 : r;
        acc[r][k] = hn::MulAdd(w, LoadX(x + rx * xs + b * block_elems + i, ctl), acc[r][k]);
      }
    }
    if (TF_CTL_ON(ctl.fp16_acc) && ctl.fp16_acc)
      for (int r = 0; r < NR; ++r)
        for (int k = 0; k < 2; ++k) acc[r][k] = hn::PromoteTo(d, hn::DemoteTo(DF16(), acc[r][k]));
  }
  for (int r = 0; r < NR; ++r) out[r * os] = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc[r][0], acc[r][1])));
  if (TF_CTL_ON(ctl.past_end) && ctl.past_end) out[NR * os] = 0.0f;
}

template <int NR>
void DotFormat(GgmlType type, const uint8_t* w, int64_t n_in, const float* x, int64_t xs, float* out, int64_t os) {
  const D d;
  const DI di;
  switch (type) {
    case GgmlType::F32:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        return hn::LoadU(d, reinterpret_cast<const float*>(w) + b * 32 + i);
      }, x, xs, out, os, Ctl{1, 2, 0, 0, 0});
    case GgmlType::F16:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        return hn::PromoteTo(d, hn::LoadU(DF16(), reinterpret_cast<const hwy::float16_t*>(w) + b * 32 + i));
      }, x, xs, out, os, Ctl{0, 0, 3, 0, 4});
    case GgmlType::BF16:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        auto u = hn::PromoteTo(DU32(), hn::LoadU(DU16(), reinterpret_cast<const uint16_t*>(w) + b * 32 + i));
        return hn::BitCast(d, hn::ShiftLeft<16>(u));
      }, x, xs, out, os, Ctl{0, 6, 0, 5, 0});
    case GgmlType::Q4_0:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        const uint8_t* blk = w + b * 18;
        bool high = i >= 16;
        if (TF_CTL_ON(7)) high = !high;
        auto q = hn::PromoteTo(di, hn::LoadU(DU8(), blk + 2 + (i & 15)));
        q = high ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di, 15));
        return hn::Mul(hn::ConvertTo(d, hn::Sub(q, hn::Set(di, 8))), hn::Set(d, f16_to_f32(load_u16(blk))));
      }, x, xs, out, os, Ctl{8, 0, 0, 0, 0});
    case GgmlType::Q4_1:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        const uint8_t* blk = w + b * 20;
        float m = TF_CTL_ON(9) ? 0.0f : f16_to_f32(load_u16(blk + 2));
        V q = U8Nibbles(blk + 4 + (i & 15), i >= 16);
        return hn::Add(hn::Mul(q, hn::Set(d, f16_to_f32(load_u16(blk)))), hn::Set(d, m));
      }, x, xs, out, os, Ctl{0, 0, 10, 0, 0});
    case GgmlType::Q8_0:
      return Accumulate<NR>(n_in, 32, [&](int64_t b, int64_t i) {
        const uint8_t* blk = w + b * 34;
        hn::Vec<DI> q = TF_CTL_ON(11) ? hn::BitCast(di, hn::PromoteTo(DU32(), hn::LoadU(DU8(), blk + 2 + i)))
                                      : hn::PromoteTo(di, hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(blk + 2 + i)));
        return hn::Mul(hn::ConvertTo(d, q), hn::Set(d, f16_to_f32(load_u16(blk))));
      }, x, xs, out, os, Ctl{0, 0, 0, 12, 0});
    case GgmlType::Q4_K:
      return Accumulate<NR>(n_in, 256, [&](int64_t b, int64_t i) {
        const uint8_t* blk = w + b * 144;
        int s = int(i >> 5);
        uint8_t sc, mn;
        quant::q4k_scale_min(blk + 4, TF_CTL_ON(13) ? (s & 3) : s, sc, mn);
        float d1 = f16_to_f32(load_u16(blk)) * float(sc), m1 = f16_to_f32(load_u16(blk + 2)) * float(mn);
        V q = U8Nibbles(blk + 16 + 32 * (s >> 1) + (i & 31), (s & 1) != 0);
        return hn::Sub(hn::Mul(q, hn::Set(d, d1)), hn::Set(d, m1));
      }, x, xs, out, os, Ctl{0, 0, 0, 0, 14});
    case GgmlType::Q6_K:
      return Accumulate<NR>(n_in, 256, [&](int64_t b, int64_t i) {
        const uint8_t* blk = w + b * 210;
        int n = int(i >> 7), g = int((i >> 5) & 3), l = int(i & 31);
        auto ql = hn::PromoteTo(di, hn::LoadU(DU8(), blk + 64 * n + 32 * (g & 1) + l));
        auto nib = g < 2 ? hn::And(ql, hn::Set(di, 15)) : hn::ShiftRight<4>(ql);
        auto qh = hn::PromoteTo(di, hn::LoadU(DU8(), blk + 128 + 32 * n + l));
        qh = hn::And(hn::ShiftRightSame(qh, 2 * g), hn::Set(di, 3));
        auto q = hn::Sub(hn::Or(nib, hn::ShiftLeft<4>(qh)), hn::Set(di, 32));
        int sc = reinterpret_cast<const int8_t*>(blk + 192)[i >> 4];
        if (TF_CTL_ON(15)) sc = sc < 0 ? -sc : sc;
        float dl = f16_to_f32(load_u16(blk + 208)) * float(sc);
        return hn::Mul(hn::Set(d, dl), hn::ConvertTo(d, q));
      }, x, xs, out, os, Ctl{0, 16, 0, 0, 0});
    default: {
      // Formats without a direct kernel: the codec's exact block decode into a small aligned buffer.
      auto info = ggml_type_info(uint32_t(type));
      int64_t be = info->block_elems, bb = info->block_bytes;
      HWY_ALIGN float buf[256];
      int64_t cur = -1;
      int64_t nin = TF_CTL_ON(17) ? n_in - be : n_in;
      if (nin <= 0) nin = n_in;
      return Accumulate<NR>(nin, be, [&](int64_t b, int64_t i) {
        if (b != cur) {
          quant::dequantize(type, w + b * bb, buf, be);
          cur = b;
        }
        return hn::Load(d, buf + i);
      }, x, xs, out, os, Ctl{18, 0, 0, 0, 0});
    }
  }
}

void DotTile(GgmlType type, const uint8_t* w, int64_t n_in, const float* x, int64_t xs, int nr, float* out,
             int64_t os) {
  switch (nr) {
    case 1: return DotFormat<1>(type, w, n_in, x, xs, out, os);
    case 2: return DotFormat<2>(type, w, n_in, x, xs, out, os);
    case 3: return DotFormat<3>(type, w, n_in, x, xs, out, os);
    default: return DotFormat<4>(type, w, n_in, x, xs, out, os);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tf::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tf::cpu {
HWY_EXPORT(DotTile);

void dot_tile(GgmlType type, const uint8_t* wrow, int64_t n_in, const float* x, int64_t x_stride, int nr, float* out,
              int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotTile)(type, wrow, n_in, x, x_stride, nr, out, out_stride);
}

bool dot_has_direct_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cpu
#endif
