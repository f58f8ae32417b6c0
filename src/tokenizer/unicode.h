#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::unicode {

// Replaces every ill-formed UTF-8 sequence by U+FFFD, one per maximal subpart (as Python's errors='replace').
std::string sanitize_utf8(std::string_view s);
// Appends the UTF-8 encoding of code point cp.
void append_utf8(std::string& out, uint32_t cp);
// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t next_code_point(std::string_view s, size_t& i);
// Length of the longest prefix of s made of complete UTF-8 characters (the rest may still grow into one).
size_t complete_prefix(std::string_view s);
// Canonical composition (NFC) through utf8proc.
std::string nfc(std::string_view s);

}  // namespace tf::unicode
