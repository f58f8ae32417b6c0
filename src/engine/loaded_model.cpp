#include "engine/loaded_model.h"

#include "base/error.h"

namespace tf {

std::optional<ChatFormat> chat_format_of(const GgufFile& f, const std::string& override_name) {
  if (!override_name.empty()) {
    ChatFormat c = ChatFormat::from_name(override_name);
    return c;
  }
  auto tmpl = f.get_string("tokenizer.chat_template");
  if (!tmpl) return std::nullopt;
  return ChatFormat::from_template(*tmpl);
}

LoadedModel load_model(const std::string& path, ThreadPool& pool, const std::string& chat_template) {
  LoadedModel m;
  m.file = std::make_shared<const GgufFile>(path);
  auto arch = m.file->get_string("general.architecture");
  if (!arch) fail("{}: required metadata 'general.architecture' is missing", path);
  const FamilyEntry& fam = family_for_architecture(*arch);
  m.tokenizer = Tokenizer::from_gguf(*m.file);
  m.chat = chat_format_of(*m.file, chat_template);
  m.model = fam.load_gguf(m.file, pool);
  if (m.tokenizer->n_vocab() != m.model->info().n_vocab)
    fail("{}: the tokenizer has {} tokens but the model's vocabulary is {}", path, m.tokenizer->n_vocab(),
         m.model->info().n_vocab);
  return m;
}

}  // namespace tf
