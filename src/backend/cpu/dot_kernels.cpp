// Highway runtime dispatch: this file is compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/dot_kernels.cpp"
#include "backend/cpu/dot_kernels.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <type_traits>

#include "backend/ctl.h"
#include "base/scalar.h"
#include "quant/ggml/dequant.h"

HWY_BEFORE_NAMESPACE();
namespace tf::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "backend/cpu/dot_accumulate-inl.h"

using DI = hn::Rebind<int32_t, D>;
using DU8 = hn::Rebind<uint8_t, D>;
using DI8 = hn::Rebind<int8_t, D>;
using DU16 = hn::Rebind<uint16_t, D>;
using DU32 = hn::Rebind<uint32_t, D>;

HWY_INLINE V U8Nibbles(const uint8_t* p, bool high) {
  const DI di;
  auto v = hn::PromoteTo(di, hn::LoadU(DU8(), p));
  return hn::ConvertTo(D(), high ? hn::ShiftRight<4>(v) : hn::And(v, hn::Set(di, 15)));
}

HWY_INLINE float F16(const uint8_t* p) { return f16_to_f32_fast(load_u16(p)); }

struct ScaleMin {
  V d, m;
  const uint8_t* qs;
};

// A K-quant super-block's scalars: Q4_K keeps scale*d in a[0..7] and min*dmin in a[8..15]; Q6_K its 16 scale*d.
struct KBlock {
  float a[16];
  const uint8_t* p;
};

// Hands `visit(block, prep, chunk, ctl, n_in)` the decode of one weight row's format.
template <class Visit>
void WithFormat(GgmlType type, const uint8_t* w, int64_t n_in, const Visit& visit) {
  const D d;
  const DI di;
  using B32 = std::integral_constant<int, 32>;
  using B256 = std::integral_constant<int, 256>;
  auto ptr = [&](int64_t b) { return b; };
  // Blocks of an f16 scale then their quants (Q4_0, Q8_0), `bytes` long each.
  auto scaled = [&](int64_t bytes) {
    return [&, bytes](int64_t b) {
      const uint8_t* blk = w + b * bytes;
      return ScaleMin{hn::Set(d, F16(blk)), hn::Zero(d), blk + 2};
    };
  };
  switch (type) {
    case GgmlType::F32:
      return visit(
          B32{}, ptr, [&](int64_t b, int i) { return hn::LoadU(d, reinterpret_cast<const float*>(w) + b * 32 + i); },
          Ctl{1, 2, 0, 0, 0}, n_in);
    case GgmlType::F16:
      return visit(
          B32{}, ptr,
          [&](int64_t b, int i) {
            return hn::PromoteTo(d, hn::LoadU(DF16(), reinterpret_cast<const hwy::float16_t*>(w) + b * 32 + i));
          },
          Ctl{0, 0, 3, 0, 4}, n_in);
    case GgmlType::BF16:
      return visit(
          B32{}, ptr,
          [&](int64_t b, int i) {
            auto u = hn::PromoteTo(DU32(), hn::LoadU(DU16(), reinterpret_cast<const uint16_t*>(w) + b * 32 + i));
            return hn::BitCast(d, hn::ShiftLeft<16>(u));
          },
          Ctl{0, 6, 0, 5, 0}, n_in);
    case GgmlType::Q4_0:
      return visit(
          B32{}, scaled(18),
          [&](const ScaleMin& s, int i) {
            bool high = i >= 16;
            if (TF_CTL_ON(7)) high = !high;
            auto q = hn::PromoteTo(di, hn::LoadU(DU8(), s.qs + (i & 15)));
            q = high ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di, 15));
            return hn::Mul(hn::ConvertTo(d, hn::Sub(q, hn::Set(di, 8))), s.d);
          },
          Ctl{8, 0, 0, 0, 0}, n_in);
    case GgmlType::Q4_1:
      return visit(
          B32{},
          [&](int64_t b) {
            const uint8_t* blk = w + b * 20;
            return ScaleMin{hn::Set(d, F16(blk)), hn::Set(d, TF_CTL_ON(9) ? 0.0f : F16(blk + 2)), blk + 4};
          },
          [&](const ScaleMin& s, int i) { return hn::Add(hn::Mul(U8Nibbles(s.qs + (i & 15), i >= 16), s.d), s.m); },
          Ctl{0, 0, 10, 0, 0}, n_in);
    case GgmlType::Q8_0:
      return visit(
          B32{}, scaled(34),
          [&](const ScaleMin& s, int i) {
            hn::Vec<DI> q = TF_CTL_ON(11)
                                ? hn::BitCast(di, hn::PromoteTo(DU32(), hn::LoadU(DU8(), s.qs + i)))
                                : hn::PromoteTo(di, hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(s.qs + i)));
            return hn::Mul(hn::ConvertTo(d, q), s.d);
          },
          Ctl{0, 0, 0, 12, 0}, n_in);
    case GgmlType::Q4_K:
      return visit(
          B256{},
          [&](int64_t b) {
            const uint8_t* blk = w + b * 144;
            KBlock k;
            const float dd = F16(blk), dm = F16(blk + 2);
            for (int s = 0; s < 8; ++s) {
              uint8_t sc, mn;
              quant::q4k_scale_min(blk + 4, TF_CTL_ON(13) ? (s & 3) : s, sc, mn);
              k.a[s] = dd * float(sc);
              k.a[8 + s] = dm * float(mn);
            }
            k.p = blk + 16;
            return k;
          },
          [&](const KBlock& k, int i) {
            const int s = i >> 5;
            V q = U8Nibbles(k.p + 32 * (s >> 1) + (i & 31), (s & 1) != 0);
            return hn::Sub(hn::Mul(q, hn::Set(d, k.a[s])), hn::Set(d, k.a[8 + s]));
          },
          Ctl{0, 0, 0, 0, 14}, n_in);
    case GgmlType::Q6_K:
      return visit(
          B256{},
          [&](int64_t b) {
            const uint8_t* blk = w + b * 210;
            KBlock k;
            const float dd = F16(blk + 208);
            for (int s = 0; s < 16; ++s) {
              int sc = reinterpret_cast<const int8_t*>(blk + 192)[s];
              if (TF_CTL_ON(15)) sc = sc < 0 ? -sc : sc;
              k.a[s] = dd * float(sc);
            }
            k.p = blk;
            return k;
          },
          [&](const KBlock& k, int i) {
            const int n = i >> 7, g = (i >> 5) & 3, l = i & 31, s = i >> 4;
            auto ql = hn::PromoteTo(di, hn::LoadU(DU8(), k.p + 64 * n + 32 * (g & 1) + l));
            auto nib = g < 2 ? hn::And(ql, hn::Set(di, 15)) : hn::ShiftRight<4>(ql);
            auto qh = hn::PromoteTo(di, hn::LoadU(DU8(), k.p + 128 + 32 * n + l));
            qh = hn::And(hn::ShiftRightSame(qh, 2 * g), hn::Set(di, 3));
            auto q = hn::Sub(hn::Or(nib, hn::ShiftLeft<4>(qh)), hn::Set(di, 32));
            return hn::Mul(hn::Set(d, k.a[s]), hn::ConvertTo(d, q));
          },
          Ctl{0, 16, 0, 0, 0}, n_in);
    default: {
      // Formats without a direct kernel: the codec's exact block decode into a small aligned buffer.
      auto info = ggml_type_info(uint32_t(type));
      const int64_t be = info->block_elems, bb = info->block_bytes;
      HWY_ALIGN float buf[256];
      int64_t nin = TF_CTL_ON(17) && n_in > be ? n_in - be : n_in;
      auto prep = [&](int64_t b) {
        quant::dequantize(type, w + b * bb, buf, be);
        return b;
      };
      auto chunk = [&](int64_t, int i) { return hn::Load(d, buf + i); };
      if (be == 256) return visit(B256{}, prep, chunk, Ctl{18, 0, 0, 0, 0}, nin);
      return visit(B32{}, prep, chunk, Ctl{18, 0, 0, 0, 0}, nin);
    }
  }
}

template <int NR>
void DotFormat(GgmlType type, const uint8_t* w, int64_t n_in, const float* x, int64_t xs, float* out, int64_t os) {
  WithFormat(type, w, n_in, [&](auto blk, const auto& prep, const auto& chunk, Ctl ctl, int64_t nin) {
    Accumulate<NR, decltype(blk)::value>(nin, prep, chunk, x, xs, out, os, ctl);
  });
}

// Batches: decode a weight row once with the same chunk decode (DecodeRow), then run tiles of rows over the decoded
// row with Accumulate's arithmetic (DotDecodedTile), so each row's bits equal the decode-in-registers path.
void DecodeRow(GgmlType type, const uint8_t* w, int64_t n_in, float* buf) {
  WithFormat(type, w, n_in, [&](auto blk, const auto& prep, const auto& chunk, Ctl, int64_t nin) {
    constexpr int B = decltype(blk)::value;
    constexpr int N = int(hn::MaxLanes(D()));
    for (int64_t b = 0; b < nin / B; ++b) {
      const auto st = prep(b);
      for (int c = 0; c < B / N; ++c) hn::StoreU(chunk(st, c * N), D(), buf + b * B + c * N);
    }
  });
}

void DotDecodedTile(GgmlType type, const float* buf, int64_t n_in, const float* x, int64_t xs, int nr, float* out,
                    int64_t os) {
  WithFormat(type, nullptr, n_in, [&](auto blk, const auto&, const auto&, Ctl ctl, int64_t nin) {
    constexpr int B = decltype(blk)::value;
    auto id = [](int64_t b) { return b; };
    auto load = [&](int64_t b, int i) { return hn::LoadU(D(), buf + b * B + i); };
    switch (nr) {
      case 1:
        return Accumulate<1, B>(nin, id, load, x, xs, out, os, ctl);
      case 2:
        return Accumulate<2, B>(nin, id, load, x, xs, out, os, ctl);
      case 3:
        return Accumulate<3, B>(nin, id, load, x, xs, out, os, ctl);
      default:
        return Accumulate<4, B>(nin, id, load, x, xs, out, os, ctl);
    }
  });
}

void DotTile(GgmlType type, const uint8_t* w, int64_t n_in, const float* x, int64_t xs, int nr, float* out,
             int64_t os) {
  switch (nr) {
    case 1:
      return DotFormat<1>(type, w, n_in, x, xs, out, os);
    case 2:
      return DotFormat<2>(type, w, n_in, x, xs, out, os);
    case 3:
      return DotFormat<3>(type, w, n_in, x, xs, out, os);
    default:
      return DotFormat<4>(type, w, n_in, x, xs, out, os);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tf::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tf::cpu {
HWY_EXPORT(DotTile);
HWY_EXPORT(DecodeRow);
HWY_EXPORT(DotDecodedTile);

void decode_row(GgmlType type, const uint8_t* wrow, int64_t n_in, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeRow)(type, wrow, n_in, out);
}

void dot_tile_decoded(GgmlType type, const float* wrow, int64_t n_in, const float* x, int64_t x_stride, int nr,
                      float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotDecodedTile)(type, wrow, n_in, x, x_stride, nr, out, out_stride);
}

void dot_tile(GgmlType type, const uint8_t* wrow, int64_t n_in, const float* x, int64_t x_stride, int nr, float* out,
              int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotTile)(type, wrow, n_in, x, x_stride, nr, out, out_stride);
}

bool dot_has_direct_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

}  // namespace tf::cpu
#endif
