// DeepSeek-V4 attention on the CPU: window with sinks plus compressed entries (HCA all, CSA the indexer's top-k).
#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/dsv4_model.h"
#include "model/deepseek_v4/dsv4_ops.h"
#include "quant/scaled/qat.h"

namespace tf::dsv4 {

// Entry j = (pos + 1) / R - 1 goes to the slot of its window's last token, so it depends only on the prefix.
void Model::compress_rows(const Layer& L, const std::vector<BatchRow>& rows, bool indexer) {
  const Compressor& C = indexer ? L.icomp : L.comp;
  const int64_t R = indexer ? 4 : L.ratio, d = indexer ? c_.index_dim : c_.head_dim;
  const bool overlap = R == 4;
  const int64_t cw = C.wkv.n_out, oa = indexer ? L.off_ia : L.off_a, og = indexer ? L.off_ig : L.off_g;
  const int64_t oe = indexer ? L.off_ient : L.off_ent;
  pool_.parallel_for(rows.size(), 1, [&](size_t r0, size_t r1) {
    std::vector<double> ent(static_cast<size_t>(d)), wsum(static_cast<size_t>(d)), mx(static_cast<size_t>(d));
    std::vector<float> e(static_cast<size_t>(d));
    for (size_t r = r0; r < r1; ++r) {
      const int64_t p = rows[r].pos;
      if ((p + 1) % R) continue;
      const int64_t j = (p + 1) / R - 1;
      // Slots: (CSA) the previous window's first halves, then this window's second halves (or whole rows).
      struct Src {
        const float *a, *g, *ape;
      };
      std::vector<Src> src;
      if (overlap && j > 0)
        for (int64_t k = 0; k < R; ++k) {
          const float* s = slot(rows[r], (j - 1) * R + k);
          src.push_back({s + oa, s + og, C.ape.data() + k * cw});
        }
      for (int64_t k = 0; k < R; ++k) {
        const float* s = slot(rows[r], j * R + k);
        const int64_t half = overlap ? d : 0;
        src.push_back({s + oa + half, s + og + half, C.ape.data() + k * cw + half});
      }
      std::fill(mx.begin(), mx.end(), -INFINITY);
      for (const Src& s : src)
        for (int64_t f = 0; f < d; ++f) mx[size_t(f)] = std::max(mx[size_t(f)], double(s.g[f]) + double(s.ape[f]));
      std::fill(ent.begin(), ent.end(), 0.0);
      std::fill(wsum.begin(), wsum.end(), 0.0);
      for (const Src& s : src)
        for (int64_t f = 0; f < d; ++f) {
          const double w = std::exp(double(s.g[f]) + double(s.ape[f]) - mx[size_t(f)]);
          wsum[size_t(f)] += w;
          ent[size_t(f)] += w * double(s.a[f]);
        }
      double ss = 0;
      for (int64_t f = 0; f < d; ++f) {
        ent[size_t(f)] /= wsum[size_t(f)];
        ss += ent[size_t(f)] * ent[size_t(f)];
      }
      const double inv = 1.0 / std::sqrt(ss / double(d) + c_.rms_eps);
      for (int64_t f = 0; f < d; ++f) e[size_t(f)] = float(ent[size_t(f)] * inv * double(C.norm[size_t(f)]));
      rope(e.data(), d, f_comp_, j * R);
      if (qat_ && indexer) {  // QAT: index keys rotated, then FP4 in blocks of 32
        hadamard(e.data(), d);
        quant::qat_fp4_blocks(e.data(), d, 32);
      } else if (qat_) {
        qat_kv(e.data(), 1);
      }
      std::copy(e.begin(), e.end(), slot(rows[r], p) + oe);
    }
  });
}

void Model::q_and_kv(const Layer& L, const float* x, int64_t n, const int64_t* pos, std::vector<float>& qr,
                     std::vector<float>& q, std::vector<float>& kv) {
  const int64_t H = c_.n_head, d = c_.head_dim, qrk = c_.q_lora;
  const std::vector<double>& f = L.ratio ? f_comp_ : f_main_;
  std::vector<float> qa(size_t(n * qrk));
  qr.resize(size_t(n * qrk)), q.resize(size_t(n * H * d));
  mm(L.wq_a, x, n, qa.data());
  cpu::rmsnorm(qa.data(), L.q_norm.data(), n, qrk, float(c_.rms_eps), qr.data());
  mm(L.wq_b, qr.data(), n, q.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h) {
      rms_unweighted(q.data() + (r * H + h) * d, d, c_.rms_eps);
      rope(q.data() + (r * H + h) * d, d, f, pos[r]);
    }
  kv_only(L, x, n, pos, kv);
}

void Model::kv_only(const Layer& L, const float* x, int64_t n, const int64_t* pos, std::vector<float>& kv) {
  const int64_t d = c_.head_dim;
  std::vector<float> kvr(size_t(n * d));
  kv.resize(size_t(n * d));
  mm(L.wkv, x, n, kvr.data());
  cpu::rmsnorm(kvr.data(), L.kv_norm.data(), n, d, float(c_.rms_eps), kv.data());
  for (int64_t r = 0; r < n; ++r) rope(kv.data() + r * d, d, L.ratio ? f_comp_ : f_main_, pos[r]);
  qat_kv(kv.data(), n);
}

void Model::attend_row(const Layer& L, const float* q, const std::vector<const float*>& keys, int64_t pos,
                       float* o) const {
  const int64_t H = c_.n_head, d = c_.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> lg(keys.size());
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = q + h * d;
    double mx = L.sinks[size_t(h)];
    for (size_t k = 0; k < keys.size(); ++k) {
      double s = 0;
      for (int64_t i = 0; i < d; ++i) s += double(qh[i]) * double(keys[k][i]);
      lg[k] = s * scale;
      mx = std::max(mx, lg[k]);
    }
    double den = std::exp(double(L.sinks[size_t(h)]) - mx);
    for (size_t k = 0; k < keys.size(); ++k) den += (lg[k] = std::exp(lg[k] - mx));
    float* oh = o + h * d;
    for (int64_t i = 0; i < d; ++i) {
      double s = 0;
      for (size_t k = 0; k < keys.size(); ++k) s += lg[k] * double(keys[k][i]);
      oh[i] = float(s / den);
    }
    rope(oh, d, L.ratio ? f_comp_ : f_main_, pos, -1.0);  // values carry RoPE too (K = V): undo it at the query
  }
}

void Model::out_proj(const Layer& L, const float* o, int64_t n, float* out) {
  // Grouped output projection: group g's heads through rows [g ol, (g+1) ol) of wo_a, then wo_b.
  const int64_t H = c_.n_head, d = c_.head_dim, G = c_.o_groups, ol = c_.o_lora, gin = H * d / G;
  std::vector<float> og(size_t(n * gin)), ug(size_t(n * ol)), u(size_t(n * G * ol));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t r = 0; r < n; ++r) std::copy_n(o + r * H * d + g * gin, gin, og.data() + r * gin);
    mm(L.wo_a.rows(g * ol, ol), og.data(), n, ug.data());
    for (int64_t r = 0; r < n; ++r) std::copy_n(ug.data() + r * ol, ol, u.data() + r * G * ol + g * ol);
  }
  mm(L.wo_b, u.data(), n, out);
}

void Model::attention(const Layer& L, const std::vector<BatchRow>& rows, const float* x, float* out) {
  const int64_t n = int64_t(rows.size()), H = c_.n_head, d = c_.head_dim, W = c_.window, R = L.ratio;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) pos[size_t(r)] = rows[size_t(r)].pos;
  std::vector<float> qr, q, kv;
  q_and_kv(L, x, n, pos.data(), qr, q, kv);
  for (int64_t r = 0; r < n; ++r) std::copy_n(kv.data() + r * d, d, slot(rows[size_t(r)], pos[size_t(r)]) + L.off_kv);
  // Compressor projections into every row's slot, then the entries of the windows these rows close.
  std::vector<float> qi, iw;
  for (int ix = 0; ix < (R == 4 ? 2 : R ? 1 : 0); ++ix) {
    const Compressor& C = ix ? L.icomp : L.comp;
    const int64_t cw = C.wkv.n_out;
    std::vector<float> a(size_t(n * cw)), g(size_t(n * cw));
    cpu::matmul(C.wkv, x, n, a.data(), pool_);
    cpu::matmul(C.wgate, x, n, g.data(), pool_);
    for (int64_t r = 0; r < n; ++r) {
      float* s = slot(rows[size_t(r)], rows[size_t(r)].pos);
      std::copy_n(a.data() + r * cw, cw, s + (ix ? L.off_ia : L.off_a));
      std::copy_n(g.data() + r * cw, cw, s + (ix ? L.off_ig : L.off_g));
    }
    compress_rows(L, rows, ix == 1);
  }
  const int64_t IH = c_.index_heads, Id = c_.index_dim;
  if (R == 4) {
    qi.resize(size_t(n * IH * Id));
    iw.resize(size_t(n * IH));
    mm(L.idx_wq_b, qr.data(), n, qi.data());
    cpu::matmul(L.idx_weights, x, n, iw.data(), pool_);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < IH; ++h) {
        float* v = qi.data() + (r * IH + h) * Id;
        rope(v, Id, f_comp_, rows[size_t(r)].pos);
        if (qat_) hadamard(v, Id), quant::qat_fp4_blocks(v, Id, 32);  // QAT: as the index keys
      }
  }
  std::vector<float> o(size_t(n * H * d));
  pool_.parallel_for(size_t(n), 1, [&](size_t r0, size_t r1) {
    std::vector<const float*> keys;
    std::vector<double> sc;
    for (size_t r = r0; r < r1; ++r) {
      const BatchRow& b = rows[r];
      const int64_t p = b.pos;
      keys.clear();
      for (int64_t s = std::max<int64_t>(0, p - W + 1); s <= p; ++s) keys.push_back(slot(b, s) + L.off_kv);
      if (R) {
        const int64_t vis = (p + 1) / R;
        if (R == 4 && vis > 0) {  // lightning indexer: sum_h w_h relu(q_h . k_j) / sqrt(Id), top-k, ties to lower j
          sc.assign(size_t(vis), 0.0);
          for (int64_t j = 0; j < vis; ++j) {
            const float* kj = slot(b, (j + 1) * 4 - 1) + L.off_ient;
            double s = 0;
            for (int64_t h = 0; h < IH; ++h) {
              const float* qh = qi.data() + (int64_t(r) * IH + h) * Id;
              double dot = 0;
              for (int64_t i = 0; i < Id; ++i) dot += double(qh[i]) * double(kj[i]);
              s += double(iw[r * size_t(IH) + size_t(h)]) / std::sqrt(double(IH)) * std::max(dot, 0.0) /
                   std::sqrt(double(Id));
            }
            sc[size_t(j)] = s;
          }
          std::vector<int32_t> pick = top_k(sc.data(), vis, c_.index_topk);
          std::sort(pick.begin(), pick.end());  // attention visits keys in position order
          for (int32_t j : pick) keys.push_back(slot(b, (int64_t(j) + 1) * 4 - 1) + L.off_ent);
        } else {
          for (int64_t j = 0; j < vis; ++j) keys.push_back(slot(b, (j + 1) * R - 1) + L.off_ent);
        }
      }
      attend_row(L, q.data() + int64_t(r) * H * d, keys, p, o.data() + int64_t(r) * H * d);
    }
  });
  out_proj(L, o.data(), n, out);
}

}  // namespace tf::dsv4
