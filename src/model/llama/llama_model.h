#pragma once
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "io/gguf.h"
#include "model/llama/llama_config.h"
#include "model/model.h"

namespace tf {

struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;    // [n_embd]
  std::vector<float> bq, bk, bv, bo;         // optional biases, empty when absent
  cpu::WeightView wq, wk, wv, wo;            // [n_head*d_k, n_embd], [n_kv*d_k, n_embd] x2, [n_embd, n_head*d_k]
  cpu::WeightView gate, up, down;            // [n_ff, n_embd] x2, [n_embd, n_ff]
};

// KV of one sequence: per layer [n_ctx, n_kv*d_k] f32 for keys and for values.
class LlamaSequence : public SequenceState {
 public:
  LlamaSequence(int64_t n_layer, int64_t n_ctx, int64_t row);
  int64_t capacity() const override { return n_ctx_; }
  float* k(int64_t layer) { return k_[layer].get(); }
  float* v(int64_t layer) { return v_[layer].get(); }

 private:
  int64_t n_ctx_;
  std::vector<std::unique_ptr<float[]>> k_, v_;
};

class LlamaModel : public Model {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, ThreadPool& pool);
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t n_ctx) const override;
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
  // Scratch reused across forwards, sized to the row count.
  std::vector<float> x_, h_, q_, k_, v_, att_, o_, g_, u_, cos_, sin_;
  std::vector<int32_t> pos_;
};

ModelInfo llama_inspect(const GgufFile& f);

}  // namespace tf
