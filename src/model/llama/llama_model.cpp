#include "model/llama/llama_model.h"

#include <cmath>

#include "base/error.h"
#if TF_HAVE_CUDA
#include "model/llama/llama_cuda.h"
#endif
#include "quant/ggml/dequant.h"

namespace tf {
namespace {

cpu::WeightView weight(const GgufFile& f, const std::string& name, int64_t n_in, int64_t n_out) {
  const GgufTensor* t = f.tensor(name);
  if (!t) fail("{}: tensor '{}' is missing", f.path(), name);
  if (t->ne.size() != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    fail("{}: tensor '{}' has shape [{}], expected [{}, {}]", f.path(), name, fmt::join(t->ne, ", "), n_in, n_out);
  cpu::WeightView w{name, t->type, n_in, n_out, t->data, int64_t(t->nbytes) / n_out};
  if (auto why = cpu::matmul_refusal(w); !why.empty()) fail("{}: {}", f.path(), why);
  return w;
}

// Small vectors (norms, biases) are decoded once into f32.
std::vector<float> vec(const GgufFile& f, const std::string& name, int64_t n, bool required) {
  const GgufTensor* t = f.tensor(name);
  if (!t) {
    if (required) fail("{}: tensor '{}' is missing", f.path(), name);
    return {};
  }
  if (t->n_elements() != n) fail("{}: tensor '{}' has {} elements, expected {}", f.path(), name, t->n_elements(), n);
  std::vector<float> out(static_cast<size_t>(n));
  if (!quant::dequantize(t->type, t->data, out.data(), n))
    fail("{}: tensor '{}' has format {} which cannot be decoded", f.path(), name, ggml_type_name(t->type));
  return out;
}

}  // namespace

ModelInfo llama_inspect(const GgufFile& f) {
  LlamaConfig c = llama_config_from_gguf(f);
  ModelInfo i;
  i.family = "llama";
  i.architecture = c.arch;
  i.n_vocab = c.n_vocab;
  i.n_ctx_train = c.n_ctx_train;
  i.n_layer = c.n_layer;
  i.n_embd = c.n_embd;
  for (auto& t : f.tensors()) {
    i.n_params += t.n_elements();
    i.weight_bytes += int64_t(t.nbytes);
    i.tensors_by_format[std::string(ggml_type_name(t.type))] += 1;
  }
  i.kv_bytes_per_token = c.n_layer * c.n_head_kv * (c.head_dim_k + c.head_dim_v) * int64_t(sizeof(float));
  return i;
}

LlamaModel::LlamaModel(std::shared_ptr<const GgufFile> file, ThreadPool& pool)
    : file_(std::move(file)), pool_(pool), cfg_(llama_config_from_gguf(*file_)), info_(llama_inspect(*file_)) {
  const GgufFile& f = *file_;
  const auto& c = cfg_;
  kv_row_ = c.n_head_kv * c.head_dim_k;
  const int64_t E = c.n_embd, Dq = c.n_head * c.head_dim_k, Dkv = c.n_head_kv * c.head_dim_k;
  tok_embd_ = weight(f, "token_embd.weight", E, c.n_vocab);
  output_ = f.tensor("output.weight") ? weight(f, "output.weight", E, c.n_vocab) : tok_embd_;
  output_norm_ = vec(f, "output_norm.weight", E, true);
  rope_freqs_ = vec(f, "rope_freqs.weight", c.n_rot / 2, false);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayer L;
    L.attn_norm = vec(f, p + "attn_norm.weight", E, true);
    L.ffn_norm = vec(f, p + "ffn_norm.weight", E, true);
    L.wq = weight(f, p + "attn_q.weight", E, Dq);
    L.wk = weight(f, p + "attn_k.weight", E, Dkv);
    L.wv = weight(f, p + "attn_v.weight", E, Dkv);
    L.wo = weight(f, p + "attn_output.weight", Dq, E);
    L.bq = vec(f, p + "attn_q.bias", Dq, false);
    L.bk = vec(f, p + "attn_k.bias", Dkv, false);
    L.bv = vec(f, p + "attn_v.bias", Dkv, false);
    L.bo = vec(f, p + "attn_output.bias", E, false);
    L.gate = weight(f, p + "ffn_gate.weight", E, c.n_ff);
    L.up = weight(f, p + "ffn_up.weight", E, c.n_ff);
    L.down = weight(f, p + "ffn_down.weight", c.n_ff, E);
    layers_.push_back(std::move(L));
  }
}

int64_t LlamaModel::kv_floats_per_token() const { return cfg_.n_layer * 2 * kv_row_; }

void LlamaModel::bind_kv(int64_t n_pages, int64_t page_size) {
  kv_.reset(new float[size_t(n_pages * page_size * kv_floats_per_token())]);
  kv_base_ = kv_.get();
  kv_pages_ = n_pages;
  page_size_ = page_size;
}

float* LlamaModel::kv_row_ptr(int32_t page, int64_t layer, bool value, int64_t slot) const {
  TF_CHECK(page >= 0 && page < kv_pages_, "KV page {} outside the pool of {}", page, kv_pages_);
  return kv_base_ + int64_t(page) * page_size_ * kv_floats_per_token() +
         (2 * layer + (value ? 1 : 0)) * page_size_ * kv_row_ + slot * kv_row_;
}

void LlamaModel::attention_block(const LlamaLayer& L, int64_t il, const std::vector<BatchRow>& rows) {
  const auto& c = cfg_;
  const int64_t n = int64_t(rows.size()), E = c.n_embd, D = c.head_dim_k;
  const int64_t Dq = c.n_head * D, Dkv = c.n_head_kv * D;
  cpu::rmsnorm(x_.data(), L.attn_norm.data(), n, E, c.rms_eps, h_.data());
  cpu::matmul(L.wq, h_.data(), n, q_.data(), pool_);
  cpu::matmul(L.wk, h_.data(), n, k_.data(), pool_);
  cpu::matmul(L.wv, h_.data(), n, v_.data(), pool_);
  if (!L.bq.empty()) cpu::add_bias(q_.data(), L.bq.data(), n, Dq);
  if (!L.bk.empty()) cpu::add_bias(k_.data(), L.bk.data(), n, Dkv);
  if (!L.bv.empty()) cpu::add_bias(v_.data(), L.bv.data(), n, Dkv);
  cpu::rope(q_.data(), n, Dq, c.n_head, D, c.n_rot, cos_.data(), sin_.data(), c.rope_pairing);
  cpu::rope(k_.data(), n, Dkv, c.n_head_kv, D, c.n_rot, cos_.data(), sin_.data(), c.rope_pairing);
  // Every row's K/V is stored before any row attends, so a prefill chunk sees its own earlier tokens.
  for (int64_t r = 0; r < n; ++r) {
    const auto& pages = *rows[r].pages;
    int32_t page = pages.at(size_t(rows[r].pos / page_size_));
    std::copy_n(k_.data() + r * Dkv, Dkv, kv_row_ptr(page, il, false, rows[r].pos % page_size_));
    std::copy_n(v_.data() + r * Dkv, Dkv, kv_row_ptr(page, il, true, rows[r].pos % page_size_));
  }
  const float scale = float(1.0 / std::sqrt(double(D)));
  for (int64_t r0 = 0; r0 < n;) {
    int64_t r1 = r0 + 1, max_pos = rows[r0].pos;
    while (r1 < n && rows[r1].pages == rows[r0].pages) max_pos = std::max<int64_t>(max_pos, rows[r1++].pos);
    const auto& pages = *rows[r0].pages;
    kp_.clear();
    vp_.clear();
    for (int64_t i = 0; i <= max_pos / page_size_; ++i) {
      kp_.push_back(kv_row_ptr(pages.at(size_t(i)), il, false, 0));
      vp_.push_back(kv_row_ptr(pages.at(size_t(i)), il, true, 0));
    }
    cpu::attention(q_.data() + r0 * Dq, r1 - r0, pos_.data() + r0, cpu::KvView{kp_.data(), vp_.data(), page_size_, Dkv},
                   c.n_head, c.n_head_kv, D, scale, att_.data() + r0 * Dq, pool_);
    r0 = r1;
  }
  cpu::matmul(L.wo, att_.data(), n, o_.data(), pool_);
  if (!L.bo.empty()) cpu::add_bias(o_.data(), L.bo.data(), n, E);
  cpu::add_inplace(x_.data(), o_.data(), n * E);
}

void LlamaModel::forward(const std::vector<BatchRow>& rows, float* logits) {
  const auto& c = cfg_;
  const int64_t n = int64_t(rows.size()), E = c.n_embd, D = c.head_dim_k, half = c.n_rot / 2;
  if (n == 0) return;
  x_.resize(size_t(n * E));
  h_.resize(size_t(n * std::max(E, c.n_ff)));
  q_.resize(size_t(n * c.n_head * D));
  att_.resize(q_.size());
  k_.resize(size_t(n * c.n_head_kv * D));
  v_.resize(k_.size());
  o_.resize(size_t(n * E));
  g_.resize(size_t(n * c.n_ff));
  u_.resize(size_t(n * c.n_ff));
  cos_.resize(size_t(n * half));
  sin_.resize(size_t(n * half));
  pos_.resize(size_t(n));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const BatchRow& b = rows[r];
    TF_CHECK(kv_base_ && b.pages && b.pos >= 0 && b.pos / page_size_ < int64_t(b.pages->size()),
             "row {} position {} outside its sequence's pages", r, b.pos);
    TF_CHECK(b.token >= 0 && b.token < c.n_vocab, "row {} token {} outside the vocabulary", r, b.token);
    ids[r] = b.token;
    pos_[r] = b.pos;
    cpu::rope_angles(b.pos, c.n_rot, c.rope_freq_base, c.rope_freq_scale,
                     rope_freqs_.empty() ? nullptr : rope_freqs_.data(), cos_.data() + r * half,
                     sin_.data() + r * half);
  }
  cpu::embedding(tok_embd_, ids.data(), n, x_.data());
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LlamaLayer& L = layers_[il];
    attention_block(L, il, rows);
    cpu::rmsnorm(x_.data(), L.ffn_norm.data(), n, E, c.rms_eps, h_.data());
    cpu::matmul(L.gate, h_.data(), n, g_.data(), pool_);
    cpu::matmul(L.up, h_.data(), n, u_.data(), pool_);
    cpu::swiglu(g_.data(), u_.data(), g_.data(), n * c.n_ff);
    cpu::matmul(L.down, g_.data(), n, o_.data(), pool_);
    cpu::add_inplace(x_.data(), o_.data(), n * E);
  }
  int64_t m = 0;
  for (int64_t r = 0; r < n; ++r)
    if (rows[r].want_logits) std::copy_n(x_.data() + r * E, E, h_.data() + (m++) * E);
  if (m == 0) return;
  cpu::rmsnorm(h_.data(), output_norm_.data(), m, E, c.rms_eps, o_.data());
  cpu::matmul(output_, o_.data(), m, logits, pool_);
}

namespace {
const bool kRegistered = register_family(FamilyEntry {
  "llama", {"llama", "qwen2"},
      [](std::shared_ptr<const GgufFile> f, ThreadPool& pool) -> std::unique_ptr<Model> {
        return std::make_unique<LlamaModel>(std::move(f), pool);
      },
      [](const GgufFile& f) { return llama_inspect(f); },
#if TF_HAVE_CUDA
      [](std::shared_ptr<const GgufFile> f) -> std::unique_ptr<Model> {
        return std::make_unique<LlamaCudaModel>(std::move(f));
      },
      [](const GgufFile& f) { return llama_cuda_refusal(f); },
#else
    {},
    {},
#endif
      {}, {}, {},
#if TF_HAVE_CUDA
      [](const GgufFile& f, size_t free_bytes) { return llama_cuda_memory_note(f, free_bytes); },
#else
    {},
#endif
});
}  // namespace

}  // namespace tf
