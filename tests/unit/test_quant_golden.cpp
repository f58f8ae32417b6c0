#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "io/gguf.h"
#include "quant/ggml/dequant.h"

namespace tf {
namespace {

// Golden blocks written and dequantised by gguf-py (tools/fixtures/gen_quant_golden.py): every bit must match.
TEST(QuantGolden, ExactDequantisationMatchesGgufPy) {
  GgufFile f(std::string(TF_SOURCE_DIR) + "/tests/fixtures/quant_golden.gguf");
  int checked = 0;
  for (const auto& t : f.tensors()) {
    const std::string suffix = ".data";
    if (t.name.size() < suffix.size() || t.name.compare(t.name.size() - 5, 5, suffix) != 0) continue;
    const std::string type = t.name.substr(0, t.name.size() - 5);
    const GgufTensor* exp = f.tensor(type + ".expected");
    ASSERT_NE(exp, nullptr) << type;
    ASSERT_EQ(exp->n_elements(), t.n_elements()) << type;
    std::vector<float> got(size_t(t.n_elements()));
    ASSERT_TRUE(quant::dequantize(t.type, t.data, got.data(), t.n_elements())) << type;
    for (int64_t i = 0; i < t.n_elements(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[size_t(i)], 4);
      std::memcpy(&b, exp->data + 4 * i, 4);
      ASSERT_EQ(a, b) << type << " element " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

}  // namespace
}  // namespace tf
