#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/ops.h"
#include "quant/ggml/dequant.h"

namespace tf::cpu {

std::string matmul_refusal(const WeightView& w) {
  auto info = ggml_type_info(uint32_t(w.type));
  if (!info || !quant::has_reference_decode(w.type))
    return fmt::format("tensor '{}' has format {} which the CPU backend cannot decode (supported: F32, F16, BF16, "
                       "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                       w.name, ggml_type_name(w.type));
  int64_t block = std::max<int64_t>(32, info->block_elems);
  if (w.n_in % block != 0)
    return fmt::format("tensor '{}' ({}) has rows of {} elements; the CPU matmul needs a multiple of {}", w.name,
                       info->name, w.n_in, block);
  return {};
}

void matmul(const WeightView& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool) {
  // Each task owns a range of output columns; inside it every activation tile sees the same per-row arithmetic.
  if (n_rows > kMaxTileRows) {
    // Batches: decode a group of weight rows once (kept in L2), then sweep the activation tiles over them.
    constexpr size_t kGroup = 16;
    pool.parallel_for((size_t(w.n_out) + kGroup - 1) / kGroup, 1, [&](size_t g0, size_t g1) {
      thread_local std::vector<float> dec;
      dec.resize(kGroup * size_t(w.n_in));
      for (size_t g = g0; g < g1; ++g) {
        const int64_t o0 = int64_t(g * kGroup), o1 = std::min<int64_t>(w.n_out, o0 + int64_t(kGroup));
        for (int64_t o = o0; o < o1; ++o) decode_row(w.type, w.data + o * w.row_bytes, w.n_in, dec.data() + (o - o0) * w.n_in);
        for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxTileRows) {
          int nr = int(std::min<int64_t>(kMaxTileRows, n_rows - r0));
          for (int64_t o = o0; o < o1; ++o)
            dot_tile_decoded(w.type, dec.data() + (o - o0) * w.n_in, w.n_in, x + r0 * w.n_in, w.n_in, nr,
                             y + r0 * w.n_out + o, w.n_out);
        }
      }
    });
    return;
  }
  pool.parallel_for(size_t(w.n_out), 8, [&](size_t o0, size_t o1) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxTileRows) {
      int nr = int(std::min<int64_t>(kMaxTileRows, n_rows - r0));
      for (size_t o = o0; o < o1; ++o)
        dot_tile(w.type, w.data + int64_t(o) * w.row_bytes, w.n_in, x + r0 * w.n_in, w.n_in, nr,
                 y + r0 * w.n_out + int64_t(o), w.n_out);
    }
  });
}

}  // namespace tf::cpu
