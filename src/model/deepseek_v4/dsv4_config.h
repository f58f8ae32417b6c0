#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_config.h"

namespace tf::dsv4 {

// DeepSeek-V4(-Flash) config.json as the release publishes it (specs/deepseek_v4.md section 1), every field read
// with its type and checked; a key it needs that is missing, or a value it cannot run, is an error naming the key.
struct Config {
  int64_t vocab = 0, hidden = 0, n_layer = 0, n_nextn = 0;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora = 0, o_lora = 0, o_groups = 0;
  int64_t n_experts = 0, top_k = 0, moe_inter = 0, n_shared = 0, n_hash_layers = 0;
  double routed_scale = 1.5, swiglu_limit = 10.0, rms_eps = 1e-6;
  bool norm_topk = true;
  int64_t hc_mult = 4, hc_iters = 20;
  double hc_eps = 1e-6;
  int64_t window = 128;
  std::vector<int64_t> ratios;  // per layer then per MTP layer: 0 window only, 4 CSA, 128 HCA
  int64_t index_heads = 0, index_dim = 0, index_topk = 0;
  double rope_theta = 10000, compress_rope_theta = 160000;
  double yarn_factor = 1, yarn_beta_fast = 32, yarn_beta_slow = 1;
  int64_t yarn_orig_ctx = 0, max_pos = 0;
  bool tie_embeddings = false;
  std::string expert_dtype;  // "fp4" (MXFP4 experts) or "fp8"
  int64_t block = 128;       // weight_block_size
  std::string scale_fmt;     // "ue8m0" or "" (float32 scales, as V4-Flash-Base)
  int64_t bos = 0, eos = 1;

  int64_t ratio(int64_t layer) const { return ratios[size_t(layer)]; }
};

Config parse_config(const JsonConfig& c);

// Floats of one token's KV slot on the CPU path, all layers: kv; compressor a, g and closed entry; indexer a, g, entry.
int64_t slot_floats(const Config& c);

}  // namespace tf::dsv4
