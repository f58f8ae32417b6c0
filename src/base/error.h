#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tf {

// Failure caused by input (file, request, flag): the message is for the user and the caller may recover.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, std::string param = {}) : std::runtime_error(msg), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;  // the request field at fault, when there is one
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw Error(fmt::format(f, std::forward<A>(a)...));
}

}  // namespace tf

// Broken invariant (a bug, not bad input): abort with file:line.
#define TF_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) ::tf::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
