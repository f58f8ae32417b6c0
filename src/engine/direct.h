#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv_cache.h"
#include "model/model.h"

namespace tf {

// One sequence driven straight through the model, for tools that need every position's logits (the `logits`
// command, `bench`). It binds the model to a KV pool of its own, so no Engine may use the model meanwhile.
class DirectSequence {
 public:
  DirectSequence(Model& model, int64_t capacity, int64_t page_size = 32);
  // Feeds ids at positions [n_fed, n_fed + n) in one forward; writes logits of every row (or only the last).
  // `prompt`: the rows are prompt tokens (BatchRow::prompt), not decode rows.
  void feed(const int32_t* ids, int64_t n, float* logits, bool all_logits, bool prompt);
  int64_t n_fed() const { return n_fed_; }
  const std::vector<int32_t>& pages() const { return lease_.pages; }

 private:
  Model& model_;
  std::unique_ptr<KvCache> kv_;
  KvLease lease_;
  int64_t n_fed_ = 0;
};

// Teacher-forced logits of every position, [n, n_vocab], prefilled `chunk` rows per forward (0: all at once).
std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& ids, int64_t chunk);

// The model's MTP drafts after `ids` (all but the last fed first, as the engine would have), and their logits.
std::vector<int32_t> mtp_drafts(Model& model, const std::vector<int32_t>& ids, int64_t k, std::vector<float>* logits);

}  // namespace tf
