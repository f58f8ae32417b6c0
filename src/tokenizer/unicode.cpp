#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

namespace tf::unicode {
namespace {

// Length of the valid sequence starting at s[i] (0 if ill-formed), following the Unicode well-formed table.
size_t valid_seq_len(std::string_view s, size_t i, size_t& maximal_subpart) {
  auto b = [&](size_t k) { return uint8_t(s[k]); };
  uint8_t c = b(i);
  maximal_subpart = 1;
  if (c < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else return 0;
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    uint8_t t = b(i + k);
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (t < l || t > h) return 0;
    maximal_subpart = k + 1;
  }
  return need + 1;
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t sub = 1;
    size_t n = valid_seq_len(s, i, sub);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += std::max<size_t>(1, sub);
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

uint32_t next_code_point(std::string_view s, size_t& i) {
  uint8_t c = uint8_t(s[i]);
  if (c < 0x80) return s[i++], c;
  int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  uint32_t cp = c & (0x3F >> n);
  ++i;
  for (int k = 0; k < n && i < s.size(); ++k) cp = (cp << 6) | (uint8_t(s[i++]) & 0x3F);
  return cp;
}

size_t complete_prefix(std::string_view s) {
  // Only the last three bytes can start an unfinished character.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t c = uint8_t(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* r = nullptr;
  // Explicit length: text may hold NUL characters.
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()), &r,
                                    utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(s);
  std::string out(reinterpret_cast<char*>(r), size_t(n));
  std::free(r);
  return out;
}

}  // namespace tf::unicode
