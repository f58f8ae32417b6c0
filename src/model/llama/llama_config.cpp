#include "model/llama/llama_config.h"

#include "base/error.h"
#include "io/gguf.h"

namespace tf {
namespace {

int64_t required_int(const GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) fail("{}: required metadata '{}' is missing", f.path(), key);
  if (*v <= 0) fail("{}: metadata '{}' must be positive, got {}", f.path(), key, *v);
  return *v;
}

// Per-layer arrays are allowed by the format; this family needs every layer equal.
int64_t uniform_int(const GgufFile& f, const std::string& key, int64_t def) {
  if (auto* arr = f.find(key); arr && arr->type == GgufValueType::ARRAY) {
    const auto* v = f.get_ints(key);
    if (v->empty()) fail("{}: metadata '{}' is an empty array", f.path(), key);
    for (auto x : *v)
      if (x != v->front()) fail("{}: metadata '{}' varies per layer, which the llama family cannot run", f.path(), key);
    return v->front();
  }
  return f.get_int(key).value_or(def);
}

}  // namespace

LlamaConfig llama_config_from_gguf(const GgufFile& f) {
  LlamaConfig c;
  c.arch = f.get_string("general.architecture").value_or("");
  const std::string p = c.arch + ".";
  c.n_embd = required_int(f, p + "embedding_length");
  c.n_layer = required_int(f, p + "block_count");
  c.n_ctx_train = f.get_int(p + "context_length").value_or(4096);
  c.n_ff = uniform_int(f, p + "feed_forward_length", 0);
  if (c.n_ff <= 0) fail("{}: required metadata '{}feed_forward_length' is missing", f.path(), p);
  c.n_head = uniform_int(f, p + "attention.head_count", 0);
  if (c.n_head <= 0) fail("{}: required metadata '{}attention.head_count' is missing", f.path(), p);
  c.n_head_kv = uniform_int(f, p + "attention.head_count_kv", c.n_head);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head, c.n_head_kv);
  c.head_dim_k = f.get_int(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  c.head_dim_v = f.get_int(p + "attention.value_length").value_or(c.n_embd / c.n_head);
  if (c.head_dim_k != c.head_dim_v)
    fail("{}: key_length {} differs from value_length {}; the llama family needs them equal", f.path(), c.head_dim_k,
         c.head_dim_v);
  c.n_rot = f.get_int(p + "rope.dimension_count").value_or(c.head_dim_k);
  if (c.n_rot <= 0 || c.n_rot > c.head_dim_k || c.n_rot % 2)
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", f.path(), c.n_rot, c.head_dim_k);
  auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  if (!eps) fail("{}: required metadata '{}attention.layer_norm_rms_epsilon' is missing", f.path(), p);
  c.rms_eps = float(*eps);
  c.rope_freq_base = f.get_float(p + "rope.freq_base").value_or(10000.0);
  std::string scaling = f.get_string(p + "rope.scaling.type").value_or("linear");
  double factor = f.get_float(p + "rope.scaling.factor").value_or(f.get_float(p + "rope.scale_linear").value_or(0.0));
  if (scaling == "linear" || scaling == "none") {
    c.rope_freq_scale = (scaling == "none" || factor == 0.0) ? 1.0 : 1.0 / factor;
  } else {
    fail("{}: metadata '{}rope.scaling.type' = '{}' is not supported yet (linear and none are)", f.path(), p, scaling);
  }
  c.rope_pairing = c.arch == "llama" ? cpu::RopePairing::Norm : cpu::RopePairing::Neox;
  const auto* toks = f.get_strings("tokenizer.ggml.tokens");
  c.n_vocab = f.get_int(p + "vocab_size").value_or(toks ? int64_t(toks->size()) : 0);
  if (c.n_vocab <= 0)
    fail("{}: cannot tell the vocabulary size (no {}vocab_size, no tokenizer.ggml.tokens)", f.path(), p);
  return c;
}

}  // namespace tf
