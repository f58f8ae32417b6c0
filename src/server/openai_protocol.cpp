#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>

#include "base/sha256.h"

namespace tf::server {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

std::optional<double> number(const json& j, const char* key, double lo, double hi) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (!v.is_number()) bad(key, fmt::format("'{}' must be a number, got {}", key, v.type_name()));
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d));
  return d;
}

std::optional<int64_t> integer(const json& j, const char* key, int64_t lo) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, fmt::format("'{}' must be an integer, got {}", key, v.type_name()));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) bad(key, fmt::format("'{}' is too large", key));
  int64_t i = v.get<int64_t>();
  if (i < lo) bad(key, fmt::format("'{}' must be at least {}, got {}", key, lo, i));
  return i;
}

bool boolean(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) bad(key, fmt::format("'{}' must be a boolean, got {}", key, j[key].type_name()));
  return j[key].get<bool>();
}

std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(param, fmt::format("'{}' must be a string or an array of content parts", param));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(p, fmt::format("'{}' must be a text part {{\"type\": \"text\", \"text\": ...}} (images are not supported)", p));
    out += part["text"].get<std::string>();
  }
  return out;
}

}  // namespace

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& type,
                       const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
            {"code", code.empty() ? json(status) : json(code)}};
  return json{{"error", e}}.dump();
}

std::string ApiError::body() const { return error_body(status, what(), param, type, code); }

json parse_json_object(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("request body is not valid JSON: {}", e.what()), "", "invalid_request_error",
                   "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "request body must be a JSON object", "", "invalid_request_error", "invalid_json");
  return j;
}

CompletionRequest parse_completion_request(const std::string& body, bool chat) {
  json j = parse_json_object(body);
  CompletionRequest q;
  q.chat = chat;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    q.model = j["model"].get<std::string>();
  }
  if (chat) {
    if (!j.contains("messages")) bad("messages", "'messages' is required");
    const json& m = j["messages"];
    if (!m.is_array()) bad("messages", fmt::format("'messages' must be an array, got {}", m.type_name()));
    if (m.empty()) bad("messages", "'messages' must contain at least one message");
    for (size_t i = 0; i < m.size(); ++i) {
      std::string p = fmt::format("messages[{}]", i);
      if (!m[i].is_object()) bad(p, fmt::format("'{}' must be an object", p));
      if (!m[i].contains("role") || !m[i]["role"].is_string()) bad(p + ".role", fmt::format("'{}.role' must be a string", p));
      std::string role = m[i]["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        bad(p + ".role", fmt::format("'{}.role' = '{}' is not one of system, user, assistant, tool", p, role));
      if (!m[i].contains("content") || m[i]["content"].is_null())
        bad(p + ".content", fmt::format("'{}.content' is required", p));
      q.messages.push_back({role, content_text(m[i]["content"], p + ".content"), {}});
      if (role == "assistant" && m[i].contains("reasoning_content") && !m[i]["reasoning_content"].is_null()) {
        if (!m[i]["reasoning_content"].is_string())
          bad(p + ".reasoning_content", fmt::format("'{}.reasoning_content' must be a string", p));
        q.messages.back().reasoning = m[i]["reasoning_content"].get<std::string>();
      }
    }
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    const json& p = j["prompt"];
    if (p.is_string()) {
      q.prompt_text = p.get<std::string>();
      if (q.prompt_text->empty()) bad("prompt", "'prompt' must not be empty");
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (auto& v : p) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
          bad("prompt", "'prompt' token ids must be non-negative integers");
        q.prompt_ids.push_back(v.get<int32_t>());
      }
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      q.prompt_text = p[0].get<std::string>();
    } else {
      bad("prompt", "'prompt' must be a non-empty string or an array of token ids (one prompt per request)");
    }
  }
  if (auto n = integer(j, "n", 1); n && *n != 1) bad("n", "'n' must be 1: one choice per request is supported");
  q.max_tokens = integer(j, "max_completion_tokens", 1);
  if (q.max_tokens) q.max_tokens_field = "max_completion_tokens";
  if (auto mt = integer(j, "max_tokens", 1)) q.max_tokens = mt, q.max_tokens_field = "max_tokens";
  q.temperature = number(j, "temperature", 0.0, 100.0);
  q.top_p = number(j, "top_p", 0.0, 1.0);
  q.min_p = number(j, "min_p", 0.0, 1.0);
  q.top_k = integer(j, "top_k", 0);
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) bad("seed", "'seed' must be an integer");
    q.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : uint64_t(j["seed"].get<int64_t>());
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      q.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (auto& v : s) {
        if (!v.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        q.stop.push_back(v.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", s.type_name()));
    }
  }
  q.stream = boolean(j, "stream");
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) bad("stream_options", "'stream_options' must be an object");
    q.include_usage = boolean(j["stream_options"], "include_usage");
  }
  q.ignore_eos = boolean(j, "ignore_eos");
  q.return_token_ids = boolean(j, "return_token_ids");
  if (j.contains("draft") && !j["draft"].is_null()) q.draft = boolean(j, "draft");
  if (chat) {
    if (boolean(j, "logprobs")) q.top_logprobs = int(integer(j, "top_logprobs", 0).value_or(0));
    else if (integer(j, "top_logprobs", 0)) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else if (auto lp = integer(j, "logprobs", 0)) {
    q.top_logprobs = int(*lp);
  }
  if (q.top_logprobs > 20) bad(chat ? "top_logprobs" : "logprobs", "at most 20 alternatives per token are returned");
  if (j.contains("response_format") && !j["response_format"].is_null()) {
    const json& rf = j["response_format"];
    if (!rf.is_object() || rf.value("type", "") != "text")
      bad("response_format", "'response_format' other than {\"type\": \"text\"} needs structured output, not supported yet");
  }
  if (j.contains("tools") && j["tools"].is_array() && !j["tools"].empty()) bad("tools", "'tools' are not supported yet");
  return q;
}

std::string token_sha(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return sha256_hex(s).substr(0, 12);
}

json usage_json(const CompletionResult& r) {
  int64_t n = int64_t(r.ids.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", n},
          {"total_tokens", r.prompt_tokens + n},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json tensorfold_json(const CompletionResult& r, bool with_ids) {
  json t = {{"token_sha", r.token_sha}, {"draft_tokens", r.draft_tokens}, {"accepted_tokens", r.accepted_tokens}};
  if (with_ids) t["token_ids"] = r.ids;
  return t;
}

json completion_response(const CompletionRequest& q, const CompletionResult& r) {
  json choice = {{"index", 0}, {"finish_reason", r.finish_reason}, {"logprobs", r.logprobs}};
  if (q.chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  else choice["text"] = r.text;
  return {{"id", r.id},
          {"object", q.chat ? "chat.completion" : "text_completion"},
          {"created", r.created},
          {"model", r.model},
          {"system_fingerprint", "tensorfold-cpp"},
          {"choices", json::array({choice})},
          {"usage", usage_json(r)},
          {"tensorfold", tensorfold_json(r, q.return_token_ids)}};
}

json stream_chunk(const CompletionRequest& q, const CompletionResult& r, const std::string& delta, bool role,
                  const std::string& finish_reason) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason.empty() ? json() : json(finish_reason)},
                 {"logprobs", r.logprobs}};
  if (q.chat) {
    json d = json::object();
    if (role) d["role"] = "assistant", d["content"] = "";
    else if (finish_reason.empty()) d["content"] = delta;
    choice["delta"] = d;
  } else {
    choice["text"] = delta;
  }
  return {{"id", r.id},
          {"object", q.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", r.created},
          {"model", r.model},
          {"system_fingerprint", "tensorfold-cpp"},
          {"choices", json::array({choice})}};
}

}  // namespace tf::server
