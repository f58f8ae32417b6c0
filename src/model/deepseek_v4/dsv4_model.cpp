#include "model/deepseek_v4/dsv4_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/scalar.h"
#include "model/deepseek_v4/dsv4_checkpoint.h"
#include "model/deepseek_v4/dsv4_ops.h"
#include "quant/scaled/qat.h"

namespace tf::dsv4 {
namespace {

std::vector<float> floats(const SafetensorsCheckpoint& ck, const std::string& name) {
  const StTensor& t = ck.get(name);
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.dtype == StDtype::BF16 ? bf16_to_f32(load_u16(t.data + 2 * i)) : bits_to_f32(load_u32(t.data + 4 * i));
  return v;
}

std::vector<double> doubles(const SafetensorsCheckpoint& ck, const std::string& name) {
  const auto f = floats(ck, name);
  return std::vector<double>(f.begin(), f.end());
}

cpu::WeightView dense(const SafetensorsCheckpoint& ck, const std::string& name) {
  const StTensor& t = ck.get(name);
  const bool bf = t.dtype == StDtype::BF16;
  cpu::WeightView w{name, bf ? GgmlType::BF16 : GgmlType::F32, t.shape[1], t.shape[0], t.data,
                    t.shape[1] * (bf ? 2 : 4)};
  if (auto why = cpu::matmul_refusal(w); !why.empty()) fail("{}", why);
  return w;
}

HcWeights hc(const SafetensorsCheckpoint& ck, const std::string& p) {
  return {doubles(ck, p + "_fn"), doubles(ck, p + "_base"), doubles(ck, p + "_scale")};
}

}  // namespace

Model::Model(std::shared_ptr<const SafetensorsCheckpoint> ck, const JsonConfig& cfg, ThreadPool& pool, bool qat)
    : ck_(std::move(ck)), c_(parse_config(cfg)), pool_(pool), qat_(qat) {
  const SafetensorsCheckpoint& k = *ck_;
  info_ = inspect_checkpoint(k, c_);  // every check before any weight is bound
  std::map<std::string, Expected> exp;
  for (const Expected& e : expected_tensors(c_)) exp[e.name] = e;
  auto sw = [&](const std::string& n) {
    quant::ScaledWeight w = scaled_weight(k, c_, exp.at(n));
    if (auto why = cpu::scaled_matmul_refusal(w); !why.empty()) fail("{}", why);
    return w;
  };
  embed_ = dense(k, "embed.weight");
  head_ = dense(k, "head.weight");
  norm_ = floats(k, "norm.weight");
  hc_head_ = hc(k, "hc_head");
  f_main_ = rope_freqs(c_, false);
  f_comp_ = rope_freqs(c_, true);
  const int64_t d = c_.head_dim;
  auto bind = [&](const std::string& p, int64_t ratio, bool hash) {
    Layer L;
    L.ratio = ratio;
    L.hash = hash;
    L.attn_norm = floats(k, p + "attn_norm.weight");
    L.ffn_norm = floats(k, p + "ffn_norm.weight");
    L.q_norm = floats(k, p + "attn.q_norm.weight");
    L.kv_norm = floats(k, p + "attn.kv_norm.weight");
    L.sinks = floats(k, p + "attn.attn_sink");
    L.hc_attn = hc(k, p + "hc_attn");
    L.hc_ffn = hc(k, p + "hc_ffn");
    L.wq_a = sw(p + "attn.wq_a"), L.wq_b = sw(p + "attn.wq_b"), L.wkv = sw(p + "attn.wkv");
    L.wo_a = sw(p + "attn.wo_a"), L.wo_b = sw(p + "attn.wo_b");
    L.off_kv = slot_floats_;
    slot_floats_ += d;
    if (L.ratio) {
      const std::string cp = p + "attn.compressor.";
      L.comp = {dense(k, cp + "wkv.weight"), dense(k, cp + "wgate.weight"), floats(k, cp + "ape"),
                floats(k, cp + "norm.weight")};
      const int64_t cw = L.comp.wkv.n_out;
      L.off_a = slot_floats_, L.off_g = L.off_a + cw, L.off_ent = L.off_g + cw;
      slot_floats_ = L.off_ent + d;
    }
    if (L.ratio == 4) {
      const std::string ip = p + "attn.indexer.";
      L.icomp = {dense(k, ip + "compressor.wkv.weight"), dense(k, ip + "compressor.wgate.weight"),
                 floats(k, ip + "compressor.ape"), floats(k, ip + "compressor.norm.weight")};
      L.idx_wq_b = sw(ip + "wq_b");
      L.idx_weights = dense(k, ip + "weights_proj.weight");
      const int64_t icw = L.icomp.wkv.n_out;
      L.off_ia = slot_floats_, L.off_ig = L.off_ia + icw, L.off_ient = L.off_ig + icw;
      slot_floats_ = L.off_ient + c_.index_dim;
    }
    L.gate = dense(k, p + "ffn.gate.weight");
    if (L.hash) {
      const StTensor& t = k.get(p + "ffn.gate.tid2eid");
      L.tid2eid.resize(size_t(t.n_elements()));
      std::memcpy(L.tid2eid.data(), t.data, t.nbytes);  // range-checked by check_checkpoint
    } else {
      L.gate_bias = floats(k, p + "ffn.gate.bias");
    }
    if (c_.n_shared) {
      L.sh_w1 = sw(p + "ffn.shared_experts.w1"), L.sh_w3 = sw(p + "ffn.shared_experts.w3");
      L.sh_w2 = sw(p + "ffn.shared_experts.w2");
    }
    for (int64_t e = 0; e < c_.n_experts; ++e) {
      L.w1.push_back(sw(fmt::format("{}ffn.experts.{}.w1", p, e)));
      L.w3.push_back(sw(fmt::format("{}ffn.experts.{}.w3", p, e)));
      L.w2.push_back(sw(fmt::format("{}ffn.experts.{}.w2", p, e)));
    }
    return L;
  };
  for (int64_t il = 0; il < c_.n_layer; ++il)
    layers_.push_back(bind(fmt::format("layers.{}.", il), c_.ratio(il), il < c_.n_hash_layers));
  if (c_.n_nextn >= 1) {
    const int64_t main_slot = slot_floats_;
    mtp_ = std::make_unique<Layer>(bind("mtp.0.", 0, false));
    off_mkv_ = mtp_->off_kv;
    TF_CHECK(off_mkv_ == main_slot, "MTP kv follows the main layers' slot");
    off_xm_ = slot_floats_;
    slot_floats_ += c_.hc_mult * c_.hidden;
    e_proj_ = sw("mtp.0.e_proj"), h_proj_ = sw("mtp.0.h_proj");
    enorm_ = floats(k, "mtp.0.enorm.weight"), hnorm_ = floats(k, "mtp.0.hnorm.weight");
    mtp_norm_ = floats(k, "mtp.0.norm.weight");
    mtp_hc_head_ = hc(k, "mtp.0.hc_head");
  }
  TF_CHECK(slot_floats_ == slot_floats(c_), "slot layout {} vs {}", slot_floats_, slot_floats(c_));
  info_.kv_bytes_per_token = slot_floats_ * 4;
}

void Model::bind_kv(int64_t n_pages, int64_t page_size) {
  const double bytes = double(n_pages) * double(page_size) * double(slot_floats_) * 4;
  try {
    kv_.reset(new float[size_t(n_pages * page_size * slot_floats_)]);
  } catch (const std::bad_alloc&) {
    fail("the KV pool of {} pages x {} tokens ({:.1f} MiB) does not fit in memory", n_pages, page_size,
         bytes / (1 << 20));
  }
  n_pages_ = n_pages, page_size_ = page_size;
}

float* Model::slot(const BatchRow& r, int64_t pos) const {
  TF_CHECK(pos >= 0 && pos / page_size_ < int64_t(r.pages->size()), "position {} outside the sequence's pages", pos);
  const int32_t page = (*r.pages)[size_t(pos / page_size_)];
  TF_CHECK(page >= 0 && page < n_pages_, "KV page {} outside the pool of {}", page, n_pages_);
  return kv_.get() + (int64_t(page) * page_size_ + pos % page_size_) * slot_floats_;
}

void Model::hc_mix(const HcWeights& w, const float* Xs, int64_t n, double* post, double* comb,
                   float* collapsed) const {
  const int64_t hc = c_.hc_mult, D = c_.hidden;
  pool_.parallel_for(size_t(n), 1, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* X = Xs + r * size_t(hc * D);
      double pre[16];
      hc_weights(w, X, hc, D, c_.rms_eps, c_.hc_eps, c_.hc_iters, pre, post + r * size_t(hc),
                 comb + r * size_t(hc * hc));
      collapse(pre, X, hc, D, collapsed + r * size_t(D));
    }
  });
}

void Model::expand(const float* F, int64_t n, const double* post, const double* comb, float* Xs) const {
  // X_k <- post_k F + sum_j comb[j, k] X_j, per row in a fixed order.
  const int64_t hc = c_.hc_mult, D = c_.hidden;
  pool_.parallel_for(size_t(n), 1, [&](size_t r0, size_t r1) {
    std::vector<float> old(static_cast<size_t>(hc * D));
    for (size_t r = r0; r < r1; ++r) {
      float* X = Xs + r * size_t(hc * D);
      std::copy_n(X, hc * D, old.data());
      for (int64_t k = 0; k < hc; ++k)
        for (int64_t j = 0; j < D; ++j) {
          double s = post[r * size_t(hc) + size_t(k)] * double(F[r * size_t(D) + size_t(j)]);
          for (int64_t i = 0; i < hc; ++i)
            s += comb[(r * size_t(hc) + size_t(i)) * size_t(hc) + size_t(k)] * double(old[size_t(i * D + j)]);
          X[k * D + j] = float(s);
        }
    }
  });
}

void Model::forward(const std::vector<BatchRow>& rows, float* logits) {
  const int64_t n = int64_t(rows.size()), hc = c_.hc_mult, D = c_.hidden;
  if (n == 0) return;
  for (int64_t r = 0; r < n; ++r) {
    const BatchRow& b = rows[size_t(r)];
    TF_CHECK(kv_ && b.pages && b.pos >= 0 && b.pos / page_size_ < int64_t(b.pages->size()),
             "row {} position {} outside its sequence's pages", r, b.pos);
    TF_CHECK(b.token >= 0 && b.token < c_.vocab, "row {} token {} outside the vocabulary", r, b.token);
  }
  X_.resize(size_t(n * hc * D));
  std::vector<float> e(size_t(n * D)), col(size_t(n * D)), xn(size_t(n * D)), F(size_t(n * D));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) ids[size_t(r)] = rows[size_t(r)].token;
  cpu::embedding(embed_, ids.data(), n, e.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < hc; ++i) std::copy_n(e.data() + r * D, D, X_.data() + (r * hc + i) * D);
  std::vector<double> post(size_t(n * hc)), comb(size_t(n * hc * hc));
  for (const Layer& L : layers_) {
    hc_mix(L.hc_attn, X_.data(), n, post.data(), comb.data(), col.data());
    cpu::rmsnorm(col.data(), L.attn_norm.data(), n, D, float(c_.rms_eps), xn.data());
    attention(L, rows, xn.data(), F.data());
    expand(F.data(), n, post.data(), comb.data(), X_.data());
    hc_mix(L.hc_ffn, X_.data(), n, post.data(), comb.data(), col.data());
    cpu::rmsnorm(col.data(), L.ffn_norm.data(), n, D, float(c_.rms_eps), xn.data());
    moe(L, rows, xn.data(), F.data());
    expand(F.data(), n, post.data(), comb.data(), X_.data());
  }
  if (mtp_) mtp_teacher_forced(rows);
  std::vector<int64_t> want;
  for (int64_t r = 0; r < n; ++r)
    if (rows[size_t(r)].want_logits) want.push_back(r);
  if (want.empty()) return;
  std::vector<float> Xw(want.size() * size_t(hc * D));
  for (size_t k = 0; k < want.size(); ++k)
    std::copy_n(X_.data() + want[k] * hc * D, hc * D, Xw.data() + k * size_t(hc * D));
  head_logits(hc_head_, norm_, Xw.data(), int64_t(want.size()), logits);
}

void Model::head_logits(const HcWeights& hw, const std::vector<float>& normw, const float* Xs, int64_t n,
                        float* logits) const {
  // The streams collapsed by the head's mHC weights (sigmoid, no Sinkhorn), normed, projected.
  const int64_t hc = c_.hc_mult, D = c_.hidden;
  std::vector<float> h(size_t(n * D)), hn(size_t(n * D));
  for (int64_t k = 0; k < n; ++k) {
    const float* X = Xs + k * hc * D;
    double pre[16];
    hc_head_weights(hw, X, hc, D, c_.rms_eps, c_.hc_eps, pre);
    collapse(pre, X, hc, D, h.data() + k * D);
  }
  cpu::rmsnorm(h.data(), normw.data(), n, D, float(c_.rms_eps), hn.data());
  cpu::matmul(head_, hn.data(), n, logits, pool_);
}

std::unique_ptr<tf::Model> load(std::shared_ptr<const SafetensorsCheckpoint> ck, const JsonConfig& cfg,
                                ThreadPool& pool, bool qat) {
  return std::make_unique<Model>(std::move(ck), cfg, pool, qat);
}

void Model::mm(const quant::ScaledWeight& w, const float* x, int64_t n, float* y) {
  if (!qat_) return cpu::matmul_scaled(w, x, n, y, pool_);
  std::vector<float> q(x, x + n * w.n_in);
  for (int64_t r = 0; r < n; ++r) quant::qat_fp8_blocks(q.data() + r * w.n_in, w.n_in, 128);
  cpu::matmul_scaled(w, q.data(), n, y, pool_);
}

void Model::mm_experts(const std::vector<quant::ScaledWeight>& w, const float* x, const cpu::ExpertPair* pairs,
                       int64_t n_pairs, float* y) {
  if (!qat_) return cpu::matmul_experts(w, x, pairs, n_pairs, y, pool_);
  int64_t rows = 0;
  for (int64_t p = 0; p < n_pairs; ++p) rows = std::max<int64_t>(rows, pairs[p].row + 1);
  const int64_t n_in = w[0].n_in;
  std::vector<float> q(x, x + rows * n_in);
  for (int64_t r = 0; r < rows; ++r) quant::qat_fp8_blocks(q.data() + r * n_in, n_in, 128);
  cpu::matmul_experts(w, q.data(), pairs, n_pairs, y, pool_);
}

void Model::qat_kv(float* kv, int64_t n) const {
  if (!qat_) return;
  for (int64_t r = 0; r < n; ++r) quant::qat_fp8_blocks(kv + r * c_.head_dim, c_.head_dim - c_.rope_dim, 64);
}

}  // namespace tf::dsv4
