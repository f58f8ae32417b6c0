#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "tokenizer/chat_format.h"

namespace tf::server {

// A validated generation request from /v1/chat/completions or /v1/completions.
struct CompletionRequest {
  bool chat = true;
  std::string model;
  std::vector<ChatMessage> messages;       // chat
  std::optional<std::string> prompt_text;  // completions
  std::vector<int32_t> prompt_ids;         // completions given as ids
  std::optional<int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  // the request's own name for it, for errors
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, ignore_eos = false, return_token_ids = false;
  bool draft = true;
  int top_logprobs = -1;  // -1: no logprobs
};

// The body as a JSON object, or an ApiError (400) saying why not.
nlohmann::json parse_json_object(const std::string& body);

// Parses and validates a body; throws ApiError (400) naming the field at fault.
CompletionRequest parse_completion_request(const std::string& body, bool chat);

struct CompletionResult {
  std::string id, model, text, finish_reason, token_sha;
  int64_t created = 0, prompt_tokens = 0, cached_tokens = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<int32_t> ids;
  nlohmann::json logprobs;  // null, or the OpenAI logprobs object of the choice
};

nlohmann::json usage_json(const CompletionResult& r);
nlohmann::json tensorfold_json(const CompletionResult& r, bool with_ids);
nlohmann::json completion_response(const CompletionRequest& q, const CompletionResult& r);
// One streamed chunk: a text delta, the role opener (chat), or the finishing chunk when finish_reason is set.
nlohmann::json stream_chunk(const CompletionRequest& q, const CompletionResult& r, const std::string& delta,
                            bool role, const std::string& finish_reason);

std::string token_sha(const std::vector<int32_t>& ids);

}  // namespace tf::server
