#pragma once
#include <cstdint>
#include <string>

#include "backend/cpu/ops.h"

namespace tf {
class GgufFile;

// Hyperparameters of a dense llama-family model, read with typed, required-or-default reads.
struct LlamaConfig {
  std::string arch;  // GGUF general.architecture
  int64_t n_vocab = 0, n_ctx_train = 0, n_embd = 0, n_layer = 0, n_ff = 0;
  int64_t n_head = 0, n_head_kv = 0;
  int64_t head_dim_k = 0, head_dim_v = 0;  // kept apart: equal today, not by definition
  int64_t n_rot = 0;
  float rms_eps = 1e-5f;
  double rope_freq_base = 10000.0, rope_freq_scale = 1.0;
  cpu::RopePairing rope_pairing = cpu::RopePairing::Norm;
};

LlamaConfig llama_config_from_gguf(const GgufFile& f);

}  // namespace tf
