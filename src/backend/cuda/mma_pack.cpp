// Host side of the tensor-core weight layout: GGUF blocks repacked into per-lane mma fragments of small integers.
#include "backend/cuda/mma_pack.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/scalar.h"

namespace tf::cuda {
namespace {

uint16_t u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// One GGUF row decoded to the integers the fragments hold (bf16 bits for BF16) and its per-slice scale words.
void decode_row(GgmlType t, const uint8_t* row, int64_t n_in, int64_t n_slices, uint16_t* v, uint32_t* meta) {
  const MmaFormat f = mma_format(t);
  std::fill(meta, meta + n_slices * f.meta_words, 0u);
  auto put_meta = [&](int64_t slice, int word, uint32_t val, int shift) {
    meta[slice * f.meta_words + word] |= val << shift;
  };
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
      for (int64_t b = 0; b < n_in / 32; ++b) {
        const bool q41 = t == GgmlType::Q4_1;
        const uint8_t* blk = row + b * (q41 ? 20 : 18);
        const uint8_t* qs = blk + (q41 ? 4 : 2);
        for (int l = 0; l < 16; ++l) v[b * 32 + l] = qs[l] & 15, v[b * 32 + 16 + l] = qs[l] >> 4;
        const int64_t sl = b / 8, j = b % 8;
        if (q41)
          put_meta(sl, int(j), u16(blk) | (uint32_t(u16(blk + 2)) << 16), 0);
        else
          put_meta(sl, int(j / 2), u16(blk), int(16 * (j % 2)));
      }
      break;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n_in / 32; ++b) {
        const uint8_t* blk = row + b * 34;
        for (int l = 0; l < 32; ++l) v[b * 32 + l] = blk[2 + l];  // int8 bits
        put_meta(b / 8, int((b % 8) / 2), u16(blk), int(16 * (b % 2)));
      }
      break;
    case GgmlType::Q4_K:
      for (int64_t b = 0; b < n_in / 256; ++b) {
        const uint8_t* blk = row + b * 144;
        // d | dmin, then the eight 6-bit scales and the eight 6-bit mins unpacked to bytes.
        std::memcpy(&meta[b * 5], blk, 4);
        const uint8_t* sc = blk + 4;
        for (int j = 0; j < 8; ++j) {
          const uint32_t scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
          const uint32_t mn = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
          meta[b * 5 + 1 + j / 4] |= scale << (8 * (j % 4));
          meta[b * 5 + 3 + j / 4] |= mn << (8 * (j % 4));
        }
        for (int c = 0; c < 256; ++c) {
          const int sb = c / 32, l = c % 32;
          const uint8_t byte = blk[16 + 32 * (sb / 2) + l];
          v[b * 256 + c] = (sb & 1) ? byte >> 4 : byte & 15;
        }
      }
      break;
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < n_in / 256; ++b) {
        const uint8_t* blk = row + b * 210;
        const uint8_t *ql = blk, *qh = blk + 128;
        for (int w = 0; w < 4; ++w) std::memcpy(&meta[b * 5 + w], blk + 192 + 4 * w, 4);
        meta[b * 5 + 4] = u16(blk + 208);
        for (int c = 0; c < 256; ++c) {
          const int half = c / 128, in = c % 128, qd = in / 32, l = in % 32;
          const uint8_t lo = ql[64 * half + l + 32 * (qd & 1)];
          const uint8_t nib = (qd < 2) ? (lo & 15) : (lo >> 4);
          const uint8_t hb = (qh[32 * half + l] >> (2 * qd)) & 3;
          v[b * 256 + c] = uint16_t(nib | (hb << 4));
        }
      }
      break;
    case GgmlType::BF16:
      for (int64_t c = 0; c < n_in; ++c) v[c] = u16(row + 2 * c);
      break;
    default:
      throw std::runtime_error("tensor-core layout: unsupported format");
  }
}

// The power of two putting a K-quant matrix's largest possible |weight| into [2^14, 2^15), for fp16 weights.
void f16_exponent(GgmlType t, const uint8_t* src, int64_t n_in, int64_t n_out, DeviceMatrix& m) {
  if (t != GgmlType::Q4_K && t != GgmlType::Q6_K) return;
  const int64_t blocks = n_out * (n_in / 256);
  double mx = 0;
  bool finite = true;
  auto h = [](const uint8_t* p) { return double(f16_to_f32(u16(p))); };
  for (int64_t b = 0; b < blocks; ++b) {
    double v = 0;
    if (t == GgmlType::Q4_K) {
      const uint8_t* blk = src + b * 144;
      const double d = std::fabs(h(blk)), dmin = std::fabs(h(blk + 2));
      const uint8_t* sc = blk + 4;
      finite = finite && std::isfinite(d) && std::isfinite(dmin);
      for (int j = 0; j < 8; ++j) {
        const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        const int mn = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        v = std::max(v, d * scale * 15 + dmin * mn);
      }
    } else {
      const uint8_t* blk = src + b * 210;
      const double d = std::fabs(h(blk + 208));
      finite = finite && std::isfinite(d);
      int top = 0;
      for (int j = 0; j < 16; ++j) top = std::max(top, std::abs(int(int8_t(blk[192 + j]))));
      v = d * top * 32;
    }
    mx = std::max(mx, v);
  }
  m.f16 = finite;
  int ex = 0;
  if (finite && mx > 0) std::frexp(mx, &ex);
  m.f16_exp = finite && mx > 0 ? 15 - ex : 0;
}

struct Sizes {
  int64_t tiles, k64, slices;
  size_t q, h, meta;
};
Sizes sizes_of(GgmlType t, int64_t n_in, int64_t n_out) {
  const MmaFormat f = mma_format(t);
  Sizes s{(n_out + 15) / 16, n_in / 64, (n_in + 255) / 256, 0, 0, 0};
  s.q = size_t(s.tiles * s.k64 * 32 * f.q_bytes);
  s.h = t == GgmlType::Q6_K ? size_t(s.tiles * s.k64 * 32 * 8) : 0;
  s.meta = size_t(s.tiles * s.slices * 16 * f.meta_words * 4);
  return s;
}

}  // namespace

MmaFormat mma_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return {16, 4, 32, 18};
    case GgmlType::Q4_1:
      return {16, 8, 32, 20};
    case GgmlType::Q8_0:
      return {32, 4, 32, 34};
    case GgmlType::Q4_K:
      return {16, 5, 256, 144};
    case GgmlType::Q6_K:
      return {16, 5, 256, 210};
    case GgmlType::BF16:
      return {64, 0, 32, 64};
    default:
      return {0, 0, 0, 0};
  }
}

bool mma_layout(GgmlType t, int64_t n_in) {
  const MmaFormat f = mma_format(t);
  return f.q_bytes != 0 && n_in > 0 && n_in % 64 == 0 && n_in % f.block == 0;
}

size_t mma_matrix_bytes(GgmlType t, int64_t n_in, int64_t n_out) {
  const Sizes s = sizes_of(t, n_in, n_out);
  return align256(s.q) + align256(s.h) + align256(s.meta);
}

DeviceMatrix mma_upload(GgmlType t, const void* host, int64_t n_in, int64_t n_out, void* dst,
                        void (*to_device)(void*, const void*, size_t)) {
  if (!mma_layout(t, n_in)) throw std::runtime_error("tensor-core layout: unsupported format or row length");
  const MmaFormat f = mma_format(t);
  const Sizes s = sizes_of(t, n_in, n_out);
  auto* d = static_cast<uint8_t*>(dst);
  DeviceMatrix m;
  m.type = t, m.n_in = n_in, m.n_out = n_out, m.units = s.k64, m.slices = int(s.slices), m.mma = true;
  m.q = d, m.h = d + align256(s.q), m.s = d + align256(s.q) + align256(s.h);
  const size_t row_bytes = size_t(n_in / f.block) * size_t(f.block_bytes);
  const auto* src = static_cast<const uint8_t*>(host);
  const int64_t per = std::max<int64_t>(1, (int64_t(32) << 20) / int64_t(n_in * 16 * 2));  // tiles per chunk
  const size_t tq = size_t(s.k64 * 32 * f.q_bytes), th = size_t(s.k64 * 32 * 8),
               tm = size_t(s.slices * 16) * f.meta_words;
  std::vector<uint8_t> qb, hb;
  std::vector<uint32_t> mb;
  for (int64_t t0 = 0; t0 < s.tiles; t0 += per) {
    const int64_t nt = std::min(per, s.tiles - t0);
    qb.assign(size_t(nt) * tq, 0), hb.assign(s.h ? size_t(nt) * th : 0, 0), mb.assign(size_t(nt) * tm, 0);
    auto pack = [&](int64_t first, int64_t step) {
      std::vector<uint16_t> v(size_t(16 * n_in));
      std::vector<uint32_t> meta(size_t(s.slices) * f.meta_words);
      for (int64_t ti = first; ti < nt; ti += step) {
        std::fill(v.begin(), v.end(), uint16_t(0));
        for (int r = 0; r < 16; ++r) {
          const int64_t o = (t0 + ti) * 16 + r;
          if (o >= n_out) break;
          decode_row(t, src + size_t(o) * row_bytes, n_in, s.slices, v.data() + r * n_in, meta.data());
          for (int64_t sl = 0; sl < s.slices; ++sl)
            for (int w = 0; w < f.meta_words; ++w)
              mb[size_t(ti) * tm + size_t((sl * 16 + r) * f.meta_words + w)] = meta[size_t(sl * f.meta_words + w)];
        }
        uint8_t* q = qb.data() + size_t(ti) * tq;
        uint8_t* h = s.h ? hb.data() + size_t(ti) * th : nullptr;
        for (int64_t kb = 0; kb < s.k64; ++kb)
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, tt = lane % 4;
            uint8_t* lq = q + size_t((kb * 32 + lane) * f.q_bytes);
            uint32_t hw[2] = {0, 0};
            for (int st = 0; st < 4; ++st)
              for (int i = 0; i < 4; ++i)
                for (int e = 0; e < 2; ++e) {
                  const int r = g + 8 * (i & 1);
                  const int64_t k = kb * 64 + st * 16 + 2 * tt + 8 * (i >> 1) + e;
                  const uint16_t val = v[size_t(r * n_in + k)];
                  if (f.q_bytes == 16) {  // nibbles: step st's word, pair i at bit 4i, second element 16 higher
                    uint32_t word;
                    std::memcpy(&word, lq + 4 * st, 4);
                    word |= uint32_t(val & 15) << (4 * i + 16 * e);
                    std::memcpy(lq + 4 * st, &word, 4);
                    if (h) hw[st >> 1] |= uint32_t(val >> 4) << (4 * i + 16 * e + 2 * (st & 1));
                  } else if (f.q_bytes == 32) {
                    lq[st * 8 + 2 * i + e] = uint8_t(val);
                  } else {
                    std::memcpy(lq + 2 * (st * 8 + 2 * i + e), &val, 2);
                  }
                }
            if (h) std::memcpy(h + size_t((kb * 32 + lane) * 8), hw, 8);
          }
      }
    };
    const int n_threads = int(std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(nt, 16)));
    std::vector<std::thread> pool;
    for (int i = 1; i < n_threads; ++i) pool.emplace_back(pack, i, n_threads);
    pack(0, n_threads);
    for (auto& th2 : pool) th2.join();
    to_device(d + size_t(t0) * tq, qb.data(), qb.size());
    if (s.h) to_device(const_cast<uint8_t*>(m.h) + size_t(t0) * th, hb.data(), hb.size());
    if (tm) to_device(const_cast<uint8_t*>(m.s) + size_t(t0) * tm * 4, mb.data(), mb.size() * 4);
  }
  f16_exponent(t, src, n_in, n_out, m);
  return m;
}

}  // namespace tf::cuda
