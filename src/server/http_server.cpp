#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <random>

#include "base/error.h"
#include "base/log.h"
#include "server/openai_protocol.h"

namespace tf::server {
namespace {

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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  LoadedModel& m;
  ServerOptions opts;
  httplib::Server svr;
  std::mutex gen_mu;  // one generation at a time: later requests wait their turn
  Generator gen;

  Impl(LoadedModel& model, ServerOptions o)
      : m(model), opts(std::move(o)), gen(*m.model, *m.tokenizer, opts.context) {}

  // Tokenised prompt and engine request for a validated API request; refuses what cannot fit, before any token.
  GenerateRequest prepare(const CompletionRequest& q) {
    if (!q.model.empty() && q.model != opts.name)
      throw ApiError(404, fmt::format("model '{}' does not exist; this server serves '{}'", q.model, opts.name), "model",
                     "invalid_request_error", "model_not_found");
    GenerateRequest g;
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
    const int64_t n = int64_t(g.prompt.size()), ctx = gen.context();
    const char* field = q.chat ? "messages" : "prompt";
    if (n == 0) throw ApiError(400, fmt::format("'{}' gives an empty prompt", field), field);
    if (n >= ctx)
      throw ApiError(400, fmt::format("the prompt has {} tokens but the context holds {} (at least one token must be "
                                      "left for the reply)", n, ctx), field, "invalid_request_error",
                     "context_length_exceeded");
    if (q.max_tokens && n + *q.max_tokens > ctx)
      throw ApiError(400, fmt::format("the prompt has {} tokens and max_tokens is {}, together more than the context "
                                      "of {}; at most {} tokens can be generated", n, *q.max_tokens, ctx, ctx - n),
                     "max_tokens", "invalid_request_error", "context_length_exceeded");
    g.max_tokens = q.max_tokens.value_or(std::min(opts.max_tokens, ctx - n));
    g.sampling.temperature = q.temperature.value_or(opts.temperature);
    g.sampling.top_p = q.top_p.value_or(opts.top_p);
    g.sampling.top_k = q.top_k.value_or(opts.top_k);
    g.sampling.min_p = q.min_p.value_or(opts.min_p);
    g.sampling.seed = q.seed ? *q.seed : sampler::seed_from_prompt(g.prompt, opts.seed_salt);
    g.stop = q.stop;
    g.ignore_eos = q.ignore_eos;
    return g;
  }

  CompletionResult result_of(const CompletionRequest& q, const GenerateRequest& g, const GenerateResult& r,
                             const std::string& id, int64_t created) {
    CompletionResult c;
    c.id = id;
    c.model = opts.name;
    c.created = created;
    c.text = r.text;
    c.finish_reason = r.finish_reason;
    c.ids = r.ids;
    c.prompt_tokens = int64_t(g.prompt.size());
    c.token_sha = token_sha(r.ids);
    return c;
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    CompletionRequest q = parse_completion_request(req.body, chat);
    GenerateRequest g = prepare(q);
    const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = unix_now();
    if (!q.stream) {
      std::lock_guard<std::mutex> lk(gen_mu);
      GenerateResult r = gen.generate(g);
      res.set_content(completion_response(q, result_of(q, g, r, id, created)).dump(), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, q, g, id, created](size_t, httplib::DataSink& sink) {
      auto send = [&sink](const json& j) {
        std::string s = "data: " + j.dump() + "\n\n";
        return sink.write(s.data(), s.size());
      };
      CompletionResult head;
      head.id = id;
      head.model = opts.name;
      head.created = created;
      std::lock_guard<std::mutex> lk(gen_mu);
      bool alive = !q.chat || send(stream_chunk(q, head, "", true, ""));
      GenerateResult r;
      if (alive) r = gen.generate(g, [&](const std::string& d) { return alive = send(stream_chunk(q, head, d, false, "")); });
      if (alive) {
        CompletionResult c = result_of(q, g, r, id, created);
        json fin = stream_chunk(q, c, "", false, c.finish_reason);
        if (q.include_usage) {
          send(fin);
          json u = stream_chunk(q, c, "", false, "");
          u["choices"] = json::array();
          u["usage"] = usage_json(c);
          u["tensorfold"] = tensorfold_json(c, q.return_token_ids);
          send(u);
        } else {
          fin["tensorfold"] = tensorfold_json(c, q.return_token_ids);
          send(fin);
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
      }
      sink.done();
      return true;
    });
  }

  void routes() {
    svr.new_task_queue = [n = opts.http_threads] { return new httplib::ThreadPool(size_t(n)); };
    svr.set_payload_max_length(size_t(32) << 20);
    svr.set_keep_alive_max_count(1000);
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json d = {{"id", opts.name}, {"object", "model"}, {"created", 0}, {"owned_by", "tensorfold"},
                {"max_model_len", gen.context()}};
      res.set_content(json{{"object", "list"}, {"data", json::array({d})}}.dump(), "application/json");
    });
    auto guard = [](auto fn) {
      return [fn](const httplib::Request& req, httplib::Response& res) {
        try {
          fn(req, res);
        } catch (const ApiError& e) {
          send_error(res, e);
        } catch (const Error& e) {
          send_error(res, ApiError(400, e.what(), e.param()));
        }
      };
    };
    svr.Post("/v1/chat/completions", guard([this](auto& q, auto& r) { completion(q, r, true); }));
    svr.Post("/v1/completions", guard([this](auto& q, auto& r) { completion(q, r, false); }));
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404)
        res.set_content(error_body(404, fmt::format("no route {} {}", req.method, req.path), "", "not_found_error", ""),
                        "application/json");
      else if (res.status == 413)
        res.set_content(error_body(413, "request body too large", "", "invalid_request_error", "body_too_large"),
                        "application/json");
      else
        res.set_content(error_body(res.status, "request failed", "", "invalid_request_error", ""), "application/json");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      log::error("request failed: {}", what);
      res.status = 500;
      res.set_content(error_body(500, what, "", "server_error", ""), "application/json");
    });
  }
};

HttpServer::HttpServer(LoadedModel& model, ServerOptions opts) : impl_(std::make_unique<Impl>(model, std::move(opts))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::run() {
  if (!impl_->svr.bind_to_port(impl_->opts.host, impl_->opts.port))
    fail("cannot listen on {}:{} (in use, or not an address of this machine)", impl_->opts.host, impl_->opts.port);
  log::info("serving '{}' on http://{}:{}/v1", impl_->opts.name, impl_->opts.host, impl_->opts.port);
  impl_->svr.listen_after_bind();
}

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace tf::server
