#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/ctl.h"

namespace tf::cpu {
namespace {

// Eight fixed partial sums: vectorisable, and the same order for every row and batch.
inline float dot_fixed(const float* a, const float* b, int64_t n) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) p[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) p[i & 7] += a[i] * b[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

}  // namespace

void attention(const float* q, int64_t n_rows, const int32_t* pos, const KvView& kv, int64_t n_head, int64_t n_kv_head,
               int64_t head_dim, float scale, float* out, ThreadPool& pool) {
  const int64_t group = n_head / n_kv_head;
  const int64_t q_stride = n_head * head_dim;
  pool.parallel_for(size_t(n_rows * n_head), 1, [&](size_t t0, size_t t1) {
    std::vector<float> scores;
    for (size_t t = t0; t < t1; ++t) {
      int64_t r = int64_t(t) / n_head, h = int64_t(t) % n_head;
      int64_t kvh = h / group;
      if (TF_CTL_ON(31) && n_kv_head > 1) kvh = (kvh + 1) % n_kv_head;  // planted: wrong KV head
      int64_t n_keys = int64_t(pos[r]) + 1;
      if (TF_CTL_ON(30)) n_keys += 1;  // planted: reads one key past the causal limit
      const float* qr = q + r * q_stride + h * head_dim;
      scores.resize(size_t(n_keys));
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n_keys; ++j) {
        scores[j] = dot_fixed(qr, kv.k(j) + kvh * head_dim, head_dim) * scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n_keys; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      float inv = float(1.0 / sum);
      float* o = out + r * q_stride + h * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = 0;
      for (int64_t j = 0; j < n_keys; ++j) {
        float p = scores[j] * inv;
        const float* vj = kv.v(j) + kvh * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) o[d] += p * vj[d];
      }
    }
  });
}

}  // namespace tf::cpu
