#include "engine/generator.h"

#include <chrono>

#include "base/error.h"
#include "tokenizer/detokenizer.h"

namespace tf {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Generator::Generator(Model& model, const Tokenizer& tok, int64_t n_ctx, int64_t prefill_chunk)
    : model_(model), tok_(tok), n_ctx_(n_ctx), chunk_(std::max<int64_t>(1, prefill_chunk)) {
  seq_ = model_.new_sequence(n_ctx_);
  logits_.resize(size_t(model_.info().n_vocab));
}

std::vector<float> Generator::prompt_logits(const std::vector<int32_t>& ids, int64_t chunk) {
  const int64_t n = int64_t(ids.size()), V = model_.info().n_vocab;
  if (n > n_ctx_) fail("{} tokens do not fit the context of {}", n, n_ctx_);
  std::vector<float> out(size_t(n * V));
  chunk = chunk > 0 ? chunk : n;
  for (int64_t p0 = 0; p0 < n; p0 += chunk) {
    std::vector<BatchRow> rows;
    for (int64_t p = p0; p < std::min(n, p0 + chunk); ++p) rows.push_back({seq_.get(), ids[p], int32_t(p), true});
    model_.forward(rows, out.data() + p0 * V);
  }
  return out;
}

GenerateResult Generator::generate(const GenerateRequest& req, const DeltaFn& on_delta) {
  const int64_t n = int64_t(req.prompt.size()), V = model_.info().n_vocab;
  if (n == 0) fail("the prompt is empty");
  if (n >= n_ctx_) fail("the prompt has {} tokens but the context holds {}", n, n_ctx_);
  GenerateResult res;
  double t0 = now_s();
  for (int64_t p0 = 0; p0 < n; p0 += chunk_) {
    std::vector<BatchRow> rows;
    int64_t p1 = std::min(n, p0 + chunk_);
    for (int64_t p = p0; p < p1; ++p) rows.push_back({seq_.get(), req.prompt[p], int32_t(p), p == n - 1});
    model_.forward(rows, logits_.data());
  }
  double t1 = now_s();
  res.prompt_seconds = t1 - t0;
  IncrementalDetokenizer detok(tok_);
  StopMatcher stops(req.stop);
  bool cancelled = false;
  auto emit = [&](const std::string& s) {
    if (s.empty() || cancelled) return;
    res.text += s;
    if (on_delta && !on_delta(s)) cancelled = true;
  };
  int64_t pos = n;
  res.finish_reason = "length";
  while (int64_t(res.ids.size()) < req.max_tokens && !cancelled) {
    int32_t id = sample_token(logits_.data(), V, req.sampling, pos);
    res.ids.push_back(id);
    if (!req.ignore_eos && tok_.is_end_of_generation(id)) {
      res.finish_reason = "stop";
      break;
    }
    emit(stops.push(detok.push(id)));
    if (stops.stopped()) {
      res.finish_reason = "stop";
      break;
    }
    if (pos + 1 >= n_ctx_ || int64_t(res.ids.size()) >= req.max_tokens) break;
    std::vector<BatchRow> row{{seq_.get(), id, int32_t(pos), true}};
    model_.forward(row, logits_.data());
    ++pos;
  }
  if (!stops.stopped()) emit(stops.push(detok.flush()) + stops.flush());
  res.decode_seconds = now_s() - t1;
  return res;
}

}  // namespace tf
