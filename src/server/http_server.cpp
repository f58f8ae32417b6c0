#include "server/http_server.h"

#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "server/context.h"

namespace tf::server {
namespace {

using json = nlohmann::json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(e.body(), "application/json");
}

// Compares digests without an early exit, so timing does not reveal how much of a key matched.
bool same_digest(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

std::vector<std::string> load_api_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read the API key file '{}'", path);
  std::vector<std::string> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    line = line.substr(start);
    if (line.rfind("sha256:", 0) == 0) {
      std::string hex = line.substr(7);
      for (auto& ch : hex) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
        fail("{}:{}: a sha256: key needs 64 hex digits", path, n);
      out.push_back(hex);
    } else {
      out.push_back(sha256_hex(line));
    }
  }
  if (out.empty()) fail("the API key file '{}' holds no keys", path);
  return out;
}

constexpr size_t kMaxBody = size_t(32) << 20;
constexpr int kListenBacklog = 4096;

struct HttpServer::Impl {
  ServerContext ctx;
  httplib::Server svr;
  int listen_fd = -1;  // captured when httplib creates it, to raise its backlog

  Impl(LoadedModel& model, ServerOptions o) : ctx(model, std::move(o)) {}

  bool authorised(const httplib::Request& req) const {
    if (ctx.opts.key_hashes.empty() || req.path == "/health") return true;
    std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) != 0) return false;
    std::string digest = sha256_hex(auth.substr(7));
    bool ok = false;
    for (auto& h : ctx.opts.key_hashes) ok |= same_digest(h, digest);
    return ok;
  }

  void routes() {
    svr.new_task_queue = [n = ctx.opts.http_threads] { return new httplib::ThreadPool(size_t(n)); };
    svr.set_payload_max_length(kMaxBody);
    svr.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    svr.set_keep_alive_max_count(1000);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (authorised(req)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "",
                               "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      // Only served routes become label values, so clients cannot grow the series without limit.
      static const std::set<std::string> kRoutes = {"/health", "/v1/models", "/v1/chat/completions", "/v1/completions",
                                                    "/v1/responses", "/tokenize", "/detokenize", "/metrics"};
      ctx.metrics.request_done(kRoutes.count(req.path) ? req.path : "other", res.status);
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json d = {{"id", ctx.opts.name}, {"object", "model"}, {"created", 0}, {"owned_by", "tensorfold"},
                {"max_model_len", ctx.engine.context()}};
      res.set_content(json{{"object", "list"}, {"data", json::array({d})}}.dump(), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(ctx.metrics.render(ctx.engine.stats()), "text/plain; version=0.0.4");
    });
    // POST bodies are read here under the size limit, chunked or not, before any handler sees them.
    using Handler = void (*)(ServerContext&, const std::string&, httplib::Response&);
    auto post = [this](const char* path, Handler fn) {
      svr.Post(path, [this, fn](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& read) {
        std::string body;
        const std::string length = req.get_header_value("Content-Length");
        bool too_big = !length.empty() && std::strtoull(length.c_str(), nullptr, 10) > kMaxBody;
        const bool ok = !too_big && read([&](const char* data, size_t len) {
          too_big = body.size() + len > kMaxBody;
          if (!too_big) body.append(data, len);
          return !too_big;
        });
        try {
          if (too_big)
            throw ApiError(413, "request body too large (limit 32 MiB)", "", "invalid_request_error", "body_too_large");
          if (!ok) throw ApiError(400, "the request body could not be read", "", "invalid_request_error", "bad_body");
          fn(ctx, body, res);
        } catch (const ApiError& e) {
          send_error(res, e);
        } catch (const Error& e) {
          send_error(res, ApiError(400, e.what(), e.param()));
        }
      });
    };
    post("/v1/chat/completions", [](ServerContext& c, const std::string& b, httplib::Response& r) {
      handle_completion(c, b, r, true);
    });
    post("/v1/completions", [](ServerContext& c, const std::string& b, httplib::Response& r) {
      handle_completion(c, b, r, false);
    });
    post("/v1/responses", handle_responses);
    post("/tokenize", handle_tokenize);
    post("/detokenize", handle_detokenize);
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404)
        res.set_content(error_body(404, fmt::format("no route {} {}", req.method, req.path), "", "not_found_error", ""),
                        "application/json");
      else if (res.status == 413)
        res.set_content(error_body(413, "request body too large (limit 32 MiB)", "", "invalid_request_error",
                                   "body_too_large"), "application/json");
      else
        res.set_content(error_body(res.status, "request failed", "", "invalid_request_error", ""), "application/json");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      log::error("request failed: {}", what);
      res.status = 500;
      res.set_content(error_body(500, what, "", "server_error", ""), "application/json");
    });
  }
};

HttpServer::HttpServer(LoadedModel& model, ServerOptions opts) : impl_(std::make_unique<Impl>(model, std::move(opts))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::run() {
  const auto& o = impl_->ctx.opts;
  if (!impl_->svr.bind_to_port(o.host, o.port))
    fail("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port);
  // httplib listens with a backlog of 5; a burst of hundreds of clients needs the kernel to queue them.
  if (impl_->listen_fd >= 0 && ::listen(impl_->listen_fd, kListenBacklog) != 0)
    log::warn("could not raise the listen backlog to {}", kListenBacklog);
  log::info("serving '{}' on http://{}:{}/v1 ({} lanes, context {})", o.name, o.host, o.port, o.engine.parallel,
            o.engine.context);
  impl_->svr.listen_after_bind();
}

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace tf::server
