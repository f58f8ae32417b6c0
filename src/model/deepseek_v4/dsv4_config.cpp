#include "model/deepseek_v4/dsv4_config.h"

#include "base/error.h"

namespace tf::dsv4 {
namespace {

int64_t positive(const JsonConfig& c, const char* key) {
  const int64_t v = c.get_int(key);
  if (v < 1) fail("{}: '{}' must be at least 1, found {}", c.where(), key, v);
  return v;
}

}  // namespace

Config parse_config(const JsonConfig& c) {
  Config k;
  c.get_choice("model_type", {"deepseek_v4"});
  k.vocab = positive(c, "vocab_size");
  k.hidden = positive(c, "hidden_size");
  k.n_layer = positive(c, "num_hidden_layers");
  k.n_nextn = c.opt_int("num_nextn_predict_layers").value_or(0);
  if (k.n_nextn < 0) fail("{}: 'num_nextn_predict_layers' must not be negative, found {}", c.where(), k.n_nextn);
  k.n_head = positive(c, "num_attention_heads");
  k.n_kv_head = positive(c, "num_key_value_heads");
  if (k.n_kv_head != 1) fail("{}: 'num_key_value_heads' is {}; DeepSeek-V4 attention has one KV head", c.where(),
                             k.n_kv_head);
  k.head_dim = positive(c, "head_dim");
  k.rope_dim = positive(c, "qk_rope_head_dim");
  if (k.rope_dim > k.head_dim || k.rope_dim % 2 || k.rope_dim > 512)
    fail("{}: 'qk_rope_head_dim' {} must be even, at most head_dim {} and at most 512", c.where(), k.rope_dim,
         k.head_dim);
  k.q_lora = positive(c, "q_lora_rank");
  k.o_lora = positive(c, "o_lora_rank");
  k.o_groups = positive(c, "o_groups");
  if (k.n_head % k.o_groups)
    fail("{}: 'o_groups' {} does not divide num_attention_heads {}", c.where(), k.o_groups, k.n_head);
  k.n_experts = positive(c, "n_routed_experts");
  k.top_k = positive(c, "num_experts_per_tok");
  if (k.top_k > k.n_experts)
    fail("{}: 'num_experts_per_tok' {} is more than n_routed_experts {}", c.where(), k.top_k, k.n_experts);
  k.moe_inter = positive(c, "moe_intermediate_size");
  k.n_shared = c.get_int("n_shared_experts");
  k.n_hash_layers = c.opt_int("num_hash_layers").value_or(0);
  c.get_choice("scoring_func", {"sqrtsoftplus"});
  c.get_choice("topk_method", {"noaux_tc"});
  k.norm_topk = c.get_bool("norm_topk_prob");
  if (!k.norm_topk) fail("{}: 'norm_topk_prob' false is not supported (V4 normalises the routing weights)", c.where());
  k.routed_scale = c.get_float("routed_scaling_factor");
  k.swiglu_limit = c.get_float("swiglu_limit");
  c.get_choice("hidden_act", {"silu"});
  k.hc_mult = positive(c, "hc_mult");
  if (k.hc_mult > 16) fail("{}: 'hc_mult' {} is more than the 16 streams the CPU path holds", c.where(), k.hc_mult);
  k.hc_iters = positive(c, "hc_sinkhorn_iters");
  k.hc_eps = c.get_float("hc_eps");
  k.rms_eps = c.get_float("rms_norm_eps");
  k.window = positive(c, "sliding_window");
  k.ratios = c.get_ints("compress_ratios");
  if (int64_t(k.ratios.size()) != k.n_layer + k.n_nextn)
    fail("{}: 'compress_ratios' has {} entries; num_hidden_layers + num_nextn_predict_layers is {}",
         c.where(), k.ratios.size(), k.n_layer + k.n_nextn);
  for (size_t i = 0; i < k.ratios.size(); ++i) {
    const int64_t r = k.ratios[i];
    if (r != 0 && r != 4 && r != 128)
      fail("{}: 'compress_ratios[{}]' is {}; V4 layers use 0, 4 or 128", c.where(), i, r);
    if (int64_t(i) >= k.n_layer && r != 0)
      fail("{}: 'compress_ratios[{}]' is {}, but MTP layers attend over their window only", c.where(), i, r);
  }
  bool csa = false;
  for (int64_t r : k.ratios) csa |= r == 4;
  if (csa) {
    k.index_heads = positive(c, "index_n_heads");
    k.index_dim = positive(c, "index_head_dim");
    k.index_topk = positive(c, "index_topk");
    if (k.index_dim < k.rope_dim)
      fail("{}: 'index_head_dim' {} is smaller than qk_rope_head_dim {}", c.where(), k.index_dim, k.rope_dim);
    if (k.index_dim & (k.index_dim - 1))
      fail("{}: 'index_head_dim' {} is not a power of two (the indexer's Hadamard rotation)", c.where(), k.index_dim);
  }
  k.rope_theta = c.get_float("rope_theta");
  k.compress_rope_theta = c.get_float("compress_rope_theta");
  if (auto rs = c.opt_sub("rope_scaling")) {
    if (rs->has("rope_type")) rs->get_choice("rope_type", {"yarn"});  // transformers' name for it
    else rs->get_choice("type", {"yarn"});
    k.yarn_factor = rs->get_float("factor");
    k.yarn_orig_ctx = rs->get_int("original_max_position_embeddings");
    k.yarn_beta_fast = rs->get_float("beta_fast");
    k.yarn_beta_slow = rs->get_float("beta_slow");
  }
  k.max_pos = positive(c, "max_position_embeddings");
  k.tie_embeddings = c.opt_bool("tie_word_embeddings").value_or(false);
  if (k.tie_embeddings) fail("{}: 'tie_word_embeddings' is true; V4 checkpoints keep a separate head", c.where());
  k.expert_dtype = c.get_choice("expert_dtype", {"fp4", "fp8"});
  const JsonConfig q = c.sub("quantization_config");
  q.get_choice("quant_method", {"fp8"});
  if (q.has("fmt")) q.get_choice("fmt", {"e4m3"});
  k.scale_fmt = q.has("scale_fmt") ? q.get_choice("scale_fmt", {"ue8m0"}) : "";
  const auto bs = q.get_ints("weight_block_size");
  if (bs.size() != 2 || bs[0] != bs[1])
    fail("{}: 'quantization_config.weight_block_size' must be [B, B]; square blocks are what V4 publishes",
         c.where());
  k.block = bs[0];
  if (k.block < 32 || k.block % 32)
    fail("{}: 'quantization_config.weight_block_size' {} is not a multiple of 32, which the FP8 kernels need",
         c.where(), k.block);
  if (q.has("activation_scheme")) q.get_choice("activation_scheme", {"dynamic"});
  k.bos = c.opt_int("bos_token_id").value_or(0);
  k.eos = c.opt_int("eos_token_id").value_or(1);
  return k;
}

int64_t slot_floats(const Config& c) {
  int64_t n = 0;
  for (int64_t L = 0; L < c.n_layer; ++L) {
    const int64_t r = c.ratio(L), cw = r == 4 ? 2 * c.head_dim : c.head_dim;
    n += c.head_dim + (r ? 2 * cw + c.head_dim : 0) + (r == 4 ? 4 * c.index_dim + c.index_dim : 0);
  }
  if (c.n_nextn >= 1) n += c.head_dim + c.hc_mult * c.hidden;  // MTP: its kv and the main model's final streams
  return n;
}

}  // namespace tf::dsv4
