#include "engine/drafter.h"

#include "base/error.h"
#include "model/model.h"

namespace tf {

std::vector<int32_t> ContextDrafter::propose(const DraftInput& in) {
  const auto& t = *in.tokens;
  const int64_t n = int64_t(t.size());
  if (in.max_tokens <= 0) return {};
  for (int64_t g = max_ngram_; g >= min_ngram_; --g) {
    if (n < g + 1) continue;
    // Most recent earlier start i with t[i, i+g) == t[n-g, n) and at least one token after it.
    for (int64_t i = n - g - 1; i >= 0; --i) {
      if (!std::equal(t.begin() + i, t.begin() + i + g, t.end() - g)) continue;
      int64_t from = i + g, to = std::min(n, from + in.max_tokens);
      return std::vector<int32_t>(t.begin() + from, t.begin() + to);
    }
  }
  return {};
}

std::vector<int32_t> MtpDrafter::propose(const DraftInput& in) {
  if (!in.pages || in.max_tokens <= 0) return {};
  return model_.draft_mtp(*in.pages, *in.tokens, in.max_tokens, nullptr);
}

std::unique_ptr<Drafter> make_drafter(const std::string& name, Model* model) {
  if (name == "none") return nullptr;
  if (name == "auto" || name == "ctx") return std::make_unique<ContextDrafter>();
  if (name == "mtp" && model && model->has_mtp()) return std::make_unique<MtpDrafter>(*model);
  if (name == "mtp" || name == "dspark") fail("drafter '{}' needs a model that ships one (not this checkpoint)", name);
  fail("unknown drafter '{}' (auto, none, ctx, mtp)", name);
}

}  // namespace tf
