#pragma once
#include <memory>
#include <optional>
#include <string>

#include "base/thread_pool.h"
#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace tf {

// Everything a served checkpoint needs, checked at startup so no request can meet an unsupported part.
struct LoadedModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatFormat> chat;  // none when the checkpoint has no chat template
  std::string chat_template_kind() const { return chat ? chat->name() : "none"; }
};

// Opens a GGUF model file; `chat_template` ("" = from the file) overrides the template choice.
LoadedModel load_model(const std::string& path, ThreadPool& pool, const std::string& chat_template = "");

// The chat format recorded in the file, without loading weights (for `info`).
std::optional<ChatFormat> chat_format_of(const GgufFile& f, const std::string& override_name = "");

}  // namespace tf
