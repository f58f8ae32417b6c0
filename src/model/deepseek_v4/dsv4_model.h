#pragma once
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/dsv4_config.h"
#include "model/model.h"

namespace tf::dsv4 {

// One mHC site (attn or ffn, or the head): fn [(2+hc)hc or hc, hc*D], base, scale, in double.
struct HcWeights {
  std::vector<double> fn, base, scale;
};

struct Compressor {
  cpu::WeightView wkv, wgate;  // [cw, D] BF16, cw = 2 d (overlapping, ratio 4) or d
  std::vector<float> ape;      // [R, cw]
  std::vector<float> norm;     // [d]
};

struct Layer {
  int64_t ratio = 0;
  bool hash = false;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, sinks;
  HcWeights hc_attn, hc_ffn;
  quant::ScaledWeight wq_a, wq_b, wkv, wo_a, wo_b;
  Compressor comp;                   // ratio > 0
  Compressor icomp;                  // ratio 4: the indexer's own compressor (d = index_head_dim)
  quant::ScaledWeight idx_wq_b;      // ratio 4
  cpu::WeightView idx_weights;       // ratio 4: [index_heads, D]
  cpu::WeightView gate;              // [E, D]
  std::vector<float> gate_bias;      // non-hash layers
  std::vector<int64_t> tid2eid;      // hash layers: [vocab, top_k]
  quant::ScaledWeight sh_w1, sh_w3, sh_w2;
  std::vector<quant::ScaledWeight> w1, w3, w2;  // routed experts
  // This layer's floats in a token's KV slot: kv; compressor a, g, entry; indexer a, g, entry.
  int64_t off_kv = 0, off_a = 0, off_g = 0, off_ent = 0, off_ia = 0, off_ig = 0, off_ient = 0;
};

// DeepSeek-V4 on the CPU; all per-token state sits in the token's own KV slot, so it is a function of the prefix.
class Model : public tf::Model {
 public:
  // qat: apply the release's FP8/FP4 activation roundings (spec section 2, "QAT rounding").
  Model(std::shared_ptr<const SafetensorsCheckpoint> ck, const JsonConfig& cfg, ThreadPool& pool, bool qat);
  const ModelInfo& info() const override { return info_; }
  int64_t kv_floats_per_token() const override { return slot_floats_; }
  void bind_kv(int64_t n_pages, int64_t page_size) override;
  void forward(const std::vector<BatchRow>& rows, float* logits) override;
  bool has_mtp() const override { return mtp_ != nullptr; }
  // Greedy drafts after `tokens` (the last one fed this round); `logits`, when given, gets each draft's row.
  std::vector<int32_t> draft_mtp(const std::vector<int32_t>& pages, const std::vector<int32_t>& tokens,
                                 int64_t max_tokens, std::vector<float>* logits) override;

  const Config& config() const { return c_; }

 private:
  friend struct Block;
  float* slot(const BatchRow& r, int64_t pos) const;  // the KV slot of position pos of r's sequence
  // FP8 / MXFP4 products; with QAT on, their inputs are first rounded to FP8 in blocks of 128 (spec 2).
  void mm(const quant::ScaledWeight& w, const float* x, int64_t n, float* y);
  void mm_experts(const std::vector<quant::ScaledWeight>& w, const float* x, const cpu::ExpertPair* pairs,
                  int64_t n_pairs, float* y);
  void qat_kv(float* kv, int64_t n) const;  // QAT: a KV row's non-rotary dims to FP8 in blocks of 64
  void attention(const Layer& L, const std::vector<BatchRow>& rows, const float* x, float* out);
  void q_and_kv(const Layer& L, const float* x, int64_t n, const int64_t* pos, std::vector<float>& qr,
                std::vector<float>& q, std::vector<float>& kv);
  void kv_only(const Layer& L, const float* x, int64_t n, const int64_t* pos, std::vector<float>& kv);
  void attend_row(const Layer& L, const float* q, const std::vector<const float*>& keys, int64_t pos,
                  float* o) const;
  void out_proj(const Layer& L, const float* o, int64_t n, float* out);
  void compress_rows(const Layer& L, const std::vector<BatchRow>& rows, bool indexer);
  void moe(const Layer& L, const std::vector<BatchRow>& rows, const float* x, float* out);
  void hc_mix(const HcWeights& w, const float* Xs, int64_t n, double* post, double* comb, float* collapsed) const;
  void expand(const float* F, int64_t n, const double* post, const double* comb, float* Xs) const;
  void head_logits(const HcWeights& hw, const std::vector<float>& normw, const float* Xs, int64_t n,
                   float* logits) const;
  // MTP (mtp.0): the streams x = e_proj(enorm(E[tok])) + h_proj(hnorm(h_i)) from a token and streams h.
  void mtp_input(const int32_t* toks, const float* h, int64_t n, float* Xs);
  void mtp_teacher_forced(const std::vector<BatchRow>& rows);

  std::shared_ptr<const SafetensorsCheckpoint> ck_;
  Config c_;
  ThreadPool& pool_;
  bool qat_ = false;
  ModelInfo info_;
  std::vector<Layer> layers_;
  cpu::WeightView embed_, head_;
  std::vector<float> norm_;
  HcWeights hc_head_;
  std::vector<double> f_main_, f_comp_;  // RoPE frequencies per pair: window-only layers, compressed layers
  int64_t slot_floats_ = 0, page_size_ = 0, n_pages_ = 0;
  std::unique_ptr<float[]> kv_;
  std::vector<float> X_;  // [n, hc, D] residual streams
  // MTP (mtp.0); slots also keep the main model's final streams (off_xm) and the MTP kv (off_mkv).
  std::unique_ptr<Layer> mtp_;
  quant::ScaledWeight e_proj_, h_proj_;
  std::vector<float> enorm_, hnorm_, mtp_norm_;
  HcWeights mtp_hc_head_;
  int64_t off_xm_ = 0, off_mkv_ = 0;
};

std::unique_ptr<tf::Model> load(std::shared_ptr<const SafetensorsCheckpoint> ck, const JsonConfig& cfg,
                                ThreadPool& pool, bool qat);

}  // namespace tf::dsv4
