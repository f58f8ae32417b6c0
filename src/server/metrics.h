#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"

namespace prometheus {
class Registry;
}

namespace tf::server {

// Prometheus registry of the server: request counts and latencies observed here, engine figures read at scrape.
class Metrics {
 public:
  Metrics();
  ~Metrics();
  void request_done(const std::string& route, int code);
  void observe(const EngineResult& r);
  std::string render(const EngineStats& s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
