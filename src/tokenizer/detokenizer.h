#pragma once
#include <cstdint>
#include <string>

namespace tf {

class Tokenizer;

// Turns a stream of token ids into text pieces that never end inside a UTF-8 character.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}
  // Returns the newly complete text (possibly empty).
  std::string push(int32_t id);
  // Returns what is left, with an unfinished character replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace tf
