#pragma once
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "io/gguf.h"
#include "model/llama/llama_config.h"
#include "model/model.h"

namespace tf {

struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  std::vector<float> bq, bk, bv, bo;       // optional biases, empty when absent
  cpu::WeightView wq, wk, wv, wo;          // [n_head*d_k, n_embd], [n_kv*d_k, n_embd] x2, [n_embd, n_head*d_k]
  cpu::WeightView gate, up, down;          // [n_ff, n_embd] x2, [n_embd, n_ff]
};

class LlamaModel : public Model {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, ThreadPool& pool);
  const ModelInfo& info() const override { return info_; }
  int64_t kv_floats_per_token() const override;
  void bind_kv(int64_t n_pages, int64_t page_size) override;
  void forward(const std::vector<BatchRow>& rows, float* logits) override;
  const LlamaConfig& config() const { return cfg_; }

 private:
  void attention_block(const LlamaLayer& L, int64_t il, const std::vector<BatchRow>& rows);

  std::shared_ptr<const GgufFile> file_;
  ThreadPool& pool_;
  LlamaConfig cfg_;
  ModelInfo info_;
  cpu::WeightView tok_embd_, output_;  // [n_vocab, n_embd]; output is token_embd when tied
  std::vector<float> output_norm_;
  std::vector<float> rope_freqs_;
  std::vector<LlamaLayer> layers_;
  // Paged KV: page p, layer l holds page_size K rows then page_size V rows of kv_row_ floats.
  std::unique_ptr<float[]> kv_;
  float* kv_base_ = nullptr;
  int64_t kv_pages_ = 0, page_size_ = 0, kv_row_ = 0;
  float* kv_row_ptr(int32_t page, int64_t layer, bool value, int64_t slot) const;
  // Scratch reused across forwards, sized to the row count.
  std::vector<float> x_, h_, q_, k_, v_, att_, o_, g_, u_, cos_, sin_;
  std::vector<int32_t> pos_;
  std::vector<const float*> kp_, vp_;
};

ModelInfo llama_inspect(const GgufFile& f);

}  // namespace tf
