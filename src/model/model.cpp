#include "model/model.h"

#include "base/error.h"

namespace tf {

void Model::forward_sample(const std::vector<BatchRow>&, const std::vector<RowSampling>&, std::vector<RowCandidates>&) {
  fail("this backend samples from full logits");
}

void Model::last_logits_row(int64_t, float*) { fail("this backend samples from full logits"); }
namespace {
std::vector<FamilyEntry>& registry() {
  static std::vector<FamilyEntry> r;
  return r;
}
}  // namespace

bool register_family(FamilyEntry e) {
  registry().push_back(std::move(e));
  return true;
}

const std::vector<FamilyEntry>& families() { return registry(); }

const FamilyEntry& family_for_architecture(const std::string& arch) {
  std::string known;
  for (auto& f : registry())
    for (auto& a : f.architectures) {
      if (a == arch) return f;
      known += (known.empty() ? "" : ", ") + a;
    }
  fail("architecture '{}' is not supported (known: {})", arch, known);
}

const FamilyEntry& family_for_model_type(const std::string& model_type) {
  std::string known;
  for (auto& f : registry())
    for (auto& t : f.model_types) {
      if (t == model_type) return f;
      known += (known.empty() ? "" : ", ") + t;
    }
  fail("config.json model_type '{}' is not supported (known: {})", model_type, known);
}

}  // namespace tf
