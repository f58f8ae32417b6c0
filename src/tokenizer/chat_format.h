#pragma once
#include <string>
#include <vector>

namespace tf {

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

enum class ChatFormatKind { ChatML, Llama3, DeepSeek };

// A chat format recognised from the model's template text; no Jinja engine yet, so unknown templates are refused.
class ChatFormat {
 public:
  // Throws with a clear message for a template it does not recognise.
  static ChatFormat from_template(const std::string& tmpl);
  static ChatFormat from_name(const std::string& name);  // chatml, llama3, deepseek
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  ChatFormatKind kind() const { return kind_; }
  const char* name() const;
  const std::string& default_system() const { return default_system_; }

 private:
  ChatFormatKind kind_ = ChatFormatKind::ChatML;
  std::string default_system_;  // injected when the first message is not a system turn
};

}  // namespace tf
