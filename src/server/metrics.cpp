#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tf::server {

using namespace prometheus;

struct Metrics::Impl {
  std::mutex mu;
  std::shared_ptr<Registry> reg = std::make_shared<Registry>();
  Family<Counter>& requests = BuildCounter().Name("tensorfold_requests_total").Help("HTTP requests by route and status").Register(*reg);
  Histogram& ttft = BuildHistogram().Name("tensorfold_time_to_first_token_seconds").Help("time to the first reply token")
                        .Register(*reg).Add({}, Histogram::BucketBoundaries{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  Histogram& itl = BuildHistogram().Name("tensorfold_inter_token_seconds").Help("time between reply tokens")
                       .Register(*reg).Add({}, Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1});
  Gauge& running = BuildGauge().Name("tensorfold_requests_running").Help("sequences in lanes").Register(*reg).Add({});
  Gauge& waiting = BuildGauge().Name("tensorfold_requests_waiting").Help("queued requests").Register(*reg).Add({});
  Gauge& pages_used = BuildGauge().Name("tensorfold_kv_pages_used").Help("KV pages held by sequences").Register(*reg).Add({});
  Gauge& pages_total = BuildGauge().Name("tensorfold_kv_pages_total").Help("KV pages in the pool").Register(*reg).Add({});
  Gauge& pages_cached = BuildGauge().Name("tensorfold_kv_pages_cached").Help("KV pages in the prefix cache").Register(*reg).Add({});
  Counter& prompt = BuildCounter().Name("tensorfold_prompt_tokens_total").Help("prompt tokens admitted").Register(*reg).Add({});
  Counter& gen = BuildCounter().Name("tensorfold_generation_tokens_total").Help("reply tokens").Register(*reg).Add({});
  Counter& hit = BuildCounter().Name("tensorfold_prefix_cache_hit_tokens_total").Help("prompt tokens reused").Register(*reg).Add({});
  Counter& query = BuildCounter().Name("tensorfold_prefix_cache_query_tokens_total").Help("prompt tokens looked up").Register(*reg).Add({});
  Counter& draft = BuildCounter().Name("tensorfold_draft_tokens_total").Help("drafted tokens verified").Register(*reg).Add({});
  Counter& accepted = BuildCounter().Name("tensorfold_draft_accepted_tokens_total").Help("drafted tokens kept").Register(*reg).Add({});
  EngineStats seen;  // engine totals already added to the counters

  static void advance(Counter& c, int64_t now, int64_t& before) {
    if (now > before) c.Increment(double(now - before));
    before = now;
  }
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

void Metrics::request_done(const std::string& route, int code) {
  impl_->requests.Add({{"route", route}, {"code", std::to_string(code)}}).Increment();
}

void Metrics::observe(const EngineResult& r) {
  if (!r.ids.empty()) impl_->ttft.Observe(r.ttft_s);
  for (double g : r.token_gaps_s) impl_->itl.Observe(g);
}

std::string Metrics::render(const EngineStats& s) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  Impl& m = *impl_;
  m.running.Set(double(s.running));
  m.waiting.Set(double(s.waiting));
  m.pages_used.Set(double(s.pages_used));
  m.pages_total.Set(double(s.pages_total));
  m.pages_cached.Set(double(s.pages_cached));
  Impl::advance(m.prompt, s.prompt_tokens, m.seen.prompt_tokens);
  Impl::advance(m.gen, s.generated_tokens, m.seen.generated_tokens);
  Impl::advance(m.hit, s.cache_hit_tokens, m.seen.cache_hit_tokens);
  Impl::advance(m.query, s.cache_query_tokens, m.seen.cache_query_tokens);
  Impl::advance(m.draft, s.draft_tokens, m.seen.draft_tokens);
  Impl::advance(m.accepted, s.accepted_tokens, m.seen.accepted_tokens);
  return TextSerializer().Serialize(m.reg->Collect());
}

}  // namespace tf::server
