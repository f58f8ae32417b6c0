#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/generator.h"
#include "engine/loaded_model.h"

namespace tf::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string name;          // model id served on /v1/models
  int64_t context = 4096;
  int64_t max_tokens = 2048;  // default reply cap when the request sets none
  double temperature = 0.8, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0;
  std::string seed_salt = "tensorfold";
  int http_threads = 300;    // open connections held at once
};

// The OpenAI-compatible HTTP front of one loaded model; one generation runs at a time for now.
class HttpServer {
 public:
  HttpServer(LoadedModel& model, ServerOptions opts);
  ~HttpServer();
  // Blocks serving until stop() (from a signal handler thread) or a bind failure (throws).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
