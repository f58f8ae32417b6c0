#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "cli/bench_device.h"
#include "cli/common.h"
#include "engine/direct.h"
#include "engine/loaded_model.h"

namespace tf::cli {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Read bandwidth of a buffer far larger than the caches, summed by every pool thread: the decode floor's divisor.
double read_bandwidth(ThreadPool& pool) {
  const size_t n = size_t(1) << 27;  // 512 MiB of floats
  std::vector<float> buf(n, 1.0f);
  std::vector<double> sums(size_t(pool.size()) * 64);
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now_s();
    pool.parallel_for(n / 4096, 64, [&](size_t b, size_t e) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (size_t i = b * 4096; i < e * 4096; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += buf[i + k];
      sums[(b % size_t(pool.size())) * 8] += acc[0] + acc[7];
    });
    times.push_back(now_s() - t0);
  }
  return double(n * sizeof(float)) / median(times);
}

// A device-bench list given on the command line: at least one entry, each at least 1 (--depth 0 is the plain tg run).
std::vector<int32_t> bench_list(const std::string& s, const char* flag, const char* what) {
  const std::vector<int32_t> v = parse_id_list(s, what);
  if (v.empty()) fail("{} '{}' lists no value", flag, s);
  for (int32_t x : v)
    if (x < 1) fail("{} {}: every entry must be at least 1", flag, x);
  return v;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* c = app.add_subcommand("bench", "prompt processing and generation speed, like llama-bench");
  struct Opts {
    std::string model;
    int64_t pp = 512, tg = 128, reps = 5;
    int threads = 0;
    std::string backend = "cpu", pp_list, streams, depths;
    int64_t ubatch = 512;
  };
  auto o = std::make_shared<Opts>();
  c->add_option("model", o->model, "GGUF model file")->required();
  c->add_option("-p,--n-prompt", o->pp, "prompt tokens (ppN)");
  c->add_option("-n,--n-gen", o->tg, "generated tokens (tgN)");
  c->add_option("-r,--repetitions", o->reps,
                "timed runs (median); the device benchmark's prefills after an untimed one");
  c->add_option("--threads", o->threads);
  c->add_option("--backend", o->backend, "cpu, cuda or auto");
  c->add_option("--pp-list", o->pp_list, "device backend: prompt lengths, e.g. 512,4096 (default: -p)");
  auto* ubatch = c->add_option("--ubatch", o->ubatch, "device backend: prompt rows per forward");
  c->add_option("--streams", o->streams, "device backend: aggregate decode at these stream counts, e.g. 1,8,32,128");
  c->add_option("--depth", o->depths, "device backend: decode also after these prompt lengths, e.g. 4096,16384");
  return [o, ubatch] {
    // The device options are checked before the model loads, so a bad value fails at once on any machine.
    DeviceBenchOptions d;
    d.model = o->model;
    d.tg = o->tg;
    d.ubatch = o->ubatch;
    d.reps = o->reps;
    if (o->ubatch < 1) fail("--ubatch {}: a forward needs at least one prompt row", o->ubatch);
    if (o->pp < 1) fail("-p {}: the prompt needs at least one token", o->pp);
    if (o->tg < 1) fail("-n {}: generation needs at least one token", o->tg);
    if (o->reps < 1) fail("-r {}: at least one repetition is needed", o->reps);
    auto device_checks = [&] {  // named --backend cuda: refused now; auto: once the backend is known
      if (o->tg < 3) fail("-n {} is too short: the device benchmark leaves its first two tokens out", o->tg);
      if (o->pp_list.empty() && o->pp > kCudaMaxContext)
        fail("-p {}: a prompt must fit the CUDA context limit of {}", o->pp, kCudaMaxContext);
      if (o->tg + 1 > kCudaMaxContext)  // the decode run holds a slot past its last token
        fail("-n {}: the decode run must fit the CUDA context limit of {}", o->tg, kCudaMaxContext);
    };
    if (o->backend == "cuda") device_checks();
    const bool depth_given = !o->depths.empty();
    if (depth_given)
      for (int32_t v : bench_list(o->depths, "--depth", "--depth length")) {
        if (v + o->tg + 1 > kCudaMaxContext)  // as the decode run: a slot past its last token
          fail("--depth {}: depth + -n {} + 1 must fit the CUDA context limit of {}", v, o->tg, kCudaMaxContext);
        d.depths.push_back(v);
      }
    d.pp = {o->pp};
    if (!o->pp_list.empty()) {
      d.pp.clear();
      for (int32_t v : bench_list(o->pp_list, "--pp-list", "--pp-list length")) {
        if (v > kCudaMaxContext)
          fail("--pp-list {}: a prompt must fit the CUDA context limit of {}", v, kCudaMaxContext);
        d.pp.push_back(v);
      }
    }
    if (!o->streams.empty())
      for (int32_t v : bench_list(o->streams, "--streams", "--streams count")) d.streams.push_back(v);
    ThreadPool pool(o->threads);
    LoadedModel m = load_model(o->model, pool, "", o->backend);
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--depth", depth_given},
                                      {"--pp-list", !o->pp_list.empty()},
                                      {"--streams", !o->streams.empty()},
                                      {"--ubatch", ubatch->count() > 0}})
      if (given && m.backend.name != "cuda") fail("{} is measured by the device benchmark only (--backend cuda)", flag);
    if (m.backend.name == "cuda") {
      if (o->backend != "cuda") device_checks();  // a named cuda backend was checked before the load
      return run_device_bench(m, d);
    }
    const auto& info = m.model->info();
    std::mt19937 rng(42);
    std::vector<int32_t> ids(size_t(o->pp));
    for (auto& id : ids) id = int32_t(rng() % uint32_t(info.n_vocab));
    std::vector<float> logits(size_t(info.n_vocab));
    std::vector<double> pp_tps, tg_tps;
    for (int64_t rep = 0; rep < o->reps; ++rep) {
      DirectSequence pre(*m.model, o->pp);
      double t0 = now_s();
      for (int64_t b = 0; b < o->pp; b += 256)
        pre.feed(ids.data() + b, std::min<int64_t>(256, o->pp - b), logits.data(), false, true);
      pp_tps.push_back(double(o->pp) / (now_s() - t0));
      DirectSequence gen(*m.model, o->tg);
      int32_t tok = ids[0];
      double t1 = now_s();
      for (int64_t p = 0; p < o->tg; ++p) {
        gen.feed(&tok, 1, logits.data(), true, false);
        tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      tg_tps.push_back(double(o->tg) / (now_s() - t1));
    }
    double bw = read_bandwidth(pool);
    double bytes_per_token = double(info.weight_bytes) + double(info.kv_bytes_per_token) * double(o->tg) / 2;
    double floor_tps = bw / bytes_per_token;
    std::printf("machine: %s, %u hardware threads, %d pool threads\n", cpu_name().c_str(),
                std::thread::hardware_concurrency(), pool.size());
    std::printf("model: %s (%.1fM params, %.1f MiB weights)\n", o->model.c_str(), double(info.n_params) / 1e6,
                double(info.weight_bytes) / (1 << 20));
    std::printf("| test   | tok/s (median of %lld) | min    | max    |\n", (long long)o->reps);
    std::printf("| pp%-4lld | %21.2f | %6.2f | %6.2f |\n", (long long)o->pp, median(pp_tps),
                *std::min_element(pp_tps.begin(), pp_tps.end()), *std::max_element(pp_tps.begin(), pp_tps.end()));
    std::printf("| tg%-4lld | %21.2f | %6.2f | %6.2f |\n", (long long)o->tg, median(tg_tps),
                *std::min_element(tg_tps.begin(), tg_tps.end()), *std::max_element(tg_tps.begin(), tg_tps.end()));
    std::printf(
        "memory read bandwidth: %.2f GB/s; bytes read per decoded token: %.1f MB; floor %.1f tok/s; "
        "tg at %.1f%% of the floor\n",
        bw / 1e9, bytes_per_token / 1e6, floor_tps, 100.0 * median(tg_tps) / floor_tps);
    return 0;
  };
}

}  // namespace tf::cli
