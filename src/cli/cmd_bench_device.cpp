#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "base/error.h"
#include "cli/bench_device.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"

namespace tf::cli {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int32_t> random_ids(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint32_t(n_vocab));
  return ids;
}

// Weight bytes one decode step reads: every matrix once, except an untied token_embd (one row is gathered).
double decode_weight_bytes(const GgufFile& f) {
  double b = 0;
  const bool tied = f.tensor("output.weight") == nullptr;
  for (const auto& t : f.tensors())
    if (tied || t.name != "token_embd.weight") b += double(t.nbytes);
  return b;
}

double matmul_params(const GgufFile& f) {
  double p = 0;
  for (const auto& t : f.tensors())
    if (t.ne.size() == 2 && t.name != "token_embd.weight") p += double(t.n_elements());
  if (f.tensor("output.weight") == nullptr) p += double(f.tensor("token_embd.weight")->n_elements());
  return p;
}

// Attention's FLOPs a prompt of n tokens from position 0 adds: Q K^T and P V, 2 x q width each, over its n (n + 1) / 2
// causal (query, key) pairs, summed over the layers that store a separate Q product.
double attention_flops(const GgufFile& f, int64_t n) {
  double w = 0;
  for (const auto& t : f.tensors())
    if (t.ne.size() == 2 && t.name.ends_with(".attn_q.weight")) w += double(t.ne[1]);
  return 4.0 * w * double(n) * double(n + 1) / 2.0;
}

// Device and host-launch milliseconds the forwards of the last prefill took.
struct PrefillSplit {
  double device_ms = 0, launch_ms = 0;
};

// The prompt `ids` written into the lease's pages, `ubatch` rows per forward, logits of the last one only.
PrefillSplit prefill(Model& m, const KvLease& lease, const std::vector<int32_t>& ids, int64_t ubatch,
                     std::vector<float>& logits) {
  const int64_t n = int64_t(ids.size());
  PrefillSplit split;
  for (int64_t b = 0; b < n; b += ubatch) {
    std::vector<BatchRow> rows;
    for (int64_t i = b; i < std::min(n, b + ubatch); ++i)
      rows.push_back({&lease.pages, ids[size_t(i)], int32_t(i), i == n - 1, true});
    m.forward(rows, logits.data());
    split.device_ms += m.last_device_ms(), split.launch_ms += m.last_launch_ms();
  }
  return split;
}

struct Decode {
  double tok_s = 0, device_ms = 0, wall_ms = 0;
};

// Greedy one-row decode, only the argmax leaving the device as the engine asks it, after `depth` prompt tokens.
Decode decode_run(Model& m, int64_t n, bool graphs, int64_t depth = 0, int64_t ubatch = 512) {
  m.set_graphs(graphs);
  const int64_t page = 32, pages = (depth + n + page) / page + 1;
  KvCache kv(pages, page, 0);
  m.bind_kv(pages, page);
  KvLease lease = *kv.acquire({}, depth + n + 1);
  if (depth > 0) {
    std::vector<float> logits(static_cast<size_t>(m.info().n_vocab));
    prefill(m, lease, random_ids(depth, m.info().n_vocab, 11), ubatch, logits);
  }
  std::vector<RowCandidates> cand;
  int32_t tok = 1;
  double dev = 0;
  double t0 = 0;
  for (int64_t p = depth; p < depth + n; ++p) {
    if (p == depth + 2) t0 = now_s(), dev = 0;  // graph capture and first touch stay out of the figure
    std::vector<BatchRow> rows{{&lease.pages, tok, int32_t(p), true}};
    m.forward_sample(rows, {{0.0, 0, p + 1, false}}, cand);
    tok = cand[0].greedy;
    dev += m.last_device_ms();
  }
  const double wall = now_s() - t0;
  const double steps = double(n - 2);
  return {steps / wall, dev / steps, wall * 1e3 / steps};
}

// Median tok/s of reps prefills after an untimed one, as decode_run leaves out module loads and first touch; `split`
// gets the median run's device and launch time.
double prefill_run(Model& m, int64_t n, int64_t ubatch, uint32_t seed, int64_t reps, PrefillSplit& split) {
  const int64_t page = 32, pages = n / page + 2;
  KvCache kv(pages, page, 0);
  m.bind_kv(pages, page);
  KvLease lease = *kv.acquire({}, n);
  const auto ids = random_ids(n, m.info().n_vocab, seed);
  std::vector<float> logits(static_cast<size_t>(m.info().n_vocab));
  prefill(m, lease, ids, ubatch, logits);
  std::vector<std::pair<double, PrefillSplit>> tps;
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = now_s();  // the prompt and the logits row exist before the clock starts
    const PrefillSplit s = prefill(m, lease, ids, ubatch, logits);
    tps.push_back({double(n) / (now_s() - t0), s});
  }
  std::sort(tps.begin(), tps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  split = tps[tps.size() / 2].second;
  return tps[tps.size() / 2].first;
}

// Aggregate decode through the engine itself: N streams admitted together, drafts off.
double streams_run(LoadedModel& lm, int n_streams, int64_t tg) {
  EngineOptions o;
  o.parallel = n_streams;
  o.context = 256;
  o.chunk = 16;  // each prompt in one chunk, and no more rows reserved than such rounds hold
  o.prompt_cache_gib = 0;
  o.drafter = "none";
  Engine engine(*lm.model, *lm.tokenizer, o);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  const double t0 = now_s();
  for (int i = 0; i < n_streams; ++i) {
    EngineRequest r;
    r.prompt = random_ids(16, lm.model->info().n_vocab, 100 + uint32_t(i));
    r.max_tokens = tg;
    r.ignore_eos = true;
    r.allow_draft = false;
    hs.push_back(engine.submit(std::move(r)));
  }
  int64_t tokens = 0;
  for (auto& h : hs) tokens += int64_t(h->wait_result().ids.size());
  return double(tokens) / (now_s() - t0);
}

}  // namespace

int run_device_bench(LoadedModel& lm, const DeviceBenchOptions& o) {
  Model& m = *lm.model;
  const auto& info = m.info();
  const double bw = device_copy_bandwidth();
  if (!lm.file) fail("bench --backend cuda: {} is not a GGUF model", o.model);
  const double wbytes = decode_weight_bytes(*lm.file);
  std::printf("device: %s\n", lm.backend.detail.c_str());
  const std::string note = m.memory_note();  // as the prefill runs find it; a later KV pool may take it back
  if (!note.empty()) std::printf("%s\n", note.c_str());
  std::printf("model: %s (%.2fB params, %.2f GB read per decoded token from weights)\n", o.model.c_str(),
              double(info.n_params) / 1e9, wbytes / 1e9);
  std::printf("copy bandwidth: %.0f GB/s (bytes read + written)\n", bw / 1e9);
  for (int64_t pp : o.pp) {
    PrefillSplit split;
    const double tps = prefill_run(m, pp, o.ubatch, 7, o.reps, split);
    const double mm = 2.0 * matmul_params(*lm.file) * tps / 1e12, att = attention_flops(*lm.file, pp) * tps / pp / 1e12;
    std::printf(
        "pp%-5lld %10.1f tok/s  %7.2f TFLOP/s (2 x %.2fB matmul params per token; median of %lld after one "
        "untimed); %.2f TFLOP/s with causal attention's\n",
        (long long)pp, tps, mm, matmul_params(*lm.file) / 1e9, (long long)o.reps, mm + att);
    std::printf("pp%-5lld that run: %.3f ms wall, %.3f ms on the device, %.3f ms launching on the host\n",
                (long long)pp, 1e3 * double(pp) / tps, split.device_ms, split.launch_ms);
  }
  Decode g = decode_run(m, o.tg, true), ng = decode_run(m, o.tg, false);
  // KV read per token averages half the sequence over a run that starts empty.
  const double bytes = wbytes + double(info.kv_bytes_per_token) * double(o.tg) / 2;
  const double floor_tps = bw / bytes;
  std::printf("tg%-5lld %10.1f tok/s with graphs (%.1f%% of the %.1f tok/s floor), %.1f tok/s without\n",
              (long long)o.tg, g.tok_s, 100.0 * g.tok_s / floor_tps, floor_tps, ng.tok_s);
  std::printf(
      "per token with graphs: %.3f ms wall = %.3f ms on the device + %.3f ms host and launch; without: %.3f ms "
      "wall, %.3f ms device\n",
      g.wall_ms, g.device_ms, g.wall_ms - g.device_ms, ng.wall_ms, ng.device_ms);
  std::printf("kernels alone reach %.1f%% of the floor\n", 100.0 * (1e3 / g.device_ms) / floor_tps);
  for (int64_t depth : o.depths) {
    const Decode d = decode_run(m, o.tg, true, depth, o.ubatch);
    const double b = wbytes + double(info.kv_bytes_per_token) * (double(depth) + double(o.tg) / 2);
    std::printf("tg%-5lld at depth %-6lld %10.1f tok/s with graphs (%.1f%% of the %.1f tok/s floor), %.3f ms device\n",
                (long long)o.tg, (long long)depth, d.tok_s, 100.0 * d.tok_s / (bw / b), bw / b, d.device_ms);
  }
  for (int s : o.streams)
    std::printf("streams %-4d %10.1f tok/s aggregate (engine rounds, %lld tokens each)\n", s, streams_run(lm, s, o.tg),
                (long long)o.tg);
  if (m.memory_note() != note) std::printf("after the runs: %s\n", m.memory_note().c_str());
  return 0;
}

}  // namespace tf::cli
