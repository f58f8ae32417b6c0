#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace tf {

class GgufFile;

enum class TokenKind : uint8_t { Normal, Control, UserDefined, Unknown, Unused, Byte };

// Byte-level BPE: one engine, filled by the GGUF loader or the tokenizer.json loader.
class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
  static std::unique_ptr<Tokenizer> from_json_file(const std::string& path);
  static std::unique_ptr<Tokenizer> from_path(const std::string& path);  // .gguf or tokenizer.json

  // Text (any bytes; ill-formed UTF-8 becomes U+FFFD) to ids. With parse_special, special token text maps to its id.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Ids to bytes; special tokens rendered as their text when render_special.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = true) const;
  std::string token_bytes(int32_t id, bool render_special = true) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  const std::string& token_text(int32_t id) const { return tokens_.at(size_t(id)); }
  std::optional<int32_t> token_id(std::string_view text) const;
  std::optional<int32_t> bos() const { return bos_; }
  std::optional<int32_t> eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool is_end_of_generation(int32_t id) const { return eog_.count(id) != 0; }
  const std::unordered_set<int32_t>& end_of_generation() const { return eog_; }
  void add_end_of_generation(int32_t id) { eog_.insert(id); }  // e.g. generation_config.json's eos_token_id
  const std::string& pre_name() const { return pre_name_; }

  // Filled by the loaders.
  struct Spec {
    std::vector<std::string> tokens;  // byte-level encoded text of each id
    std::vector<TokenKind> kinds;
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
    std::unique_ptr<PreTokenizer> pre;
    std::string pre_name;
    bool nfc = false;
    bool ignore_merges = false;
    bool add_bos = false;
    std::optional<int32_t> bos, eos;
    std::vector<int32_t> extra_eog;
  };
  explicit Tokenizer(Spec spec);

 private:
  void bpe_piece(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_raw(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<TokenKind> kinds_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::unique_ptr<PreTokenizer> pre_;
  std::string pre_name_;
  bool nfc_ = false, ignore_merges_ = false, add_bos_ = false;
  std::optional<int32_t> bos_, eos_;
  std::unordered_set<int32_t> eog_;
  std::vector<int32_t> specials_;  // ids matched in raw text, longest text first
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tf
