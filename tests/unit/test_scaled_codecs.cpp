// The fp8_block and mxfp4 codecs: every E4M3, E8M0 and E2M1 code against ml_dtypes (tests/fixtures/
// scaled_codes.txt, tools/fixtures/gen_scaled_codes.py), hand-computed values, partial edge blocks, nibble order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/scalar.h"
#include "quant/scaled/qat.h"
#include "quant/scaled/scaled.h"

using namespace tf;
using quant::ScaledKind;
using quant::ScaledWeight;

TEST(ScaledCodecs, EveryCodeMatchesMlDtypes) {
  std::ifstream in(std::string(TF_SOURCE_DIR) + "/tests/fixtures/scaled_codes.txt");
  ASSERT_TRUE(in);
  std::string line;
  int n[3] = {0, 0, 0};
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string kind, hex;
    int code;
    ss >> kind >> code >> hex;
    const uint32_t want = uint32_t(std::stoul(hex, nullptr, 16));
    const float got = kind == "e4m3" ? e4m3_to_f32(uint8_t(code)) : kind == "e8m0" ? e8m0_to_f32(uint8_t(code))
                                                                                    : e2m1_to_f32(uint8_t(code));
    n[kind == "e4m3" ? 0 : kind == "e8m0" ? 1 : 2] += 1;
    if (std::isnan(bits_to_f32(want)))  // NaN: any payload, same sign
      EXPECT_TRUE(std::isnan(got) && std::signbit(got) == std::signbit(bits_to_f32(want))) << line;
    else
      EXPECT_EQ(f32_to_bits(got), want) << line;
  }
  EXPECT_EQ(n[0], 256);
  EXPECT_EQ(n[1], 256);
  EXPECT_EQ(n[2], 16);
}

TEST(ScaledCodecs, HandComputedValues) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);            // e = 7, m = 0
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);          // the largest finite value
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1.0p-9f);       // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1.0p-9f);   // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1.0p-6f);       // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x3F), 1.875f);          // 1 + 7/8
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)) && e4m3_to_f32(0x80) == 0.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)) && std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1.0p-127f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1.0p127f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  const float lut[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(f32_to_bits(e2m1_to_f32(uint8_t(c))), f32_to_bits(lut[c])) << c;
}

TEST(ScaledCodecs, Fp8BlocksWithPartialEdges) {
  // 35 x 40 with B = 32: scales [2, 2]; rows 32..34 and columns 32..39 are the partial edge blocks.
  const int64_t n_out = 35, n_in = 40;
  std::vector<uint8_t> q(size_t(n_out * n_in), 0x38);  // 1.0 everywhere
  q[size_t(33 * n_in + 39)] = 0x40;                     // 2.0 in the bottom-right block
  q[size_t(0 * n_in + 31)] = 0x01;                      // 2^-9 in the top-left block
  q[size_t(31 * n_in + 32)] = 0xC4;                     // -3.0 in the top-right block
  const std::vector<uint8_t> s = {127 + 3, 127 - 2, 127 + 1, 255};  // [0,0] 8, [0,1] 1/4, [1,0] 2, [1,1] NaN
  ScaledWeight w{"w", ScaledKind::Fp8E8M0, n_in, n_out, 32, q.data(), s.data()};
  EXPECT_EQ(w.scale_rows(), 2);
  EXPECT_EQ(w.scale_cols(), 2);
  const auto d = quant::scaled_decode_f64(w);
  EXPECT_EQ(d[size_t(0 * n_in + 31)], std::ldexp(1.0, -9) * 8);
  EXPECT_EQ(d[size_t(31 * n_in + 32)], -3.0 * 0.25);
  EXPECT_EQ(d[size_t(34 * n_in + 0)], 2.0);
  EXPECT_TRUE(std::isnan(d[size_t(33 * n_in + 39)]));
  float row[40];
  quant::scaled_decode(w, 31, 0, 40, row);
  EXPECT_EQ(row[0], 8.0f);
  EXPECT_EQ(row[32], -0.75f);
  EXPECT_EQ(row[39], 0.25f);
  // F32 scales under the same layout: the product rounds once to f32.
  const float fs[4] = {1.0f / 3.0f, 1.0f, 1.0f, 1.0f};
  ScaledWeight wf{"wf", ScaledKind::Fp8F32, n_in, n_out, 32, q.data(), reinterpret_cast<const uint8_t*>(fs)};
  quant::scaled_decode(wf, 0, 0, 1, row);
  EXPECT_EQ(row[0], 1.0f / 3.0f);
  EXPECT_EQ(quant::scaled_decode_f64(wf)[0], double(1.0f / 3.0f));
}

TEST(ScaledCodecs, Mxfp4LowNibbleFirst) {
  std::vector<uint8_t> q(2 * 32, 0);  // 2 rows of 64 elements
  q[0] = 0x21;                        // row 0: element 0 = 0.5, element 1 = 1.0
  q[32 + 31] = 0xF7;                  // row 1: element 62 = 6, element 63 = -6
  const std::vector<uint8_t> s = {127, 127 + 1, 127 - 1, 255};  // row 0: 1, 2; row 1: 1/2, NaN
  ScaledWeight w{"e", ScaledKind::Mxfp4, 64, 2, 32, q.data(), s.data()};
  float r0[64], r1[64];
  quant::scaled_decode(w, 0, 0, 64, r0);
  quant::scaled_decode(w, 1, 0, 64, r1);
  EXPECT_EQ(r0[0], 0.5f);
  EXPECT_EQ(r0[1], 1.0f);
  EXPECT_EQ(r0[2], 0.0f);
  EXPECT_EQ(r1[0], 0.0f);
  EXPECT_TRUE(std::isnan(r1[62]) && std::isnan(r1[63]));
  const std::vector<uint8_t> s2 = {127, 127, 126, 127 + 2};
  ScaledWeight w2{"e", ScaledKind::Mxfp4, 64, 2, 32, q.data(), s2.data()};
  quant::scaled_decode(w2, 1, 62, 2, r1);
  EXPECT_EQ(r1[0], 24.0f);
  EXPECT_EQ(r1[1], -24.0f);
}

TEST(ScaledCodecs, RefusalsNameTheTensor) {
  ScaledWeight w{"layers.0.ffn.experts.3.w1", ScaledKind::Mxfp4, 48, 4, 32, nullptr, nullptr};
  EXPECT_NE(quant::scaled_refusal(w).find("'layers.0.ffn.experts.3.w1': mxfp4 rows of 48"), std::string::npos);
  w.n_in = 64, w.block = 16;
  EXPECT_NE(quant::scaled_refusal(w).find("mxfp4 scales cover 32 elements, not 16"), std::string::npos);
  ScaledWeight f{"layers.0.attn.wq_a", ScaledKind::Fp8E8M0, 4096, 1024, 48, nullptr, nullptr};
  EXPECT_NE(quant::scaled_refusal(f).find("'layers.0.attn.wq_a': fp8 block size 48"), std::string::npos);
  f.block = 128;
  EXPECT_EQ(quant::scaled_refusal(f), "");
}

TEST(Qat, GridRoundingTiesToEven) {
  using quant::round_e2m1;
  using quant::round_e4m3;
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);    // halfway between 1 and 1.125: the even mantissa
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);   // halfway between 1.125 and 1.25
  EXPECT_EQ(round_e4m3(-447.0f), -448.0f);
  EXPECT_EQ(round_e4m3(3.5f * 0x1.0p-9f), 4 * 0x1.0p-9f);  // subnormal spacing 2^-9
  EXPECT_EQ(round_e4m3(0.001f), 0x1.0p-9f);
  EXPECT_EQ(round_e4m3(0x1.0p-11f), 0.0f);  // a quarter step rounds to zero
  const float e2m1[][2] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f}, {2.5f, 2.0f},
                           {3.5f, 4.0f},  {5.0f, 4.0f},  {5.5f, 6.0f},  {-0.3f, -0.5f}};
  for (auto [in, want] : e2m1) EXPECT_EQ(round_e2m1(in), want) << in;
}

TEST(Qat, BlocksScaleByAPowerOfTwoFromTheirMaximum) {
  float a[4] = {896.0f, 1.0f, 0.5f, -3.0f};  // amax 896: s = 2, every value already on the scaled grid
  quant::qat_fp8_blocks(a, 4, 4);
  EXPECT_EQ(a[0], 896.0f);
  EXPECT_EQ(a[1], 1.0f);
  EXPECT_EQ(a[3], -3.0f);
  float b[3] = {100.0f, 0.3f, 0.0f};  // s = 2^ceil(log2(100/448)) = 1/4: 0.3 / s = 1.2 -> 1.25 -> 0.3125
  quant::qat_fp8_blocks(b, 3, 3);
  EXPECT_EQ(b[0], 96.0f);  // 400 is halfway between 384 and 416 (spacing 32): the even 384
  EXPECT_EQ(b[1], 0.3125f);
  EXPECT_EQ(b[2], 0.0f);
  float c[6] = {6.0f, 3.0f, 1.0f, 0.7f, 12.0f, 0.0f};  // two blocks of 3 for FP4: s = 1, then s = 2
  quant::qat_fp4_blocks(c, 6, 3);
  EXPECT_EQ(c[3], 1.0f);  // 0.7 / 2 = 0.35 rounds to 0.5
  EXPECT_EQ(c[4], 12.0f);
  EXPECT_EQ(c[2], 1.0f);
  float z[2] = {0.0f, 0.0f};
  quant::qat_fp8_blocks(z, 2, 2);
  EXPECT_EQ(z[0], 0.0f);
}
