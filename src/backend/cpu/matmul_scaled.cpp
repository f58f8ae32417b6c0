#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/dot_scaled.h"
#include "backend/cpu/ops.h"
#include "backend/ctl.h"

namespace tf::cpu {

std::string scaled_matmul_refusal(const quant::ScaledWeight& w) {
  if (auto why = quant::scaled_refusal(w); !why.empty()) return why;
  if (w.n_in % 32 != 0)
    return fmt::format("tensor '{}' ({}) has rows of {} elements; the CPU kernels need a multiple of 32", w.name,
                       quant::scaled_kind_name(w.kind), w.n_in);
  return {};
}

namespace {

ScaledRow row_of(const quant::ScaledWeight& w, int64_t o) { return {w.kind, w.row(o), w.scale_row(o), w.block}; }

}  // namespace

void matmul_scaled(const quant::ScaledWeight& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool) {
  // Each task owns a range of output columns; activation rows go through in tiles of up to kMaxTileRows.
  pool.parallel_for(size_t(w.n_out), 8, [&](size_t o0, size_t o1) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxTileRows) {
      const int nr = int(std::min<int64_t>(kMaxTileRows, n_rows - r0));
      for (size_t o = o0; o < o1; ++o)
        dot_tile_scaled(row_of(w, int64_t(o)), w.n_in, x + r0 * w.n_in, w.n_in, nr, y + r0 * w.n_out + int64_t(o),
                        w.n_out);
    }
  });
}

void matmul_experts(const std::vector<quant::ScaledWeight>& experts, const float* x, const ExpertPair* pairs,
                    int64_t n_pairs, float* y, ThreadPool& pool) {
  if (n_pairs == 0) return;
  const int64_t n_in = experts[0].n_in, n_out = experts[0].n_out;
  // Pairs grouped by expert (stable, so the grouping is a pure function of the pairs), rows gathered per group.
  std::vector<int64_t> order(static_cast<size_t>(n_pairs));
  for (int64_t p = 0; p < n_pairs; ++p) order[size_t(p)] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return pairs[a].expert < pairs[b].expert; });
  std::vector<float> xg(static_cast<size_t>(n_pairs * n_in)), yg(static_cast<size_t>(n_pairs * n_out));
  for (int64_t i = 0; i < n_pairs; ++i)
    std::copy_n(x + int64_t(pairs[order[size_t(i)]].row) * n_in, n_in, xg.data() + i * n_in);
  std::vector<std::pair<int64_t, int64_t>> groups;  // [begin, end) in `order`
  for (int64_t i = 0; i < n_pairs;) {
    int64_t j = i;
    while (j < n_pairs && pairs[order[size_t(j)]].expert == pairs[order[size_t(i)]].expert) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  // Tasks over (group, output column range); each pair's dot is the per-row arithmetic of dot_tile_scaled.
  const size_t kCols = 64, col_tasks = (size_t(n_out) + kCols - 1) / kCols;
  pool.parallel_for(groups.size() * col_tasks, 1, [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      const auto [g0, g1] = groups[t / col_tasks];
      int e = pairs[order[size_t(g0)]].expert;
      if (TF_CTL_ON(64) && e + 1 < int(experts.size())) e += 1;  // planted: the neighbouring expert's weights
      const quant::ScaledWeight& w = experts[size_t(e)];
      const int64_t o0 = int64_t((t % col_tasks) * kCols), o1 = std::min<int64_t>(n_out, o0 + int64_t(kCols));
      for (int64_t r0 = g0; r0 < g1; r0 += kMaxTileRows) {
        const int nr = int(std::min<int64_t>(kMaxTileRows, g1 - r0));
        for (int64_t o = o0; o < o1; ++o)
          dot_tile_scaled(row_of(w, o), n_in, xg.data() + r0 * n_in, n_in, nr, yg.data() + r0 * n_out + o, n_out);
      }
    }
  });
  for (int64_t i = 0; i < n_pairs; ++i)
    std::copy_n(yg.data() + i * n_out, n_out, y + order[size_t(i)] * n_out);
}

}  // namespace tf::cpu
