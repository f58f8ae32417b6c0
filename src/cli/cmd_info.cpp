#include <cstdio>

#include "backend/cpu/ops.h"
#include "base/error.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace tf::cli {
namespace {

void print_summary(const FamilyEntry& fam, const ModelInfo& i) {
  std::printf("family:        %s\n", fam.name.c_str());
  std::printf("parameters:    %lld (%.2fB)\n", (long long)i.n_params, double(i.n_params) / 1e9);
  std::printf("formats:      ");
  for (auto& [fmt, n] : i.tensors_by_format) std::printf(" %s x%lld", fmt.c_str(), (long long)n);
  std::printf("\nlayers:        %lld, hidden %lld, vocabulary %lld, trained context %lld\n", (long long)i.n_layer,
              (long long)i.n_embd, (long long)i.n_vocab, (long long)i.n_ctx_train);
}

// A safetensors checkpoint: config.json picks the family by model_type, which checks every tensor it reads.
int info_safetensors(const std::string& path, int64_t context, const std::string& backend) {
  const SafetensorsCheckpoint ck(path);
  const std::string cfg_path = (ck.folder().empty() ? std::string(".") : ck.folder()) + "/config.json";
  const JsonConfig cfg = JsonConfig::load(cfg_path);
  const std::string model_type = cfg.get_string("model_type");
  std::printf("checkpoint:    %s (safetensors, %zu shard%s, %.1f MiB)\n", path.c_str(), ck.shards().size(),
              ck.shards().size() == 1 ? "" : "s", double(ck.file_bytes()) / (1 << 20));
  std::printf("model_type:    %s\n", model_type.c_str());
  const FamilyEntry& fam = family_for_model_type(model_type);
  const ModelInfo i = fam.inspect_safetensors(ck, cfg);
  print_summary(fam, i);
  const int64_t ctx = std::min(context, i.n_ctx_train);
  const double kv = double(i.kv_bytes_per_token) * double(ctx);
  std::printf("memory:        weights %.1f MiB (mapped from %.1f MiB of files) + per-token state %.1f MiB at context "
              "%lld\n",
              double(i.weight_bytes) / (1 << 20), double(ck.file_bytes()) / (1 << 20), kv / (1 << 20),
              (long long)ctx);
  if (backend == "cuda") {
    std::printf("backend:       cuda: refused: the %s family has no CUDA path\n", fam.name.c_str());
    return 2;
  }
  std::printf("backend:       cpu (every tensor format supported by the CPU kernels)\n");
  std::printf("forward:       cpu (float32; the release's QAT roundings on for run/serve, --no-qat turns them off)\n");
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto* c = app.add_subcommand("info", "describe a model without loading its weights");
  auto model = std::make_shared<std::string>();
  auto context = std::make_shared<int64_t>(4096);
  auto backend = std::make_shared<std::string>("auto");
  c->add_option("model", *model, "GGUF model file, or a safetensors checkpoint (file or folder)")->required();
  c->add_option("--context", *context, "context size used for the memory estimate");
  c->add_option("--backend", *backend, "auto, cpu or cuda: which backend to report on");
  return [model, context, backend] {
    if (is_safetensors_checkpoint(*model)) return info_safetensors(*model, *context, *backend);
    auto f = std::make_shared<const GgufFile>(*model);
    auto arch = f->get_string("general.architecture").value_or("(missing)");
    std::printf("file:          %s (GGUF v%u, %.1f MiB)\n", model->c_str(), f->version(),
                double(f->file_size()) / (1 << 20));
    std::printf("architecture:  %s\n", arch.c_str());
    const FamilyEntry& fam = family_for_architecture(arch);
    ModelInfo i = fam.inspect_gguf(*f);
    print_summary(fam, i);
    int64_t ctx = std::min(*context, i.n_ctx_train);
    double kv = double(i.kv_bytes_per_token) * double(ctx);
    std::printf("memory:        weights %.1f MiB (mapped) + KV cache %.1f MiB at context %lld = %.1f MiB\n",
                double(i.weight_bytes) / (1 << 20), kv / (1 << 20), (long long)ctx,
                (double(i.weight_bytes) + kv) / (1 << 20));
    try {
      auto chat = chat_format_of(*f);
      std::printf("chat template: %s\n", chat ? chat->name() : "none");
    } catch (const Error& e) {
      std::printf("chat template: refused: %s\n", e.what());
    }
    BackendChoice b = backend_for(*f, *backend);
    std::printf("backend:       %s: %s\n", b.name.c_str(), b.detail.c_str());
    std::printf("serve --chunk: %lld prompt tokens a sequence per round by default\n",
                (long long)default_chunk(b.name, EngineOptions{}.chunk));
    if (b.name == "cuda") {
      const double need = double(i.weight_bytes) + kv;
      std::printf("device memory: %.1f MiB needed of %.1f MiB free%s\n", need / (1 << 20),
                  double(b.device_free_bytes) / (1 << 20), need < double(b.device_free_bytes) ? "" : " (too little)");
      bool refused = false;
      if (fam.cuda_memory_note) {
        const auto [note, refuses] = fam.cuda_memory_note(*f, b.device_free_bytes);
        if (!note.empty()) std::printf("%s\n", note.c_str());
        refused = refuses;
      }
      return need < double(b.device_free_bytes) && !refused ? 0 : 2;
    }
    std::printf("cpu kernels:  ");
    std::string refusal;
    for (auto& t : f->tensors()) {
      if (t.ne.size() != 2) continue;
      cpu::WeightView w{t.name, t.type, t.ne[0], t.ne[1], t.data, 0};
      if (auto why = cpu::matmul_refusal(w); !why.empty()) {
        refusal = why;
        break;
      }
    }
    std::printf(refusal.empty() ? " (every tensor format supported)\n" : "\n");
    if (!refusal.empty()) std::printf("would refuse:  %s\n", refusal.c_str());
    return refusal.empty() ? 0 : 2;
  };
}

}  // namespace tf::cli
