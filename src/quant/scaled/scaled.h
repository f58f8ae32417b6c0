#pragma once
#include <cstdint>
#include <string>
#include <vector>

// Weights with scales in a separate tensor, as DeepSeek publishes them (fp8_block: B x B blocks; mxfp4: per 32).
namespace tf::quant {

enum class ScaledKind { Fp8E8M0, Fp8F32, Mxfp4 };

const char* scaled_kind_name(ScaledKind k);

// One weight as stored: the element bytes and the scale bytes, both row-major, used in place.
struct ScaledWeight {
  std::string name;
  ScaledKind kind = ScaledKind::Fp8E8M0;
  int64_t n_in = 0, n_out = 0;
  int64_t block = 128;  // fp8: B; mxfp4: 32
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
  int64_t row0 = 0;  // first row of a view into a taller weight (its scale grid rows count from the weight's row 0)
  int64_t row_bytes() const { return kind == ScaledKind::Mxfp4 ? n_in / 2 : n_in; }
  int64_t scale_cols() const { return (n_in + block - 1) / block; }
  int64_t scale_rows() const { return kind == ScaledKind::Mxfp4 ? n_out : (n_out + block - 1) / block; }
  int64_t scale_bytes() const { return (kind == ScaledKind::Fp8F32 ? 4 : 1) * scale_rows() * scale_cols(); }
  const uint8_t* row(int64_t o) const { return data + (row0 + o) * row_bytes(); }
  ScaledWeight rows(int64_t first, int64_t n) const;  // rows [first, first + n) as a weight of their own
  const uint8_t* scale_row(int64_t o) const;
};

// Why this layout cannot be decoded (an odd mxfp4 row, a block size other than 32 for mxfp4, B < 1), or empty.
std::string scaled_refusal(const ScaledWeight& w);

// The scale of elements [j, j + 32) of a row (32 | j; one block of the scale grid covers them whenever 32 | B).
float scaled_group_scale(ScaledKind kind, const uint8_t* scale_row, int64_t block, int64_t j);

// Exact decode of elements [j0, j0 + n) of row o into out: e4m3 or e2m1 times a power-of-two scale is exact in f32
// (Fp8F32 rounds the product once to f32, as the kernels do).
void scaled_decode(const ScaledWeight& w, int64_t o, int64_t j0, int64_t n, float* out);

// The whole weight in float64, exactly (the contract reference; F32 scales multiply in double).
std::vector<double> scaled_decode_f64(const ScaledWeight& w);

}  // namespace tf::quant
