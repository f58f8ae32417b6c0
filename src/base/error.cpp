#include "base/error.h"

#include <cstdio>
#include <cstdlib>

namespace tf {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "TF_CHECK failed at %s:%d: %s %s\n", file, line, expr, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tf
