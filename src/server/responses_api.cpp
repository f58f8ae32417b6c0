// POST /v1/responses: the Responses API mapped onto the chat path (one message output, text only).
#include "base/error.h"
#include "server/context.h"

namespace tf::server {

using json = nlohmann::json;

namespace {

std::string item_text(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw ApiError(400, fmt::format("'{}' must be a string or an array of parts", param), param);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& p = content[i];
    std::string t = p.is_object() ? p.value("type", "") : "";
    if ((t != "input_text" && t != "output_text" && t != "text") || !p.contains("text") || !p["text"].is_string())
      throw ApiError(400, fmt::format("'{}[{}]' must be an input_text part (images and files are not supported)", param, i),
                     fmt::format("{}[{}]", param, i));
    out += p["text"].get<std::string>();
  }
  return out;
}

// The equivalent chat-completions body, so validation and sampling follow one path.
json chat_body(const json& j) {
  json messages = json::array();
  if (j.contains("instructions") && !j["instructions"].is_null()) {
    if (!j["instructions"].is_string()) throw ApiError(400, "'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", j["instructions"]}});
  }
  if (!j.contains("input")) throw ApiError(400, "'input' is required", "input");
  const json& in = j["input"];
  if (in.is_string()) {
    messages.push_back({{"role", "user"}, {"content", in}});
  } else if (in.is_array() && !in.empty()) {
    for (size_t i = 0; i < in.size(); ++i) {
      std::string p = fmt::format("input[{}]", i);
      if (!in[i].is_object() || !in[i].contains("role") || !in[i]["role"].is_string())
        throw ApiError(400, fmt::format("'{}' must be a message item with a role", p), p);
      if (!in[i].contains("content")) throw ApiError(400, fmt::format("'{}.content' is required", p), p + ".content");
      messages.push_back({{"role", in[i]["role"]}, {"content", item_text(in[i]["content"], p + ".content")}});
    }
  } else {
    throw ApiError(400, "'input' must be a string or a non-empty array of message items", "input");
  }
  json body = {{"messages", messages}};
  for (const char* k : {"model", "temperature", "top_p", "seed", "stream", "top_k", "min_p", "draft", "ignore_eos"})
    if (j.contains(k)) body[k] = j[k];
  if (j.contains("max_output_tokens")) {  // checked here so that errors name the Responses field
    const json& v = j["max_output_tokens"];
    if (!v.is_null() &&
        (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() < 1 : v.get<int64_t>() < 1)))
      throw ApiError(400, fmt::format("'max_output_tokens' must be a positive integer, got {}", v.dump()),
                     "max_output_tokens");
    body["max_tokens"] = v;
  }
  return body;
}

json response_object(const std::string& id, const std::string& msg_id, int64_t created, const std::string& model,
                     const std::string& status, const std::string& text, const CompletionResult* r) {
  json content = json::array();
  json item = {{"type", "message"}, {"id", msg_id}, {"status", status == "in_progress" ? "in_progress" : "completed"},
               {"role", "assistant"}, {"content", content}};
  json o = {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"model", model},
            {"output", json::array()}, {"error", nullptr}, {"incomplete_details", nullptr}};
  if (r) {
    item["content"].push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
    o["output"].push_back(item);
    int64_t n = int64_t(r->ids.size());
    o["usage"] = {{"input_tokens", r->prompt_tokens}, {"output_tokens", n}, {"total_tokens", r->prompt_tokens + n},
                  {"input_tokens_details", {{"cached_tokens", r->cached_tokens}}},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}}};
    if (r->finish_reason == "length") o["incomplete_details"] = {{"reason", "max_output_tokens"}};
    o["tensorfold"] = tensorfold_json(*r, false);
  }
  return o;
}

}  // namespace

void handle_responses(ServerContext& c, const std::string& body, httplib::Response& res) {
  json j = parse_json_object(body);
  CompletionRequest q = parse_completion_request(chat_body(j).dump(), true);
  q.max_tokens_field = "max_output_tokens";
  EngineRequest e = c.prepare(q);
  const std::string id = random_id("resp_"), msg_id = random_id("msg_");
  const int64_t created = unix_now();
  auto h = c.submit(e);
  auto finished = [&c, q, e, id, created](const EngineResult& r) {
    CompletionResult cr = c.result_of(q, e, r, id, created);
    return std::make_pair(cr, cr.finish_reason == "length" ? std::string("incomplete") : std::string("completed"));
  };
  if (!q.stream) {
    const EngineResult& r = h->wait_result();
    c.metrics.observe(r);
    if (r.finish_reason == "error") throw engine_failure(r);
    auto [cr, status] = finished(r);
    res.set_content(response_object(id, msg_id, created, c.opts.name, status, cr.text, &cr).dump(), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [&c, h, id, msg_id, created, finished](size_t,
                                                                                             httplib::DataSink& sink) {
    int64_t seq = 0;
    auto event = [&](const char* type, json body) {
      body["type"] = type;
      body["sequence_number"] = seq++;
      return send_sse(sink, body, type);
    };
    json skeleton = response_object(id, msg_id, created, c.opts.name, "in_progress", "", nullptr);
    json item = {{"type", "message"}, {"id", msg_id}, {"status", "in_progress"}, {"role", "assistant"},
                 {"content", json::array()}};
    json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
    bool alive = event("response.created", {{"response", skeleton}}) &&
                 event("response.in_progress", {{"response", skeleton}}) &&
                 event("response.output_item.added", {{"output_index", 0}, {"item", item}}) &&
                 event("response.content_part.added", {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
    std::string text, all;
    std::vector<TokenLogprob> lps;
    while (alive && h->wait_next(text, lps)) {
      if (!text.empty())
        alive = event("response.output_text.delta", {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0},
                                                      {"delta", text}, {"logprobs", json::array()}});
      all += text;
      text.clear();
      lps.clear();
    }
    if (!alive) {
      h->cancel();
      return false;
    }
    const EngineResult& r = h->wait_result();
    c.metrics.observe(r);
    if (r.finish_reason == "error") {  // the stream ends with an error event and a failed response
      json failed = response_object(id, msg_id, created, c.opts.name, "failed", all, nullptr);
      failed["error"] = {{"code", "server_error"}, {"message", engine_failure(r).what()}};
      event("error", {{"code", "server_error"}, {"message", engine_failure(r).what()}, {"param", nullptr}});
      event("response.failed", {{"response", failed}});
      sink.done();
      return true;
    }
    auto [cr, status] = finished(r);
    part["text"] = cr.text;
    item["status"] = "completed";
    item["content"] = json::array({part});
    event("response.output_text.done", {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0},
                                        {"text", cr.text}, {"logprobs", json::array()}});
    event("response.content_part.done", {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
    event("response.output_item.done", {{"output_index", 0}, {"item", item}});
    event(status == "completed" ? "response.completed" : "response.incomplete",
          {{"response", response_object(id, msg_id, created, c.opts.name, status, cr.text, &cr)}});
    sink.done();
    return true;
  });
}

}  // namespace tf::server
