#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"

namespace tf {

class GgufFile;
class JsonConfig;
class SafetensorsCheckpoint;

// What a loaded model tells the rest of the engine.
struct ModelInfo {
  std::string family;        // registered family name, e.g. "llama"
  std::string architecture;  // as the checkpoint names it
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_layer = 0, n_embd = 0;
  int64_t n_params = 0;
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  std::map<std::string, int64_t> tensors_by_format;  // format name -> tensor count
};

// One row of a forward: a token at an absolute position of a sequence. A sequence is named by its page table
// (the engine's KV pages, in position order); rows of one sequence share the same table object.
struct BatchRow {
  const std::vector<int32_t>* pages = nullptr;
  int32_t token = 0;
  int32_t pos = 0;
  bool want_logits = false;
  bool prompt = false;  // a prompt token (not a decode or draft-verify row): see prompt_arithmetic_differs
};

// The sampling inputs of one logits row, for backends that sample next to the logits.
struct RowSampling {
  double temperature = 0;
  uint64_t seed = 0;
  int64_t pos = 0;         // absolute position of the token being drawn
  bool candidates = true;  // false: a greedy row without logprobs, so only its argmax leaves the device
};

// What leaves the device for one logits row: a fixed number of top candidates plus the full-vocabulary facts the
// keyed sampler and logprobs need (see backend/cuda/cuda_sample.h).
struct RowCandidates {
  int32_t greedy = 0, gumbel = 0;  // argmax; keyed Gumbel-max over the whole vocabulary (temperature > 0)
  float gumbel_logit = 0;
  double lse = 0, max_t = 0, sum_t = 0;        // log-sum-exp at T=1; max and sum of exp(l/T - max) at the row's T
  std::vector<std::pair<float, int32_t>> top;  // (logit desc, id asc)
  bool complete = false;                       // top holds the whole vocabulary
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // KV floats one token needs over all layers (keys and values); a page holds page_size tokens of it.
  virtual int64_t kv_floats_per_token() const = 0;
  // Allocates the engine's page pool (host or device memory, as the backend needs): `n_pages` pages of
  // page_size * kv_floats_per_token() floats each; throws naming the size when it cannot.
  virtual void bind_kv(int64_t n_pages, int64_t page_size) = 0;
  // After bind_kv: the largest round the caller will run (rows, rows wanting logits, a sequence's positions). Device
  // backends allocate its scratch now, so a round never fails for memory later; throws naming the size.
  virtual void reserve_rounds(int64_t max_rows, int64_t max_logit_rows, int64_t max_positions) {}
  // Runs every row; writes [n_wanted, n_vocab] logits in row order for rows with want_logits. Rows of one sequence
  // must be consecutive with increasing positions; a row's bits do not depend on the other rows.
  virtual void forward(const std::vector<BatchRow>& rows, float* logits) = 0;
  // Prompt rows take another arithmetic than decode rows: only their KV may enter the prefix cache (resumed == fresh).
  virtual bool prompt_arithmetic_differs() const { return false; }
  // Backends that keep logits on the device return candidates instead (one per want_logits row, in row order).
  virtual bool device_sampling() const { return false; }
  // Device backends: the last forward's device time (stream events), and CUDA graphs on or off (benchmarks).
  virtual double last_device_ms() const { return 0; }
  virtual double last_launch_ms() const { return 0; }  // host time the last forward's launches took, where timed
  virtual void set_graphs(bool) {}
  // Device memory the backend keeps beyond weights and KV, in words (CUDA's prompt images), or "" for none.
  virtual std::string memory_note() const { return {}; }
  virtual void forward_sample(const std::vector<BatchRow>& rows, const std::vector<RowSampling>& sampling,
                              std::vector<RowCandidates>& out);
  // The full logits of logits row `k` of the last forward_sample, for draws the candidates cannot decide.
  virtual void last_logits_row(int64_t k, float* out);
  // Model-provided drafter (DeepSeek's MTP): proposals after `tokens` of the sequence with these pages.
  virtual bool has_mtp() const { return false; }
  virtual std::vector<int32_t> draft_mtp(const std::vector<int32_t>&, const std::vector<int32_t>&, int64_t,
                                         std::vector<float>*) {
    return {};
  }
};

// Family registry: each family folder registers itself by the architecture names it reads.
struct FamilyEntry {
  std::string name;
  std::vector<std::string> architectures;
  std::function<std::unique_ptr<Model>(std::shared_ptr<const GgufFile>, ThreadPool&)> load_gguf;
  std::function<ModelInfo(const GgufFile&)> inspect_gguf;  // without touching weights
  // The CUDA backend's loader and its startup check ("" = can run); empty when the family has no CUDA path.
  std::function<std::unique_ptr<Model>(std::shared_ptr<const GgufFile>)> load_gguf_cuda;
  std::function<std::string(const GgufFile&)> cuda_refusal;
  // Safetensors checkpoints: the config.json model_type values it reads, and its check of config and tensors.
  std::vector<std::string> model_types;
  std::function<ModelInfo(const SafetensorsCheckpoint&, const JsonConfig&)> inspect_safetensors;
  // `qat`: the release's activation roundings (DeepSeek-V4), on for serving unless turned off.
  std::function<std::unique_ptr<Model>(std::shared_ptr<const SafetensorsCheckpoint>, const JsonConfig&, ThreadPool&,
                                       bool qat)>
      load_safetensors;
  // `tensorfold info` on CUDA: what a load may take beside the weights and KV, given the free device memory; a note
  // and whether the load would be refused for it.
  std::function<std::pair<std::string, bool>(const GgufFile&, size_t free_bytes)> cuda_memory_note;
};

// Longest context the CUDA attention kernel serves (one shared-memory score per key).
constexpr int64_t kCudaMaxContext = 48 * 1024;

bool register_family(FamilyEntry e);
const std::vector<FamilyEntry>& families();
const FamilyEntry& family_for_architecture(const std::string& arch);      // throws naming the known ones
const FamilyEntry& family_for_model_type(const std::string& model_type);  // throws naming the known ones

}  // namespace tf
