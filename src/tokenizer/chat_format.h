#pragma once
#include <string>
#include <vector>

namespace tf {

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::string reasoning;  // an assistant turn's reasoning (DeepSeek-V4 thinking mode keeps it after the last user turn)
};

enum class ChatFormatKind { ChatML, Llama3, DeepSeek, DeepSeekV4 };

// A chat format recognised from the model's template text; no Jinja engine yet, so unknown templates are refused.
class ChatFormat {
 public:
  // Throws with a clear message for a template it does not recognise.
  static ChatFormat from_template(const std::string& tmpl);
  static ChatFormat from_name(const std::string& name);  // chatml, llama3, deepseek, deepseek_v4
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  ChatFormatKind kind() const { return kind_; }
  const char* name() const;
  const std::string& default_system() const { return default_system_; }
  // DeepSeek-V4's thinking mode (reply opens with <think>) or chat mode (</think>); other formats ignore it.
  bool has_thinking() const { return kind_ == ChatFormatKind::DeepSeekV4; }
  void set_thinking(bool on) { thinking_ = on; }
  bool thinking() const { return thinking_; }

 private:
  bool thinking_ = true;
  ChatFormatKind kind_ = ChatFormatKind::ChatML;
  std::string default_system_;  // injected when the first message is not a system turn
};

}  // namespace tf
