#include "engine/direct.h"

#include "base/error.h"

namespace tf {

DirectSequence::DirectSequence(Model& model, int64_t capacity, int64_t page_size) : model_(model) {
  const int64_t pages = (capacity + page_size - 1) / page_size;
  kv_ = std::make_unique<KvCache>(pages, page_size, 0);
  model_.bind_kv(pages, page_size);
  lease_ = *kv_->acquire({}, capacity);
}

void DirectSequence::feed(const int32_t* ids, int64_t n, float* logits, bool all_logits, bool prompt) {
  if (n_fed_ + n > int64_t(lease_.pages.size()) * kv_->page_size())
    fail("{} tokens do not fit this sequence's {} positions", n_fed_ + n, lease_.pages.size() * kv_->page_size());
  std::vector<BatchRow> rows;
  for (int64_t i = 0; i < n; ++i)
    rows.push_back({&lease_.pages, ids[i], int32_t(n_fed_ + i), all_logits || i == n - 1, prompt});
  model_.forward(rows, logits);
  n_fed_ += n;
}

std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& ids, int64_t chunk) {
  const int64_t n = int64_t(ids.size()), V = model.info().n_vocab;
  DirectSequence seq(model, std::max<int64_t>(1, n));
  std::vector<float> out(size_t(n * V));
  chunk = chunk > 0 ? chunk : n;
  for (int64_t p0 = 0; p0 < n; p0 += chunk)
    seq.feed(ids.data() + p0, std::min(chunk, n - p0), out.data() + p0 * V, true, true);
  return out;
}

std::vector<int32_t> mtp_drafts(Model& model, const std::vector<int32_t>& ids, int64_t k, std::vector<float>* logits) {
  if (!model.has_mtp()) fail("this model has no MTP layer to draft with");
  if (ids.size() < 2) fail("MTP drafts need at least two tokens");
  DirectSequence seq(model, int64_t(ids.size()) + k);
  std::vector<float> last(static_cast<size_t>(model.info().n_vocab));
  seq.feed(ids.data(), int64_t(ids.size()) - 1, last.data(), false, true);
  return model.draft_mtp(seq.pages(), ids, k, logits);
}

}  // namespace tf
