#pragma once
#include <memory>
#include <optional>
#include <string>

#include "base/thread_pool.h"
#include "io/gguf.h"
#include "model/backend.h"
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
  BackendChoice backend;
  std::string chat_template_kind() const { return chat ? chat->name() : "none"; }
};

// Opens a GGUF model file; `chat_template` ("" = from the file) overrides the template choice; `backend` is
// auto, cpu or cuda (auto falls back to the CPU, with the reason, when CUDA cannot run this model).
// `thinking`: -1 keeps the format's default, 0/1 turn a thinking mode off/on (refused for formats without one).
// `qat`: DeepSeek-V4's activation roundings, on unless false (the float oracles compare with them off).
LoadedModel load_model(const std::string& path, ThreadPool& pool, const std::string& chat_template = "",
                       const std::string& backend = "cpu", int thinking = -1, bool qat = true);

// What `backend` would run for this file, with the reason; fails as load_model would for an explicit "cuda".
BackendChoice backend_for(const GgufFile& f, const std::string& backend);

// Refuses an engine context the chosen backend cannot serve, naming --context.
void check_context(const LoadedModel& m, int64_t context);

// The chat format recorded in the file, without loading weights (for `info`).
std::optional<ChatFormat> chat_format_of(const GgufFile& f, const std::string& override_name = "");

}  // namespace tf
