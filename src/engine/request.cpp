#include "engine/request.h"

namespace tf {

bool RequestHandle::wait_next(std::string& text, std::vector<TokenLogprob>& lps) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return finished_ || !text_.empty() || !lps_.empty(); });
  bool had = !text_.empty() || !lps_.empty();
  text += text_;
  text_.clear();
  lps.insert(lps.end(), lps_.begin(), lps_.end());
  lps_.clear();
  return had || !finished_;
}

const EngineResult& RequestHandle::wait_result() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return finished_; });
  return result_;
}

void RequestHandle::push(const std::string& text, const TokenLogprob* lp) {
  if (text.empty() && !lp) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    text_ += text;
    if (lp) lps_.push_back(*lp);
  }
  cv_.notify_all();
}

void RequestHandle::finish(EngineResult r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    result_ = std::move(r);
    finished_ = true;
  }
  cv_.notify_all();
}

}  // namespace tf
