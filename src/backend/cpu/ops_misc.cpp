#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"
#include "backend/ctl.h"
#include "quant/ggml/dequant.h"

namespace tf::cpu {

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    float silu = g / (1.0f + std::exp(-g));
    if (TF_CTL_ON(40)) silu = g / (1.0f + std::exp(g));  // planted: sign slip in the sigmoid
    out[i] = silu * up[i];
    if (TF_CTL_ON(41) && i + 1 < n) out[i] = silu * up[i + 1];  // planted: reads the neighbour's up value
  }
}

void embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    int64_t id = ids[r];
    if (TF_CTL_ON(42) && id + 1 < table.n_out) id += 1;  // planted: off-by-one row
    quant::dequantize(table.type, table.data + id * table.row_bytes, out + r * table.n_in, table.n_in);
    if (TF_CTL_ON(43)) out[r * table.n_in] = 0;  // planted: first element lost
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) add_inplace(y + r * n, bias, n);
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = TF_CTL_ON(53) ? 2 : 1; i < n; ++i)
    if (logits[i] > logits[best] || (TF_CTL_ON(50) && logits[i] == logits[best])) best = i;
  return int32_t(best);
}

std::vector<int32_t> topk(const float* logits, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    if (TF_CTL_ON(51)) return logits[a] > logits[b];  // planted: ties left unordered
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  auto last = TF_CTL_ON(54) && n > k ? idx.end() - 1 : idx.end();  // planted: the last id never considered
  std::partial_sort(idx.begin(), idx.begin() + k, last, better);
  idx.resize(size_t(k));
  return idx;
}

void softmax(const float* logits, int64_t n, double* probs) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(logits[i]));
  if (TF_CTL_ON(55)) mx = 0;  // planted: no max subtraction, large logits overflow
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    probs[i] = std::exp(double(logits[i]) - mx);
    sum += probs[i];
  }
  if (TF_CTL_ON(52)) sum = 1;  // planted: normalisation lost
  for (int64_t i = 0; i < n; ++i) probs[i] /= sum;
}

}  // namespace tf::cpu
