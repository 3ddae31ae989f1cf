// forge serve: an OpenAI-compatible HTTP server (cpp-httplib) in front of the batching
// engine. Routes:
//   POST /v1/completions, /v1/chat/completions (stream: server-sent events), GET /v1/models,
//   GET /health (503 while loading, 200 when ready), GET /metrics (Prometheus text),
//   POST /tokenize, /detokenize.
// Errors are OpenAI-shaped JSON (api_error.h): 400 bad requests, 401 a wrong or missing API
// key, 404 unknown routes, 413 bodies over the limit, 503 while loading or when the queue is
// full (with Retry-After).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace forge::serve {

struct ServerOptions {
  std::string model;      // a model folder or .gguf file
  std::string tokenizer;  // "" : the model's own
  std::string device = "cpu";
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() says which)
  int parallel = 1;
  int max_queue = 64;
  std::string api_key;              // "" : no key needed
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int timeout_seconds = 30;         // a client that sends or reads nothing this long is dropped
};

class Server {
 public:
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds the address (Error(Io) when it cannot), starts answering (health 503), and
  /// loads the model in the background.
  void start();
  int port() const;
  /// Whether the model has loaded; load_error() is non-empty if loading failed.
  bool ready() const;
  std::string load_error() const;
  /// Graceful stop: refuses new connections, lets in-flight requests finish, then stops the
  /// engine. Idempotent.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace forge::serve
