#include "tokenizer/detokenizer.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tf {

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tok_.token_bytes(id, render_special_);
  size_t n = unicode::complete_prefix(pending_);
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace tf
