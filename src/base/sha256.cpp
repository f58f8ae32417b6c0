#include "base/sha256.h"

#include <openssl/evp.h>

#include "base/error.h"

namespace tf {

std::array<uint8_t, 32> sha256(std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  int ok = EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  TF_CHECK(ok == 1 && len == 32, "EVP_Digest failed");
  return out;
}

std::string sha256_hex(std::string_view data) {
  static const char* kHex = "0123456789abcdef";
  auto d = sha256(data);
  std::string s(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

}  // namespace tf
