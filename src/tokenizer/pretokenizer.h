#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// A compiled PCRE2 pattern (UTF + Unicode properties) that splits text into matches and the gaps between them.
class SplitRegex {
 public:
  explicit SplitRegex(const std::string& pattern);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;
  // Appends to `out` the pieces of `text` (valid UTF-8): each match and each non-empty gap, in order.
  void split(std::string_view text, std::vector<std::string>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

// The ordered list of split regexes a tokenizer applies before BPE (each splits every current piece).
class PreTokenizer {
 public:
  void add_split(const std::string& pattern);
  std::vector<std::string> run(std::string_view text) const;
  bool empty() const { return steps_.empty(); }
  size_t size() const { return steps_.size(); }

 private:
  std::vector<std::shared_ptr<SplitRegex>> steps_;
};

namespace pretok {
extern const char* const kGpt2;    // GPT-2 / ByteLevel(use_regex) pattern as Hugging Face spells it
extern const char* const kLlama3;  // llama-bpe / llama3
extern const char* const kQwen2;
extern const char* const kDigit;   // one numeric code point per piece
// The split list for a GGUF `tokenizer.ggml.pre` name; unknown names give nullptr.
std::unique_ptr<PreTokenizer> from_gguf_name(const std::string& name);
}  // namespace pretok

// GPT-2 byte <-> printable code point table of byte-level BPE.
std::string byte_level_encode(std::string_view bytes);
// Inverse of byte_level_encode; false if some code point is not in the table.
bool byte_level_decode(std::string_view text, std::string& bytes);

}  // namespace tf
