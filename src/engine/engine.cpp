#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/cpu/ops.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/stop_strings.h"
#include "tokenizer/detokenizer.h"

namespace tf {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

TokenLogprob logprob_of(const LogitRow& row, int64_t n_vocab, int32_t token, int top) {
  if (const RowCandidates* c = row.cand) {
    float l = token == c->gumbel ? c->gumbel_logit : 0.0f;
    for (auto& [logit, id] : c->top)
      if (id == token) l = logit;
    TokenLogprob lp{token, float(double(l) - c->lse), {}};
    for (int i = 0; i < top && i < int(c->top.size()); ++i)
      lp.top.emplace_back(c->top[size_t(i)].second, float(double(c->top[size_t(i)].first) - c->lse));
    return lp;
  }
  const float* logits = row.full;
  double mx = -INFINITY, sum = 0;
  for (int64_t v = 0; v < n_vocab; ++v) mx = std::max(mx, double(logits[v]));
  for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob lp{token, float(double(logits[token]) - lse), {}};
  if (top > 0)
    for (int32_t id : cpu::topk(logits, n_vocab, top)) lp.top.emplace_back(id, float(double(logits[id]) - lse));
  return lp;
}

}  // namespace

// One admitted request: its KV lease, its tokens so far and its streaming state.
struct Engine::Seq {
  EngineRequest req;
  std::shared_ptr<RequestHandle> handle;
  KvLease lease;
  std::vector<int32_t> tokens;  // prompt then reply
  int64_t n_prompt = 0;
  int64_t n_fed = 0;  // positions whose KV is written
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopMatcher> stops;
  EngineResult result;
  double submitted = 0, last_token_time = 0;
  bool done = false;
};

Engine::Engine(Model& model, const Tokenizer& tok, EngineOptions opts)
    : model_(model), tok_(tok), opts_(std::move(opts)), drafter_(make_drafter(opts_.drafter, &model)) {
  TF_CHECK(opts_.parallel > 0 && opts_.context > 1 && opts_.chunk > 0, "bad engine options");
  const int64_t page_floats = opts_.page_size * model_.kv_floats_per_token();
  const int64_t lane_pages = (opts_.context + opts_.page_size - 1) / opts_.page_size;
  const int64_t cache_pages = int64_t(opts_.prompt_cache_gib * double(int64_t(1) << 30) / double(page_floats * 4));
  // Every lane can always reserve a whole context, so admission never waits on memory held by the prefix cache.
  const int64_t n_pages = int64_t(opts_.parallel) * lane_pages + std::max<int64_t>(0, cache_pages);
  const auto& info = model_.info();
  kv_ = std::make_unique<KvCache>(n_pages, opts_.page_size,
                                  uint64_t(info.n_params) * 0x9E3779B97F4A7C15ull ^ uint64_t(info.n_vocab));
  model_.bind_kv(n_pages, opts_.page_size);
  // A round holds at most a prompt chunk (no longer than the context), or a decode token and its drafts, per sequence.
  const int64_t per_decode = 1 + (drafter_ ? opts_.draft_max : 0);
  model_.reserve_rounds(int64_t(opts_.parallel) * std::max(std::min(opts_.chunk, opts_.context), per_decode),
                        int64_t(opts_.parallel) * per_decode, opts_.context);
  logits_.resize(size_t(model_.info().n_vocab));
  stats_.pages_total = n_pages;
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(EngineRequest req) {
  TF_CHECK(!req.prompt.empty() && int64_t(req.prompt.size()) + req.max_tokens <= opts_.context,
           "request not checked against the context");
  auto h = std::make_shared<RequestHandle>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (int64_t(waiting_.size()) >= opts_.max_queue)
      throw QueueFull(
          fmt::format("the server is full: {} requests running and {} waiting (the queue limit); retry "
                      "shortly",
                      running_.size(), waiting_.size()));
    waiting_.push_back({std::move(req), h, now_s()});
  }
  cv_.notify_all();
  return h;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

namespace {
EngineResult cancelled_result() {
  EngineResult r;
  r.finish_reason = "cancelled";
  return r;
}
}  // namespace

void Engine::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) break;
    }
    try {
      round();
    } catch (const std::exception& e) {
      // A failed forward is a bug; end the affected requests rather than the server.
      log::error("lane round failed: {}", e.what());
      for (auto& s : running_) {
        s->result.error = e.what();
        finish(*s, "error");
      }
      std::lock_guard<std::mutex> lk(mu_);
      running_.clear();
      stats_.running = 0;
    }
  }
  for (auto& s : running_) finish(*s, "cancelled");
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& w : waiting_) w.handle->finish(cancelled_result());
}

void Engine::admit() {
  if (clear_cache_.exchange(false)) kv_->clear_cache();
  std::lock_guard<std::mutex> lk(mu_);
  while (int(running_.size()) < opts_.parallel && !waiting_.empty()) {
    Waiting& w = waiting_.front();
    if (w.handle->cancelled()) {
      w.handle->finish(cancelled_result());
      waiting_.pop_front();
      continue;
    }
    auto lease = kv_->acquire(w.req.prompt, int64_t(w.req.prompt.size()) + w.req.max_tokens);
    if (!lease) break;  // arrival order: the head waits for pages
    auto s = std::make_unique<Seq>();
    s->req = std::move(w.req);
    s->handle = std::move(w.handle);
    s->lease = std::move(*lease);
    s->tokens = s->req.prompt;
    s->n_prompt = int64_t(s->tokens.size());
    s->n_fed = s->lease.cached_tokens;
    s->detok = std::make_unique<IncrementalDetokenizer>(tok_);
    s->stops = std::make_unique<StopMatcher>(s->req.stop);
    s->submitted = w.submitted;
    s->result.prompt_tokens = s->n_prompt;
    s->result.cached_tokens = s->lease.cached_tokens;
    s->result.queue_s = now_s() - w.submitted;
    stats_.prompt_tokens += s->n_prompt;
    stats_.cache_query_tokens += s->n_prompt;
    stats_.cache_hit_tokens += s->lease.cached_tokens;
    running_.push_back(std::move(s));
    waiting_.pop_front();
  }
  stats_.running = int64_t(running_.size());
  stats_.waiting = int64_t(waiting_.size());
}

void Engine::round() {
  admit();
  struct Plan {
    Seq* s;
    int64_t first_logit, n_logits;
    std::vector<int32_t> drafts;
    bool prefill;
  };
  std::vector<Plan> plans;
  std::vector<BatchRow> rows;
  int64_t n_logits = 0;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.handle->cancelled()) {
      finish(s, "cancelled");
      continue;
    }
    Plan p{&s, n_logits, 0, {}, s.n_fed < s.n_prompt};
    if (p.prefill) {
      const int64_t end = std::min(s.n_prompt, s.n_fed + opts_.chunk);
      for (int64_t pos = s.n_fed; pos < end; ++pos)
        rows.push_back({&s.lease.pages, s.tokens[size_t(pos)], int32_t(pos), pos == s.n_prompt - 1, true});
      p.n_logits = end == s.n_prompt ? 1 : 0;
    } else {
      const int64_t pos = int64_t(s.tokens.size()) - 1;
      const int64_t left = s.req.max_tokens - int64_t(s.result.ids.size());
      if (drafter_ && s.req.allow_draft && left > 1)
        p.drafts = drafter_->propose({&s.tokens, std::min(opts_.draft_max, left - 1), &s.lease.pages});
      rows.push_back({&s.lease.pages, s.tokens.back(), int32_t(pos), true});
      for (size_t i = 0; i < p.drafts.size(); ++i)
        rows.push_back({&s.lease.pages, p.drafts[i], int32_t(pos + 1 + int64_t(i)), true});
      p.n_logits = 1 + int64_t(p.drafts.size());
    }
    n_logits += p.n_logits;
    plans.push_back(std::move(p));
  }
  if (!rows.empty()) {
    const int64_t V = model_.info().n_vocab;
    const bool device = model_.device_sampling();
    if (device) {
      std::vector<RowSampling> sp;
      for (const Plan& p : plans) {
        const SamplingParams& q = p.s->req.sampling;
        const int64_t first = p.prefill ? p.s->n_prompt : int64_t(p.s->tokens.size());
        // A greedy row without logprobs reads its argmax alone, so the device makes nothing else for it.
        const bool cand = q.temperature > 0 || p.s->req.top_logprobs >= 0;
        for (int64_t i = 0; i < p.n_logits; ++i) sp.push_back({q.temperature, q.seed, first + i, cand});
      }
      model_.forward_sample(rows, sp, cands_);
    } else {
      logits_.resize(size_t(std::max<int64_t>(1, n_logits) * V));
      model_.forward(rows, logits_.data());
      // A NaN has no place in any order and a row of -inf no token to give: the round fails as the device's does.
      for (int64_t k = 0; k < n_logits; ++k) {
        const float* row = &logits_[size_t(k * V)];
        if (std::any_of(row, row + V, [](float x) { return std::isnan(x); })) fail("logits row {} holds NaN", k);
        if (std::all_of(row, row + V, [](float x) { return x == -INFINITY; }))
          fail("logits row {} has no finite value", k);
      }
    }
    // A device row whose filters reach past its candidates is sampled from its full logits, fetched on demand.
    auto row_at = [&](int64_t k, const SamplingParams& q) {
      if (!device) return LogitRow{logits_.data() + k * V, nullptr};
      if (candidates_suffice(cands_[size_t(k)], q)) return LogitRow{nullptr, &cands_[size_t(k)]};
      logits_.resize(size_t(V));
      model_.last_logits_row(k, logits_.data());
      return LogitRow{logits_.data(), nullptr};
    };
    for (Plan& p : plans) {
      Seq& s = *p.s;
      if (p.prefill) {
        s.n_fed = std::min(s.n_prompt, s.n_fed + opts_.chunk);
        if (p.n_logits) {
          const LogitRow lr = row_at(p.first_logit, s.req.sampling);
          emit(s, sample_row(lr, V, s.req.sampling, s.n_prompt), lr);
        }
        continue;
      }
      // Verify: row i predicts position pos+1+i; a draft counts only when it equals what sampling picks there.
      const int64_t pos = int64_t(s.tokens.size()) - 1;
      s.n_fed = pos + 1;
      s.result.draft_tokens += int64_t(p.drafts.size());
      for (int64_t i = 0; i < p.n_logits && !s.done; ++i) {
        const LogitRow lr = row_at(p.first_logit + i, s.req.sampling);
        int32_t t = sample_row(lr, V, s.req.sampling, pos + 1 + i);
        // Counted before emit, which may finish the sequence and hand its result away.
        const bool accepted = i < int64_t(p.drafts.size()) && t == p.drafts[size_t(i)];
        if (accepted) s.result.accepted_tokens += 1, s.n_fed = pos + 2 + i;
        emit(s, t, lr);
        if (!accepted) break;
      }
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_.rounds += 1;
  std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
  stats_.running = int64_t(running_.size());
  stats_.pages_used = kv_->pages_used();
  stats_.pages_cached = kv_->pages_cached();
}

void Engine::emit(Seq& s, int32_t token, const LogitRow& logits) {
  const double t = now_s();
  if (s.result.ids.empty())
    s.result.ttft_s = t - s.submitted;
  else
    s.result.token_gaps_s.push_back(t - s.last_token_time);
  s.last_token_time = t;
  s.result.ids.push_back(token);
  s.tokens.push_back(token);
  TokenLogprob lp;
  if (s.req.top_logprobs >= 0) {
    lp = logprob_of(logits, model_.info().n_vocab, token, s.req.top_logprobs);
    s.result.logprobs.push_back(lp);
  }
  const TokenLogprob* lpp = s.req.top_logprobs >= 0 ? &lp : nullptr;
  if (!s.req.ignore_eos && tok_.is_end_of_generation(token)) {
    s.handle->push({}, lpp);
    return finish(s, "stop");
  }
  std::string text = s.stops->push(s.detok->push(token));
  s.result.text += text;
  s.handle->push(text, lpp);
  if (s.stops->stopped()) return finish(s, "stop");
  if (int64_t(s.result.ids.size()) >= s.req.max_tokens || int64_t(s.tokens.size()) >= opts_.context)
    return finish(s, "length");
}

void Engine::finish(Seq& s, const std::string& reason) {
  if (s.done) return;
  s.done = true;
  if (reason != "cancelled" && reason != "error" && !s.stops->stopped()) {
    std::string tail = s.stops->push(s.detok->flush());
    if (!s.stops->stopped()) tail += s.stops->flush();
    s.result.text += tail;
    s.handle->push(tail, nullptr);
  }
  s.result.finish_reason = reason == "error" ? reason : s.stops->stopped() ? "stop" : reason;
  s.result.total_s = now_s() - s.submitted;
  // Where prompt rows take their own arithmetic, the KV of replies (decode rows) is not a prompt's: keep it out.
  kv_->release(s.lease, s.tokens, model_.prompt_arithmetic_differs() ? std::min(s.n_fed, s.n_prompt) : s.n_fed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.generated_tokens += int64_t(s.result.ids.size());
    stats_.draft_tokens += s.result.draft_tokens;
    stats_.accepted_tokens += s.result.accepted_tokens;
  }
  s.handle->finish(std::move(s.result));
}

}  // namespace tf
