#include <gtest/gtest.h>

#include "base/error.h"
#include "gguf_builder.h"
#include "io/gguf.h"

namespace tf {
namespace {

// A valid file: one KV, two F32 tensors [4] and [8, 2].
GgufBuilder valid() {
  GgufBuilder g;
  g.header(2, 1);
  g.kv_string("general.architecture", "llama");
  g.tensor("a", {4}, 0, 0);
  g.tensor("b", {8, 2}, 0, 32);
  g.align();
  g.data(32, 1);
  g.data(64, 2);
  return g;
}

std::string open_error(const GgufBuilder& g, const std::string& name) {
  try {
    GgufFile f(g.write(name));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, ValidFileMapsTensorsInPlace) {
  GgufFile f(valid().write("valid.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* b = f.tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->nbytes, 64u);
  EXPECT_EQ(b->data[0], 2);
  EXPECT_EQ(f.tensor("a")->data[31], 1);
}

TEST(Gguf, TruncatedFileIsRefused) {
  auto g = valid();
  g.b.resize(g.b.size() - 10);
  EXPECT_NE(open_error(g, "trunc_data.gguf").find("'b'"), std::string::npos);
  g.b.resize(40);
  EXPECT_NE(open_error(g, "trunc_header.gguf").find("truncated"), std::string::npos);
}

TEST(Gguf, BadMagicIsRefused) {
  auto g = valid();
  g.b[0] = 'X';
  EXPECT_NE(open_error(g, "magic.gguf").find("bad magic"), std::string::npos);
}

TEST(Gguf, UnknownTypeIdIsNamed) {
  GgufBuilder g;
  g.header(1, 0);
  g.tensor("weird", {32}, 77, 0);
  g.align();
  g.data(64);
  std::string e = open_error(g, "type.gguf");
  EXPECT_NE(e.find("'weird'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown type id 77"), std::string::npos) << e;
}

TEST(Gguf, OffsetPastTheEndIsNamed) {
  GgufBuilder g;
  g.header(1, 0);
  g.tensor("far", {4}, 0, 4096);
  g.align();
  g.data(32);
  std::string e = open_error(g, "offset.gguf");
  EXPECT_NE(e.find("'far'"), std::string::npos) << e;
  EXPECT_NE(e.find("past the end"), std::string::npos) << e;
}

TEST(Gguf, DuplicateNamesAreRefused) {
  GgufBuilder g;
  g.header(2, 0);
  g.tensor("same", {4}, 0, 0);
  g.tensor("same", {4}, 0, 32);
  g.align();
  g.data(64);
  EXPECT_NE(open_error(g, "dup.gguf").find("duplicate tensor name 'same'"), std::string::npos);
  GgufBuilder k;
  k.header(0, 2);
  k.kv_u32("x.y", 1);
  k.kv_u32("x.y", 2);
  EXPECT_NE(open_error(k, "dupkey.gguf").find("duplicate metadata key 'x.y'"), std::string::npos);
}

TEST(Gguf, TooManyDimsAreRefused) {
  GgufBuilder g;
  g.header(1, 0);
  g.tensor("deep", {1, 1, 1, 1, 4}, 0, 0);
  g.align();
  g.data(32);
  std::string e = open_error(g, "dims.gguf");
  EXPECT_NE(e.find("'deep' has n_dims 5"), std::string::npos) << e;
}

TEST(Gguf, OtherStructuralDefectsAreRefused) {
  GgufBuilder misaligned;
  misaligned.header(1, 0);
  misaligned.tensor("m", {4}, 0, 4);
  misaligned.align();
  misaligned.data(64);
  EXPECT_NE(open_error(misaligned, "misaligned.gguf").find("not a multiple of the alignment"), std::string::npos);
  GgufBuilder block;
  block.header(1, 0);
  block.tensor("q", {48}, 2, 0);  // Q4_0 rows must be multiples of 32
  block.align();
  block.data(64);
  EXPECT_NE(open_error(block, "block.gguf").find("not a multiple of its block size"), std::string::npos);
  GgufBuilder align;
  align.header(0, 1);
  align.kv_u32("general.alignment", 24);
  EXPECT_NE(open_error(align, "align.gguf").find("power of two"), std::string::npos);
  GgufBuilder version;
  version.header(0, 0, 1);
  EXPECT_NE(open_error(version, "version.gguf").find("version 1"), std::string::npos);
  GgufBuilder overlap;
  overlap.header(2, 0);
  overlap.tensor("p", {8}, 0, 0);
  overlap.tensor("r", {4}, 0, 32);
  overlap.align();
  overlap.data(64);
  EXPECT_EQ(open_error(overlap, "ok_adjacent.gguf"), "");
  GgufBuilder clash;
  clash.header(2, 0);
  clash.tensor("p", {16}, 0, 0);
  clash.tensor("r", {4}, 0, 32 - 32);
  clash.align();
  clash.data(64);
  EXPECT_NE(open_error(clash, "overlap.gguf").find("overlap"), std::string::npos);
  GgufBuilder bad_bool;
  bad_bool.header(0, 1);
  bad_bool.str("flag");
  bad_bool.put<uint32_t>(7);
  bad_bool.put<uint8_t>(2);
  EXPECT_NE(open_error(bad_bool, "bool.gguf").find("'flag'"), std::string::npos);
}

TEST(Gguf, TypedReadsNameTheKey) {
  GgufFile f(valid().write("typed.gguf"));
  EXPECT_FALSE(f.get_int("missing").has_value());
  try {
    f.get_int("general.architecture");
    FAIL() << "a string read as an integer must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
  }
}

}  // namespace
}  // namespace tf
