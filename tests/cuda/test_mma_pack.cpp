// The tensor-core weight layout, read back on the host (no GPU needed): every weight rebuilt from its lane's
// fragment integer and its row's scale words, as the m16n8k16 A-fragment map places it, equals the CPU codec's
// exact decode bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/mma_pack.h"
#include "base/scalar.h"
#include "quant/ggml/dequant.h"

namespace tf {
namespace {

void host_copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

uint32_t word(const uint8_t* p, int64_t i) {
  uint32_t w;
  std::memcpy(&w, p + 4 * i, 4);
  return w;
}
float f16(uint32_t bits) { return f16_to_f32(uint16_t(bits & 0xFFFF)); }

// Weight (o, k) from the packed layout: the A fragment of m16n8k16 holds (row g, k 2t..2t+1) in pair 0, (g+8, ..)
// in pair 1, (g, 2t+8..) in pair 2 and (g+8, 2t+8..) in pair 3, lane = 4g + t.
float unpack(const cuda::DeviceMatrix& m, GgmlType t, int64_t o, int64_t k) {
  const cuda::MmaFormat f = cuda::mma_format(t);
  const int64_t tile = o / 16, r = o % 16, k64 = k / 64, st = (k % 64) / 16, kk = k % 16;
  const int g = int(r % 8), hr = int(r / 8), tt = int((kk % 8) / 2), h = int(kk / 8), e = int(kk % 2);
  const int i = 2 * h + hr, lane = 4 * g + tt;
  const int64_t at = (tile * m.units + k64) * 32 + lane;
  const uint8_t* lq = m.q + at * f.q_bytes;
  int32_t q = 0;
  if (f.q_bytes == 16) {
    q = int32_t((word(lq, st) >> (4 * i + 16 * e)) & 15);
    if (t == GgmlType::Q6_K) q |= int32_t(((word(m.h + at * 8, st / 2) >> (4 * i + 16 * e + 2 * (st % 2))) & 3) << 4);
  } else if (f.q_bytes == 32) {
    q = int8_t(lq[st * 8 + 2 * i + e]);
  } else {
    uint16_t b;
    std::memcpy(&b, lq + 2 * (st * 8 + 2 * i + e), 2);
    return bf16_to_f32(b);
  }
  const int64_t sl = k / 256, j32 = (k % 256) / 32;
  const uint8_t* meta = m.s + ((tile * m.slices + sl) * 16 + r) * f.meta_words * 4;
  switch (t) {
    case GgmlType::Q4_0:
      return f16(word(meta, j32 / 2) >> (16 * (j32 % 2))) * float(q - 8);
    case GgmlType::Q8_0:
      return f16(word(meta, j32 / 2) >> (16 * (j32 % 2))) * float(q);
    case GgmlType::Q4_1:
      return f16(word(meta, j32)) * float(q) + f16(word(meta, j32) >> 16);
    case GgmlType::Q4_K: {
      const float d = f16(word(meta, 0)), dmin = f16(word(meta, 0) >> 16);
      const float sc = float(meta[4 + j32]), mn = float(meta[12 + j32]);
      return (d * sc) * float(q) - dmin * mn;
    }
    case GgmlType::Q6_K: {
      const int64_t j16 = (k % 256) / 16;
      return (f16(word(meta, 4)) * float(int8_t(meta[j16]))) * float(q - 32);
    }
    default:
      return NAN;
  }
}

// Valid random blocks: random bytes with small finite f16 scales where each format keeps them.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  const cuda::MmaFormat f = cuda::mma_format(t);
  std::vector<uint8_t> w(size_t(n_in / f.block * f.block_bytes * n_out));
  for (auto& b : w) b = uint8_t(rng());
  std::uniform_real_distribution<float> sc(0.002f, 0.05f);
  auto put = [&](size_t at, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(&w[at], &h, 2);
  };
  for (size_t b = 0; b < w.size() / size_t(f.block_bytes); ++b) {
    const size_t at = b * size_t(f.block_bytes);
    switch (t) {
      case GgmlType::Q4_0:
      case GgmlType::Q8_0:
        put(at, sc(rng));
        break;
      case GgmlType::Q4_1:
      case GgmlType::Q4_K:
        put(at, sc(rng)), put(at + 2, sc(rng));
        break;
      case GgmlType::Q6_K:
        put(at + 208, sc(rng));
        break;
      default:  // BF16: finite values of either sign around 2^-7..2^-4
        for (size_t i = at; i < at + size_t(f.block_bytes); i += 2) w[i + 1] = uint8_t((w[i + 1] & 0x80) | 0x3C);
        break;
    }
  }
  return w;
}

class MmaPack : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MmaPack, EveryWeightReadsBackAsTheCodecDecodesIt) {
  const GgmlType t = GetParam();
  std::mt19937 rng(7 + uint32_t(t));
  const bool kq = t == GgmlType::Q4_K || t == GgmlType::Q6_K;
  for (auto [n_in, n_out] :
       {std::pair<int64_t, int64_t>{kq ? 768 : 576, 37}, {kq ? 256 : 64, 16}, {kq ? 512 : 320, 5}}) {
    ASSERT_TRUE(cuda::mma_layout(t, n_in));
    const auto w = random_blocks(t, n_in, n_out, rng);
    std::vector<float> ref(size_t(n_in * n_out));
    ASSERT_TRUE(quant::dequantize(t, w.data(), ref.data(), n_in * n_out));
    std::vector<uint8_t> dev(cuda::mma_matrix_bytes(t, n_in, n_out), 0xA5);
    const cuda::DeviceMatrix m = cuda::mma_upload(t, w.data(), n_in, n_out, dev.data(), host_copy);
    ASSERT_TRUE(m.mma);
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t k = 0; k < n_in; ++k) {
        const float got = unpack(m, t, o, k), want = ref[size_t(o * n_in + k)];
        ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "format " << int(t) << " " << n_in << "x" << n_out << " row " << o
                                                  << " col " << k << ": " << got << " vs " << want;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MmaPack,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                                           GgmlType::Q6_K, GgmlType::BF16));

TEST(MmaPack, LayoutIsChosenByFormatAndRowLength) {
  EXPECT_TRUE(cuda::mma_layout(GgmlType::Q4_1, 576));
  EXPECT_FALSE(cuda::mma_layout(GgmlType::Q4_1, 32));  // not whole 64-column steps
  EXPECT_FALSE(cuda::mma_layout(GgmlType::F16, 4096));
  EXPECT_FALSE(cuda::mma_layout(GgmlType::Q5_K, 4096));
}

// Prompt products' fp16 weights: the matrix's power of two puts its largest possible |weight| (read back from the
// packed scale words) into [2^14, 2^15), every decoded weight stays below 2^15 under it, and a non-finite scale or
// another format leaves the matrix to the decode products.
TEST(MmaPack, Fp16WeightExponentFitsEveryWeightAndRefusesNonFiniteScales) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    std::mt19937 rng(11 + uint32_t(t));
    const int64_t n_in = 512, n_out = 40;
    auto w = random_blocks(t, n_in, n_out, rng);
    std::vector<uint8_t> dev(cuda::mma_matrix_bytes(t, n_in, n_out), 0);
    cuda::DeviceMatrix m = cuda::mma_upload(t, w.data(), n_in, n_out, dev.data(), host_copy);
    ASSERT_TRUE(m.f16) << int(t);
    double bound = 0;
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t sl = 0; sl < n_in / 256; ++sl) {
        const uint8_t* meta = m.s + (((o / 16) * m.slices + sl) * 16 + o % 16) * 20;
        if (t == GgmlType::Q4_K) {
          for (int j = 0; j < 8; ++j)
            bound = std::max(bound, std::fabs(double(f16(word(meta, 0)))) * meta[4 + j] * 15 +
                                        std::fabs(double(f16(word(meta, 0) >> 16))) * meta[12 + j]);
        } else {
          for (int j = 0; j < 16; ++j)
            bound = std::max(bound, std::fabs(double(f16(word(meta, 4)))) * std::abs(int(int8_t(meta[j]))) * 32);
        }
      }
    const double scaled = std::ldexp(bound, m.f16_exp);
    EXPECT_GE(scaled, 16384.0) << int(t);
    EXPECT_LT(scaled, 32768.0) << int(t);
    std::vector<float> ref(size_t(n_in * n_out));
    ASSERT_TRUE(quant::dequantize(t, w.data(), ref.data(), n_in * n_out));
    for (float v : ref) ASSERT_LT(std::ldexp(std::fabs(double(v)), m.f16_exp), 32768.0) << int(t);
    for (float bad : {NAN, INFINITY}) {
      auto wb = w;
      const uint16_t h = f32_to_f16(bad);
      std::memcpy(&wb[t == GgmlType::Q4_K ? 144 * 3 : 210 * 3 + 208], &h, 2);  // the fourth block's d
      EXPECT_FALSE(cuda::mma_upload(t, wb.data(), n_in, n_out, dev.data(), host_copy).f16) << int(t) << " " << bad;
    }
  }
  std::mt19937 rng(3);
  const auto w = random_blocks(GgmlType::Q4_1, 64, 16, rng);
  std::vector<uint8_t> dev(cuda::mma_matrix_bytes(GgmlType::Q4_1, 64, 16), 0);
  EXPECT_FALSE(cuda::mma_upload(GgmlType::Q4_1, w.data(), 64, 16, dev.data(), host_copy).f16);
}

}  // namespace
}  // namespace tf
