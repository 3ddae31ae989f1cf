// An error that forge serve answers over HTTP, in the shape OpenAI's API and llama.cpp's
// server use: {"error": {"message": "...", "type": "...", "param": ..., "code": status}}.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace forge::serve {

class ApiError : public std::runtime_error {
 public:
  /// `param`: the request field at fault ("" for none). The type follows from the status:
  /// 400/413 invalid_request_error, 401 authentication_error, 404 not_found_error,
  /// 503 unavailable_error, anything else server_error.
  ApiError(int status, const std::string& message, std::string param = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  nlohmann::json body() const { return error_body(status_, what(), param_); }

  static std::string type_of(int status) {
    switch (status) {
      case 400:
      case 413: return "invalid_request_error";
      case 401: return "authentication_error";
      case 404: return "not_found_error";
      case 503: return "unavailable_error";
      default: return "server_error";
    }
  }
  static nlohmann::json error_body(int status, const std::string& message,
                                   const std::string& param = "") {
    nlohmann::json e = {{"message", message}, {"type", type_of(status)}, {"code", status}};
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    return {{"error", e}};
  }

 private:
  int status_;
  std::string param_;
};

}  // namespace forge::serve
