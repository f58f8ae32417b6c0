#include "base/env_switch.h"

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace tf {

int env_switch(const char* name, int n_values, const char* meaning) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  const std::string s(v);
  for (int i = 0; i < n_values; ++i)
    if (s == std::to_string(i)) return i;
  fail("{}={}: takes 0 to {} or nothing ({})", name, s, n_values - 1, meaning);
}

}  // namespace tf
