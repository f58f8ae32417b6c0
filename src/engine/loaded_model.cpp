#include "engine/loaded_model.h"

#include <filesystem>

#include "base/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace tf {

std::optional<ChatFormat> chat_format_of(const GgufFile& f, const std::string& override_name) {
  if (!override_name.empty()) {
    ChatFormat c = ChatFormat::from_name(override_name);
    return c;
  }
  auto tmpl = f.get_string("tokenizer.chat_template");
  if (!tmpl) return std::nullopt;
  return ChatFormat::from_template(*tmpl);
}

BackendChoice backend_for(const GgufFile& f, const std::string& want) {
  BackendChoice b = choose_backend(want);
  if (b.name != "cuda") return b;
  auto arch = f.get_string("general.architecture");
  if (!arch) fail("{}: required metadata 'general.architecture' is missing", f.path());
  const FamilyEntry& fam = family_for_architecture(*arch);
  std::string why = fam.load_gguf_cuda ? fam.cuda_refusal(f) : fmt::format("family '{}' has no CUDA path", fam.name);
  if (why.empty()) return b;
  if (want == "cuda") fail("--backend cuda: {}: {}", f.path(), why);
  return {"cpu", "CUDA cannot run this model: " + why, 0, 0};
}

void check_context(const LoadedModel& m, int64_t context) {
  if (m.backend.name == "cuda" && context > kCudaMaxContext)
    fail("--context {} is longer than the CUDA attention kernel serves ({})", context, kCudaMaxContext);
}

namespace {

void check_vocab(const LoadedModel& m, const std::string& path) {
  if (m.tokenizer->n_vocab() != m.model->info().n_vocab)
    fail("{}: the tokenizer has {} tokens but the model's vocabulary is {}", path, m.tokenizer->n_vocab(),
         m.model->info().n_vocab);
}

void apply_thinking(LoadedModel& m, int thinking) {
  if (thinking < 0) return;
  if (!m.chat || !m.chat->has_thinking())
    fail("--{}thinking: the chat format ({}) has no thinking mode", thinking ? "" : "no-",
         m.chat ? m.chat->name() : "none");
  m.chat->set_thinking(thinking == 1);
}

}  // namespace

LoadedModel load_model(const std::string& path, ThreadPool& pool, const std::string& chat_template,
                       const std::string& backend, int thinking, bool qat) {
  LoadedModel m;
  if (is_safetensors_checkpoint(path)) {  // config.json picks the family; tokenizer.json sits beside it
    auto ck = std::make_shared<const SafetensorsCheckpoint>(path);
    const std::string dir = ck->folder().empty() ? std::string(".") : ck->folder();
    const JsonConfig cfg = JsonConfig::load(dir + "/config.json");
    const FamilyEntry& fam = family_for_model_type(cfg.get_string("model_type"));
    if (backend == "cuda") fail("--backend cuda: {}: the {} family has no CUDA path", path, fam.name);
    m.backend = choose_backend("cpu");
    m.model = fam.load_safetensors(ck, cfg, pool, qat);  // checks config and every tensor first
    m.tokenizer = Tokenizer::from_json_file(dir + "/tokenizer.json");
    const std::string gen_path = dir + "/generation_config.json";
    for (const JsonConfig& g : {cfg, std::filesystem::exists(gen_path) ? JsonConfig::load(gen_path) : cfg}) {
      if (!g.has("eos_token_id")) continue;
      for (int64_t id : g.get_ints("eos_token_id")) {  // an id or a list of ids, as transformers writes them
        if (id < 0 || id >= m.tokenizer->n_vocab())
          fail("{}: 'eos_token_id' {} is outside the tokenizer's {} ids", g.where(), id, m.tokenizer->n_vocab());
        m.tokenizer->add_end_of_generation(int32_t(id));
      }
    }
    m.chat = ChatFormat::from_name(chat_template.empty() ? fam.name : chat_template);  // V4: its own encoding
    apply_thinking(m, thinking);
    check_vocab(m, path);
    return m;
  }
  m.file = std::make_shared<const GgufFile>(path);
  auto arch = m.file->get_string("general.architecture");
  if (!arch) fail("{}: required metadata 'general.architecture' is missing", path);
  const FamilyEntry& fam = family_for_architecture(*arch);
  m.tokenizer = Tokenizer::from_gguf(*m.file);
  m.chat = chat_format_of(*m.file, chat_template);
  apply_thinking(m, thinking);
  m.backend = backend_for(*m.file, backend);
  m.model = m.backend.name == "cuda" ? fam.load_gguf_cuda(m.file) : fam.load_gguf(m.file, pool);
  check_vocab(m, path);
  return m;
}

}  // namespace tf
