#include "tokenizer/chat_format.h"

#include "base/error.h"

namespace tf {
namespace {

// The literal system text a ChatML template injects, e.g. SmolLM2's or Qwen2.5's default system turn.
std::string chatml_default_system(const std::string& t) {
  for (const char* head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    size_t a = t.find(head);
    if (a == std::string::npos) continue;
    a += std::string(head).size();
    size_t b = t.find("<|im_end|>", a);
    if (b == std::string::npos) continue;
    std::string body = t.substr(a, b - a);
    if (body.find_first_of("'\"{}+") != std::string::npos) continue;  // built from variables, not a literal
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') out += '\n', ++i;
      else out += body[i];
    }
    return out;
  }
  return {};
}

}  // namespace

ChatFormat ChatFormat::from_template(const std::string& tmpl) {
  ChatFormat f;
  if (tmpl.find("<|im_start|>") != std::string::npos) {
    f.kind_ = ChatFormatKind::ChatML;
    f.default_system_ = chatml_default_system(tmpl);
  } else if (tmpl.find("<|start_header_id|>") != std::string::npos) {
    f.kind_ = ChatFormatKind::Llama3;
  } else if (tmpl.find("<｜User｜>") != std::string::npos || tmpl.find("<｜Assistant｜>") != std::string::npos) {
    f.kind_ = ChatFormatKind::DeepSeek;
  } else {
    fail("the model's chat template is not one TensorFold recognises (ChatML, Llama-3, DeepSeek) and there is no "
         "Jinja engine yet; pass --chat-template chatml|llama3|deepseek to choose one. Template starts: {:.80}",
         tmpl);
  }
  return f;
}

ChatFormat ChatFormat::from_name(const std::string& name) {
  ChatFormat f;
  if (name == "chatml") f.kind_ = ChatFormatKind::ChatML;
  else if (name == "llama3") f.kind_ = ChatFormatKind::Llama3;
  else if (name == "deepseek") f.kind_ = ChatFormatKind::DeepSeek;
  else if (name == "deepseek_v4") f.kind_ = ChatFormatKind::DeepSeekV4;
  else fail("unknown chat template name '{}' (chatml, llama3, deepseek, deepseek_v4)", name);
  return f;
}

const char* ChatFormat::name() const {
  switch (kind_) {
    case ChatFormatKind::ChatML: return "chatml";
    case ChatFormatKind::Llama3: return "llama3";
    case ChatFormatKind::DeepSeek: return "deepseek";
    case ChatFormatKind::DeepSeekV4: return thinking_ ? "deepseek_v4 (thinking)" : "deepseek_v4 (chat)";
  }
  return "?";
}

std::string ChatFormat::render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const {
  std::string out;
  switch (kind_) {
    case ChatFormatKind::ChatML:
      if (!default_system_.empty() && (msgs.empty() || msgs[0].role != "system"))
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFormatKind::Llama3:
      for (auto& m : msgs) out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormatKind::DeepSeek:
      for (auto& m : msgs) {
        if (m.role == "system") out += m.content;
        else if (m.role == "user") out += "<｜User｜>" + m.content;
        else if (m.role == "assistant") out += "<｜Assistant｜>" + m.content + "<｜end▁of▁sentence｜>";
        else out += "<｜User｜>" + m.content;
      }
      if (add_generation_prompt) out += "<｜Assistant｜>";
      break;
    case ChatFormatKind::DeepSeekV4: {
      // As the release's encoding_dsv4.py: the assistant marker (and <think> or </think>) follows every user turn.
      int64_t last_user = -1;
      for (size_t i = 0; i < msgs.size(); ++i) {
        if (msgs[i].role == "tool")  // the release merges tool results into DSML blocks, not implemented yet
          throw Error(fmt::format("messages[{}]: 'tool' messages are not supported by the DeepSeek-V4 chat encoding "
                                  "yet",
                                  i),
                      fmt::format("messages[{}].role", i));
        if (msgs[i].role == "user") last_user = int64_t(i);
      }
      out += "<｜begin▁of▁sentence｜>";
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "system") {
          out += m.content;
        } else if (m.role == "assistant") {
          if (thinking_ && int64_t(i) > last_user) out += m.reasoning + "</think>";
          out += m.content + "<｜end▁of▁sentence｜>";
        } else {
          out += "<｜User｜>" + m.content + "<｜Assistant｜>";
          out += thinking_ && int64_t(i) >= last_user ? "<think>" : "</think>";
        }
      }
      break;
    }
  }
  return out;
}

}  // namespace tf
