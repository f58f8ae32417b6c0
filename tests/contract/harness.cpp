#include "harness.h"

#include <algorithm>
#include <cstring>

#include "base/scalar.h"
#include "quant/ggml/dequant.h"

namespace tf::contract {

std::map<std::string, Check>& checks() {
  static std::map<std::string, Check> c;
  return c;
}

bool add_check(const std::string& name, Check c) {
  checks()[name] = std::move(c);
  return true;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

namespace {
void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xFF);
  p[1] = uint8_t(h >> 8);
}
}  // namespace

std::vector<uint8_t> random_weight(GgmlType type, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  auto info = *ggml_type_info(uint32_t(type));
  const int64_t nb = n_in / info.block_elems * n_out;
  std::vector<uint8_t> w(size_t(nb * info.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(0.002f, 0.05f);
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    auto f = random_floats(size_t(n_in * n_out), rng, 0.1f);
    for (size_t i = 0; i < f.size(); ++i) {
      if (type == GgmlType::F32) std::memcpy(&w[4 * i], &f[i], 4);
      else if (type == GgmlType::F16) put_f16(&w[2 * i], f[i]);
      else {
        uint16_t b = f32_to_bf16(f[i]);
        std::memcpy(&w[2 * i], &b, 2);
      }
    }
    return w;
  }
  for (auto& b : w) b = uint8_t(byte(rng));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = w.data() + b * info.block_bytes;
    float d = sc(rng) * (byte(rng) & 1 ? 1.0f : -1.0f), m = sc(rng);
    switch (type) {
      case GgmlType::Q4_0: case GgmlType::Q8_0: case GgmlType::Q5_0: put_f16(blk, d); break;
      case GgmlType::Q4_1: case GgmlType::Q5_1: put_f16(blk, d), put_f16(blk + 2, m); break;
      case GgmlType::Q2_K: put_f16(blk + 80, d * 0.1f), put_f16(blk + 82, m * 0.1f); break;
      case GgmlType::Q3_K: put_f16(blk + 108, d * 0.1f); break;
      case GgmlType::Q4_K: case GgmlType::Q5_K: put_f16(blk, d * 0.1f), put_f16(blk + 2, m * 0.1f); break;
      case GgmlType::Q6_K: put_f16(blk + 208, d * 0.1f); break;
      default: break;
    }
  }
  return w;
}

std::vector<double> decode_weights(GgmlType type, const std::vector<uint8_t>& w, int64_t n_in, int64_t n_out) {
  const int64_t row_bytes = int64_t(w.size()) / n_out;
  std::vector<double> out(size_t(n_in * n_out));
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    quant::dequantize(type, w.data() + o * row_bytes, row.data(), n_in);
    for (int64_t i = 0; i < n_in; ++i) out[size_t(o * n_in + i)] = row[size_t(i)];
  }
  return out;
}

RefDot ref_dot(const double* w, const float* x, int64_t n) {
  RefDot r;
  for (int64_t i = 0; i < n; ++i) {
    double t = w[i] * double(x[i]);
    r.y += t;
    r.s += std::fabs(t);
  }
  return r;
}

AttnRef attention_reference(const float* q, int64_t hd, int64_t n_keys, float scale,
                            const std::function<const float*(int64_t)>& k, const std::function<const float*(int64_t)>& v) {
  std::vector<double> sc(static_cast<size_t>(n_keys));
  double mx = -INFINITY, max_s = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < hd; ++i) {
      const double t = double(q[i]) * k(j)[i];
      d += t;
      s += std::fabs(t);
    }
    sc[size_t(j)] = d * scale;
    max_s = std::max(max_s, s * scale);
    mx = std::max(mx, sc[size_t(j)]);
  }
  double sum = 0;
  for (auto& e : sc) sum += e = std::exp(e - mx);
  AttnRef r{std::vector<double>(static_cast<size_t>(hd)), std::vector<double>(static_cast<size_t>(hd)),
            std::vector<double>(static_cast<size_t>(hd)), max_s};
  for (int64_t i = 0; i < hd; ++i) {
    double mag = 0;
    for (int64_t j = 0; j < n_keys; ++j) {
      r.out[size_t(i)] += sc[size_t(j)] / sum * v(j)[i];
      mag += sc[size_t(j)] / sum * std::fabs(v(j)[i]);
    }
    r.bound[size_t(i)] = 4 * kU * mag * (double(hd) * max_s + double(n_keys) + 8);
    r.mag[size_t(i)] = mag;
  }
  return r;
}

int64_t first_bit_difference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return int64_t(i);
  return -1;
}

std::vector<float> with_canary(size_t n, size_t pad) {
  std::vector<float> v(n + pad, 0.0f);
  for (size_t i = n; i < n + pad; ++i) v[i] = bits_to_f32(kCanary);
  return v;
}

bool canary_intact(const std::vector<float>& buf, size_t n) {
  for (size_t i = n; i < buf.size(); ++i)
    if (f32_to_bits(buf[i]) != kCanary) return false;
  return true;
}

}  // namespace tf::contract
