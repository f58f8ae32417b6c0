#include "base/error.h"
#include "server/context.h"

namespace tf::server {

using json = nlohmann::json;


void handle_tokenize(ServerContext& c, const std::string& body, httplib::Response& res) {
  json j = parse_json_object(body);
  std::vector<int32_t> ids;
  if (j.contains("messages")) {
    json fake = {{"messages", j["messages"]}};
    CompletionRequest q = parse_completion_request(fake.dump(), true);
    if (!c.m.chat) throw ApiError(400, "this model has no chat template", "messages");
    ids = c.m.tokenizer->encode(c.m.chat->render(q.messages, true));
  } else {
    const char* key = j.contains("content") ? "content" : "prompt";
    if (!j.contains(key) || !j[key].is_string())
      throw ApiError(400, "'content' (or 'prompt') must be a string, or give 'messages'", "content");
    if (j.contains("add_special") && !j["add_special"].is_boolean())
      throw ApiError(400, "'add_special' must be a boolean", "add_special");
    bool special = j.value("add_special", true);
    ids = c.m.tokenizer->encode(j[key].get<std::string>(), special);
  }
  res.set_content(json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", c.engine.context()}}.dump(),
                  "application/json");
}

void handle_detokenize(ServerContext& c, const std::string& body, httplib::Response& res) {
  json j = parse_json_object(body);
  if (!j.contains("tokens") || !j["tokens"].is_array()) throw ApiError(400, "'tokens' must be an array of ids", "tokens");
  std::vector<int32_t> ids;
  for (auto& v : j["tokens"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.m.tokenizer->n_vocab())
      throw ApiError(400, fmt::format("'tokens' must hold ids in [0, {})", c.m.tokenizer->n_vocab()), "tokens");
    ids.push_back(v.get<int32_t>());
  }
  std::string text = c.m.tokenizer->decode(ids);
  res.set_content(json{{"content", text}, {"prompt", text}}.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

}  // namespace tf::server
