#include <chrono>
#include <random>

#include "base/error.h"
#include "server/context.h"
#include "tokenizer/unicode.h"

namespace tf::server {

using json = nlohmann::json;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  return fmt::format("{}{:016x}", prefix, rng());
}

bool send_sse(httplib::DataSink& sink, const json& j, const char* event) {
  std::string s = event ? fmt::format("event: {}\n", event) : std::string();
  s += "data: " + j.dump() + "\n\n";
  return sink.write(s.data(), s.size());
}

ServerContext::ServerContext(LoadedModel& model, ServerOptions o)
    : m(model), opts(std::move(o)), engine(*m.model, *m.tokenizer, opts.engine) {}

EngineRequest ServerContext::prepare(const CompletionRequest& q) const {
  if (!q.model.empty() && q.model != opts.name)
    throw ApiError(404, fmt::format("model '{}' does not exist; this server serves '{}'", q.model, opts.name), "model",
                   "invalid_request_error", "model_not_found");
  EngineRequest g;
  if (q.chat) {
    if (!m.chat) throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
    g.prompt = m.tokenizer->encode(m.chat->render(q.messages, true));
  } else if (q.prompt_text) {
    g.prompt = m.tokenizer->encode(*q.prompt_text);
  } else {
    for (auto id : q.prompt_ids)
      if (id >= m.tokenizer->n_vocab())
        throw ApiError(400, fmt::format("'prompt' token id {} is outside the vocabulary of {}", id,
                                        m.tokenizer->n_vocab()), "prompt");
    g.prompt = q.prompt_ids;
  }
  const int64_t n = int64_t(g.prompt.size()), ctx = engine.context();
  const char* field = q.chat ? "messages" : "prompt";
  if (n == 0) throw ApiError(400, fmt::format("'{}' gives an empty prompt", field), field);
  if (n >= ctx)
    throw ApiError(400, fmt::format("the prompt has {} tokens but the context holds {} (at least one token must be "
                                    "left for the reply)", n, ctx), field, "invalid_request_error",
                   "context_length_exceeded");
  if (q.max_tokens && n + *q.max_tokens > ctx)
    throw ApiError(400, fmt::format("the prompt has {} tokens and {} is {}, together more than the context "
                                    "of {}; at most {} tokens can be generated", n, q.max_tokens_field, *q.max_tokens,
                                    ctx, ctx - n),
                   q.max_tokens_field, "invalid_request_error", "context_length_exceeded");
  g.max_tokens = q.max_tokens.value_or(std::min(opts.max_tokens, ctx - n));
  g.sampling.temperature = q.temperature.value_or(opts.temperature);
  g.sampling.top_p = q.top_p.value_or(opts.top_p);
  g.sampling.top_k = q.top_k.value_or(opts.top_k);
  g.sampling.min_p = q.min_p.value_or(opts.min_p);
  g.sampling.seed = q.seed ? *q.seed : sampler::seed_from_prompt(g.prompt, opts.seed_salt);
  g.stop = q.stop;
  g.ignore_eos = q.ignore_eos;
  g.allow_draft = q.draft;
  g.top_logprobs = q.top_logprobs;
  return g;
}

ApiError engine_failure(const EngineResult& r) {
  return ApiError(500, "the model failed while generating this reply: " + r.error, "", "server_error", "engine_error");
}
json error_json(const ApiError& e) { return json::parse(e.body()); }

std::shared_ptr<RequestHandle> ServerContext::submit(const EngineRequest& e) {
  try {
    return engine.submit(e);
  } catch (const QueueFull& full) {
    throw ApiError(503, full.what(), "", "server_busy", "queue_full");
  }
}

CompletionResult ServerContext::result_of(const CompletionRequest& q, const EngineRequest& e, const EngineResult& r,
                                          const std::string& id, int64_t created) const {
  CompletionResult c;
  c.id = id;
  c.model = opts.name;
  c.created = created;
  c.text = r.text;
  c.finish_reason = r.finish_reason == "cancelled" ? "stop" : r.finish_reason;
  c.ids = r.ids;
  c.prompt_tokens = int64_t(e.prompt.size());
  c.cached_tokens = r.cached_tokens;
  c.draft_tokens = r.draft_tokens;
  c.accepted_tokens = r.accepted_tokens;
  c.token_sha = token_sha(r.ids);
  if (q.top_logprobs >= 0) c.logprobs = logprobs_json(q.chat, r.logprobs, 0);
  return c;
}

json ServerContext::logprobs_json(bool chat, const std::vector<TokenLogprob>& lps, size_t text_offset) const {
  auto text = [&](int32_t id) { return unicode::sanitize_utf8(m.tokenizer->token_bytes(id, false)); };
  auto bytes = [&](int32_t id) {
    json b = json::array();
    for (unsigned char ch : m.tokenizer->token_bytes(id, false)) b.push_back(int(ch));
    return b;
  };
  if (chat) {
    json content = json::array();
    for (auto& lp : lps) {
      json top = json::array();
      for (auto& [id, v] : lp.top) top.push_back({{"token", text(id)}, {"logprob", v}, {"bytes", bytes(id)}});
      content.push_back({{"token", text(lp.id)}, {"logprob", lp.logprob}, {"bytes", bytes(lp.id)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (auto& lp : lps) {
    tokens.push_back(text(lp.id));
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (auto& [id, v] : lp.top) top[text(id)] = v;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += m.tokenizer->token_bytes(lp.id, false).size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

void handle_completion(ServerContext& c, const std::string& body, httplib::Response& res, bool chat) {
  CompletionRequest q = parse_completion_request(body, chat);
  EngineRequest e = c.prepare(q);
  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = unix_now();
  auto h = c.submit(e);
  if (!q.stream) {
    const EngineResult& r = h->wait_result();
    c.metrics.observe(r);
    if (r.finish_reason == "error") throw engine_failure(r);
    res.set_content(completion_response(q, c.result_of(q, e, r, id, created)).dump(), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [&c, q, e, h, id, created](size_t, httplib::DataSink& sink) {
    CompletionResult head;
    head.id = id;
    head.model = c.opts.name;
    head.created = created;
    bool alive = !q.chat || send_sse(sink, stream_chunk(q, head, "", true, ""));
    std::string text;
    std::vector<TokenLogprob> lps;
    size_t offset = 0;
    while (alive && h->wait_next(text, lps)) {
      if (text.empty() && lps.empty()) continue;
      CompletionResult piece = head;
      if (q.top_logprobs >= 0) piece.logprobs = c.logprobs_json(q.chat, lps, offset);
      for (auto& lp : lps) offset += c.m.tokenizer->token_bytes(lp.id, false).size();
      alive = send_sse(sink, stream_chunk(q, piece, text, false, ""));
      text.clear();
      lps.clear();
    }
    if (!alive) {
      h->cancel();  // the client went away: its lane frees at the next round
      return false;
    }
    const EngineResult& r = h->wait_result();
    c.metrics.observe(r);
    if (r.finish_reason == "error") {  // the reply so far stands; the stream ends with the error, not a finish
      send_sse(sink, error_json(engine_failure(r)));
      sink.done();
      return true;
    }
    CompletionResult fin = c.result_of(q, e, r, id, created);
    fin.logprobs = nullptr;
    json last = stream_chunk(q, fin, "", false, fin.finish_reason);
    if (q.include_usage) {
      send_sse(sink, last);
      last = stream_chunk(q, fin, "", false, "");
      last["choices"] = json::array();
      last["usage"] = usage_json(fin);
    }
    last["tensorfold"] = tensorfold_json(fin, q.return_token_ids);
    send_sse(sink, last);
    const std::string done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    return true;
  });
}

}  // namespace tf::server
