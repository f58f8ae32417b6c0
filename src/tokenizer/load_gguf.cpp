#include "base/error.h"
#include "base/log.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tf {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) fail("{}: metadata 'tokenizer.ggml.model' is missing: the file has no tokenizer", f.path());
  if (*model != "gpt2")
    fail("{}: tokenizer.ggml.model = '{}' is not supported yet (byte-level BPE 'gpt2' is)", f.path(), *model);
  const auto* tokens = f.get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail("{}: metadata 'tokenizer.ggml.tokens' is missing or empty", f.path());
  Spec s;
  s.tokens = *tokens;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.tokens[i].empty()) s.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
  if (const auto* types = f.get_ints("tokenizer.ggml.token_type")) {
    if (types->size() != tokens->size())
      fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), types->size(), tokens->size());
    for (auto t : *types) {
      switch (t) {
        case 2: s.kinds.push_back(TokenKind::Unknown); break;
        case 3: s.kinds.push_back(TokenKind::Control); break;
        case 4: s.kinds.push_back(TokenKind::UserDefined); break;
        case 5: s.kinds.push_back(TokenKind::Unused); break;
        case 6: s.kinds.push_back(TokenKind::Byte); break;
        default: s.kinds.push_back(TokenKind::Normal);
      }
    }
  }
  const auto* merges = f.get_strings("tokenizer.ggml.merges");
  if (!merges) fail("{}: metadata 'tokenizer.ggml.merges' is missing (needed by a gpt2 tokenizer)", f.path());
  for (auto& m : *merges) {
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) fail("{}: tokenizer merge '{}' has no separating space", f.path(), m);
    s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  s.pre_name = f.get_string("tokenizer.ggml.pre").value_or("default");
  s.pre = pretok::from_gguf_name(s.pre_name);
  if (!s.pre) {
    log::warn("{}: unknown pre-tokenizer '{}', using 'default'", f.path(), s.pre_name);
    s.pre = pretok::from_gguf_name("default");
  }
  bool llama3 = s.pre_name == "llama-bpe" || s.pre_name == "llama3";
  s.ignore_merges = llama3;
  s.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(llama3);
  auto id = [&](const char* key) -> std::optional<int32_t> {
    auto v = f.get_int(key);
    if (!v || *v < 0 || *v >= int64_t(s.tokens.size())) return std::nullopt;
    return int32_t(*v);
  };
  s.bos = id("tokenizer.ggml.bos_token_id");
  s.eos = id("tokenizer.ggml.eos_token_id");
  for (const char* k : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto v = id(k)) s.extra_eog.push_back(*v);
  return std::make_unique<Tokenizer>(std::move(s));
}

}  // namespace tf
