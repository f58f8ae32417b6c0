#pragma once
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace tf::server {

// What every route handler shares: the model, the engine, the options and the metrics.
struct ServerContext {
  LoadedModel& m;
  ServerOptions opts;
  Engine engine;
  Metrics metrics;

  ServerContext(LoadedModel& model, ServerOptions o);
  // Tokenised prompt and engine request for a validated API request; refuses what cannot fit, before any token.
  EngineRequest prepare(const CompletionRequest& q) const;
  CompletionResult result_of(const CompletionRequest& q, const EngineRequest& e, const EngineResult& r,
                             const std::string& id, int64_t created) const;
  // OpenAI logprobs objects: chat {"content": [...]} or completions {"tokens", "token_logprobs", ...}.
  nlohmann::json logprobs_json(bool chat, const std::vector<TokenLogprob>& lps, size_t text_offset) const;
  // Submits to the engine; a full queue becomes a 503 with Retry-After.
  std::shared_ptr<RequestHandle> submit(const EngineRequest& e);
};

// Route handlers take the body the server read under its size limit.
void handle_completion(ServerContext& c, const std::string& body, httplib::Response& res, bool chat);
void handle_responses(ServerContext& c, const std::string& body, httplib::Response& res);
void handle_tokenize(ServerContext& c, const std::string& body, httplib::Response& res);
void handle_detokenize(ServerContext& c, const std::string& body, httplib::Response& res);

std::string random_id(const char* prefix);
int64_t unix_now();
// Writes "data: JSON\n\n" (with an "event:" line when given); false when the client has gone.
bool send_sse(httplib::DataSink& sink, const nlohmann::json& j, const char* event = nullptr);
// A request the model failed on: a 500 naming what failed (as a stream's last event, its JSON body).
ApiError engine_failure(const EngineResult& r);
nlohmann::json error_json(const ApiError& e);

}  // namespace tf::server
