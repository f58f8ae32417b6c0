#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace tf {

class GgufFile;

// What a loaded model tells the rest of the engine.
struct ModelInfo {
  std::string family;       // registered family name, e.g. "llama"
  std::string architecture; // as the checkpoint names it
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
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // KV floats one token needs over all layers (keys and values); a page holds page_size tokens of it.
  virtual int64_t kv_floats_per_token() const = 0;
  // The engine's page pool: `n_pages` pages of page_size * kv_floats_per_token() floats each.
  virtual void bind_kv(float* base, int64_t n_pages, int64_t page_size) = 0;
  // Runs every row; writes [n_wanted, n_vocab] logits in row order for rows with want_logits. Rows of one sequence
  // must be consecutive with increasing positions; a row's bits do not depend on the other rows.
  virtual void forward(const std::vector<BatchRow>& rows, float* logits) = 0;
};

// Family registry: each family folder registers itself by the architecture names it reads.
struct FamilyEntry {
  std::string name;
  std::vector<std::string> architectures;
  std::function<std::unique_ptr<Model>(std::shared_ptr<const GgufFile>, ThreadPool&)> load_gguf;
  std::function<ModelInfo(const GgufFile&)> inspect_gguf;  // without touching weights
};

bool register_family(FamilyEntry e);
const std::vector<FamilyEntry>& families();
const FamilyEntry& family_for_architecture(const std::string& arch);  // throws naming the known ones

}  // namespace tf
