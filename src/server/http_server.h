#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace tf::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string name;           // model id served on /v1/models
  int64_t max_tokens = 2048;  // default reply cap when the request sets none
  double temperature = 0.8, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0;
  std::string seed_salt = "tensorfold";
  int http_threads = 300;                 // open connections held at once
  std::vector<std::string> key_hashes;    // SHA-256 hex of accepted API keys; empty: no auth
  EngineOptions engine;
};

// Reads --api-key-file: one key per line, raw or "sha256:<hex>"; returns SHA-256 hex digests.
std::vector<std::string> load_api_keys(const std::string& path);

// The OpenAI-compatible HTTP front of one loaded model, over a continuous-batching engine.
class HttpServer {
 public:
  HttpServer(LoadedModel& model, ServerOptions opts);
  ~HttpServer();
  // Blocks serving until stop() (from a signal handler) or a bind failure (throws).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
