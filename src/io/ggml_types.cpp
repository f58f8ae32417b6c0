#include "io/ggml_types.h"

namespace tf {

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  switch (id) {
    case 0: return GgmlTypeInfo{"F32", 1, 4};
    case 1: return GgmlTypeInfo{"F16", 1, 2};
    case 2: return GgmlTypeInfo{"Q4_0", 32, 18};
    case 3: return GgmlTypeInfo{"Q4_1", 32, 20};
    case 6: return GgmlTypeInfo{"Q5_0", 32, 22};
    case 7: return GgmlTypeInfo{"Q5_1", 32, 24};
    case 8: return GgmlTypeInfo{"Q8_0", 32, 34};
    case 9: return GgmlTypeInfo{"Q8_1", 32, 36};
    case 10: return GgmlTypeInfo{"Q2_K", 256, 84};
    case 11: return GgmlTypeInfo{"Q3_K", 256, 110};
    case 12: return GgmlTypeInfo{"Q4_K", 256, 144};
    case 13: return GgmlTypeInfo{"Q5_K", 256, 176};
    case 14: return GgmlTypeInfo{"Q6_K", 256, 210};
    case 15: return GgmlTypeInfo{"Q8_K", 256, 292};
    case 16: return GgmlTypeInfo{"IQ2_XXS", 256, 66};
    case 17: return GgmlTypeInfo{"IQ2_XS", 256, 74};
    case 18: return GgmlTypeInfo{"IQ3_XXS", 256, 98};
    case 19: return GgmlTypeInfo{"IQ1_S", 256, 50};
    case 20: return GgmlTypeInfo{"IQ4_NL", 32, 18};
    case 21: return GgmlTypeInfo{"IQ3_S", 256, 110};
    case 22: return GgmlTypeInfo{"IQ2_S", 256, 82};
    case 23: return GgmlTypeInfo{"IQ4_XS", 256, 136};
    case 24: return GgmlTypeInfo{"I8", 1, 1};
    case 25: return GgmlTypeInfo{"I16", 1, 2};
    case 26: return GgmlTypeInfo{"I32", 1, 4};
    case 27: return GgmlTypeInfo{"I64", 1, 8};
    case 28: return GgmlTypeInfo{"F64", 1, 8};
    case 29: return GgmlTypeInfo{"IQ1_M", 256, 56};
    case 30: return GgmlTypeInfo{"BF16", 1, 2};
    case 34: return GgmlTypeInfo{"TQ1_0", 256, 54};
    case 35: return GgmlTypeInfo{"TQ2_0", 256, 66};
    case 39: return GgmlTypeInfo{"MXFP4", 32, 17};
    default: return std::nullopt;
  }
}

std::string_view ggml_type_name(GgmlType t) {
  auto i = ggml_type_info(uint32_t(t));
  return i ? i->name : std::string_view("unknown");
}

}  // namespace tf
