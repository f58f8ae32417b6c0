#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using json = nlohmann::json;

// Turns a Hugging Face pre_tokenizer object into the split list of the shared engine.
void add_pre(const json& p, PreTokenizer& pre, const std::string& path) {
  if (p.is_null()) return;
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (auto& s : p.at("pretokenizers")) add_pre(s, pre, path);
  } else if (type == "ByteLevel") {
    if (p.value("add_prefix_space", false)) fail("{}: ByteLevel add_prefix_space=true is not supported yet", path);
    if (p.value("use_regex", true)) pre.add_split(pretok::kGpt2);
  } else if (type == "Digits") {
    pre.add_split(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Split") {
    if (p.value("invert", false)) fail("{}: Split pre-tokenizer with invert=true is not supported", path);
    std::string behavior = p.value("behavior", "Isolated");
    if (behavior != "Isolated") fail("{}: Split behavior '{}' is not supported (Isolated is)", path, behavior);
    const json& pat = p.at("pattern");
    if (pat.contains("Regex")) {
      pre.add_split(pat.at("Regex").get<std::string>());
    } else {
      std::string lit = pat.at("String").get<std::string>(), esc;
      for (char c : lit) {
        if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) esc += '\\';
        esc += c;
      }
      pre.add_split(esc);
    }
  } else {
    fail("{}: pre_tokenizer type '{}' is not supported", path, type);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open tokenizer '{}'", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  try {
    const json& m = j.at("model");
    if (m.value("type", "BPE") != "BPE") fail("{}: model type '{}' is not supported (BPE is)", path, m.value("type", ""));
    if (m.value("byte_fallback", false)) fail("{}: byte_fallback BPE (SentencePiece style) is not supported yet", path);
    Spec s;
    for (auto& [tok, id] : m.at("vocab").items()) {
      int64_t i = id.get<int64_t>();
      if (i < 0 || i > (1 << 24)) fail("{}: vocab id {} out of range", path, i);
      if (size_t(i) >= s.tokens.size()) s.tokens.resize(size_t(i) + 1);
      s.tokens[size_t(i)] = tok;
    }
    s.kinds.assign(s.tokens.size(), TokenKind::Normal);
    for (auto& a : j.value("added_tokens", json::array())) {
      int64_t i = a.at("id").get<int64_t>();
      if (size_t(i) >= s.tokens.size()) s.tokens.resize(size_t(i) + 1), s.kinds.resize(size_t(i) + 1);
      s.tokens[size_t(i)] = a.at("content").get<std::string>();
      s.kinds[size_t(i)] = a.value("special", false) ? TokenKind::Control : TokenKind::UserDefined;
    }
    for (auto& mg : m.at("merges")) {
      if (mg.is_array()) {
        s.merges.emplace_back(mg.at(0).get<std::string>(), mg.at(1).get<std::string>());
      } else {
        std::string t = mg.get<std::string>();
        size_t sp = t.find(' ', 1);
        if (sp == std::string::npos) fail("{}: merge '{}' has no separating space", path, t);
        s.merges.emplace_back(t.substr(0, sp), t.substr(sp + 1));
      }
    }
    s.ignore_merges = m.value("ignore_merges", false);
    s.pre = std::make_unique<PreTokenizer>();
    add_pre(j.value("pre_tokenizer", json()), *s.pre, path);
    s.pre_name = "tokenizer.json";
    const json& norm = j.value("normalizer", json());
    const bool no_op = norm.is_object() && norm.value("type", "") == "Sequence" &&
                       norm.value("normalizers", json::array()).empty();  // DeepSeek-V4 ships an empty Sequence
    if (!norm.is_null() && !no_op) {
      if (norm.value("type", "") != "NFC") fail("{}: normalizer '{}' is not supported (NFC is)", path, norm.dump());
      s.nfc = true;
    }
    const json& post = j.value("post_processor", json());
    if (!post.is_null() && post.value("type", "") == "TemplateProcessing") {
      const json& single = post.at("single");
      if (!single.empty() && single.at(0).contains("SpecialToken")) {
        std::string bos = single.at(0).at("SpecialToken").at("id").get<std::string>();
        for (size_t i = 0; i < s.tokens.size(); ++i)
          if (s.tokens[i] == bos) s.bos = int32_t(i), s.add_bos = true;
      }
    }
    return std::make_unique<Tokenizer>(std::move(s));
  } catch (const json::exception& e) {
    fail("{}: unexpected tokenizer.json layout: {}", path, e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_path(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return from_gguf(GgufFile(path));
  return from_json_file(path);
}

}  // namespace tf
