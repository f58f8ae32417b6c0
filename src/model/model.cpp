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

namespace {

// The family listing `name` in its `names` field; else nullptr and `known` gets every listed name.
const FamilyEntry* find_family(std::vector<std::string> FamilyEntry::*names, const std::string& name,
                               std::string& known) {
  for (auto& f : registry())
    for (auto& n : f.*names) {
      if (n == name) return &f;
      known += (known.empty() ? "" : ", ") + n;
    }
  return nullptr;
}

}  // namespace

const FamilyEntry& family_for_architecture(const std::string& arch) {
  std::string known;
  if (const FamilyEntry* f = find_family(&FamilyEntry::architectures, arch, known)) return *f;
  fail("architecture '{}' is not supported (known: {})", arch, known);
}

const FamilyEntry& family_for_model_type(const std::string& model_type) {
  std::string known;
  if (const FamilyEntry* f = find_family(&FamilyEntry::model_types, model_type, known)) return *f;
  fail("config.json model_type '{}' is not supported (known: {})", model_type, known);
}

}  // namespace tf
