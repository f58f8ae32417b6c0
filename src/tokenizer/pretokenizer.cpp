#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {
#include "tokenizer/unicode_extra.inc"

template <size_t N>
std::string class_ranges(const char32_t (&r)[N][2]) {
  std::string out;
  for (auto& p : r) out += fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", uint32_t(p[0]), uint32_t(p[1]));
  return out;
}

// Widens \p{L}, \p{N}, \p{M}, \p{P} and \p{S} with the code points newer Unicode assigns, in or out of a class.
std::string widen_classes(const std::string& pat) {
  static const std::string kL = class_ranges(kExtraLetters), kN = class_ranges(kExtraNumbers);
  static const std::string kM = class_ranges(kExtraMarks), kP = class_ranges(kExtraPunct);
  static const std::string kS = class_ranges(kExtraSymbols);
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      std::string_view rest(pat.data() + i, pat.size() - i);
      const std::string_view head = rest.substr(0, 5);
      const std::string* extra = head == "\\p{L}"   ? &kL
                                 : head == "\\p{N}" ? &kN
                                 : head == "\\p{M}" ? &kM
                                 : head == "\\p{P}" ? &kP
                                 : head == "\\p{S}" ? &kS
                                                     : nullptr;
      if (extra) {
        out += in_class ? std::string(rest.substr(0, 5)) + *extra : "[" + std::string(rest.substr(0, 5)) + *extra + "]";
        i += 4;
      } else {
        out += pat.substr(i, 2);
        ++i;
      }
      continue;
    }
    if (pat[i] == '[' && !in_class) in_class = true;
    else if (pat[i] == ']' && in_class) in_class = false;
    out += pat[i];
  }
  return out;
}
}  // namespace

namespace pretok {
const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kDigit = R"(\p{N})";

std::unique_ptr<PreTokenizer> from_gguf_name(const std::string& name) {
  auto p = std::make_unique<PreTokenizer>();
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" || name == "codeshell" ||
      name == "exaone" || name == "minerva-7b") {
    p->add_split(kDigit);
    p->add_split(kGpt2);
  } else if (name == "gpt-2" || name == "gpt2") {
    p->add_split(kGpt2);
  } else if (name == "llama-bpe" || name == "llama3") {
    p->add_split(kLlama3);
  } else if (name == "qwen2") {
    p->add_split(kQwen2);
  } else if (name == "default") {
    p->add_split(R"([\p{P}\$\+<=>\^~\|]+)");
    p->add_split(kGpt2);
    p->add_split(R"(\p{N}+)");
    p->add_split(R"([0-9][0-9][0-9])");
  } else {
    return nullptr;
  }
  return p;
}
}  // namespace pretok

SplitRegex::SplitRegex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  const std::string wide = widen_classes(pattern);
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(wide.c_str()), wide.size(), PCRE2_UTF | PCRE2_UCP, &err,
                             &off, nullptr);
  if (!code) {
    std::array<PCRE2_UCHAR, 256> msg{};
    pcre2_get_error_message(err, msg.data(), msg.size());
    fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", off,
         reinterpret_cast<const char*>(msg.data()), pattern);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void SplitRegex::split(std::string_view text, std::vector<std::string>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t pos = 0, gap = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    if (e == s) {  // empty match: step over one character
      if (s >= text.size()) break;
      size_t i = s;
      unicode::next_code_point(text, i);
      pos = i;
      continue;
    }
    if (s > gap) out.emplace_back(text.substr(gap, s - gap));
    out.emplace_back(text.substr(s, e - s));
    gap = pos = e;
  }
  if (gap < text.size()) out.emplace_back(text.substr(gap));
  pcre2_match_data_free(md);
}

void PreTokenizer::add_split(const std::string& pattern) { steps_.push_back(std::make_shared<SplitRegex>(pattern)); }

std::vector<std::string> PreTokenizer::run(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  for (auto& step : steps_) {
    std::vector<std::string> next;
    for (auto& p : pieces) step->split(p, next);
    pieces.swap(next);
  }
  return pieces;
}

namespace {
struct ByteTable {
  std::array<uint32_t, 256> to_cp{};
  std::array<int, 0x200> from_cp{};
  ByteTable() {
    from_cp.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = keep ? uint32_t(b) : uint32_t(0x100 + n++);
      from_cp[to_cp[b]] = b;
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}
}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) unicode::append_utf8(out, table().to_cp[b]);
  return out;
}

bool byte_level_decode(std::string_view text, std::string& bytes) {
  size_t i = 0;
  bool ok = true;
  while (i < text.size()) {
    uint32_t cp = unicode::next_code_point(text, i);
    if (cp < table().from_cp.size() && table().from_cp[cp] >= 0) bytes += char(table().from_cp[cp]);
    else ok = false;
  }
  return ok;
}

}  // namespace tf
