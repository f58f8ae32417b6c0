#pragma once
#include <stdexcept>
#include <string>

namespace tf::server {

// An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}} with its HTTP status.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
  std::string body() const;
};

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& type,
                       const std::string& code);

}  // namespace tf::server
