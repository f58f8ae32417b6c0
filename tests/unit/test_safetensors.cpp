// The safetensors reader against files written by the `safetensors` library (tests/fixtures/safetensors, made by
// tools/fixtures/gen_safetensors_fixture.py with safetensors 0.8.0), and every header defect refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/scalar.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace tf;

namespace {

std::string fixture(const std::string& rel) {
  return std::string(TF_SOURCE_DIR) + "/tests/fixtures/safetensors/" + rel;
}

// A scratch folder per test, removed afterwards.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("tf_st_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

// A file from a header text and a data section, byte for byte.
std::string st_bytes(const std::string& header, size_t data_bytes, uint64_t header_len_override = 0) {
  std::string out(8, '\0');
  const uint64_t n = header_len_override ? header_len_override : header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out += std::string(data_bytes, '\x11');
  return out;
}

std::string refusal(const std::string& path) {
  try {
    SafetensorsCheckpoint c(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, ReadsTheLibrarysFileInPlace) {
  SafetensorsFile f(fixture("single.safetensors"));
  ASSERT_EQ(f.tensors().size(), 7u);
  const StTensor* a = f.find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 4}));
  for (int i = 0; i < 12; ++i) {
    float v;
    std::memcpy(&v, a->data + 4 * i, 4);
    EXPECT_EQ(v, float(i) * 0.5f - 1.0f);
  }
  const StTensor* b = f.find("b.f16");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, StDtype::F16);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(load_u16(b->data + 2 * i), f32_to_f16(float(-2.0 + 0.8 * i))) << i;  // numpy: linspace, then f16
  const StTensor* c = f.find("c.i64");
  ASSERT_NE(c, nullptr);
  int64_t cv[6];
  std::memcpy(cv, c->data, 48);
  EXPECT_EQ(cv[2], int64_t(1) << 40);
  EXPECT_EQ(cv[5], -(int64_t(1) << 62));
  EXPECT_EQ(f.find("e.i8")->shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(int8_t(f.find("e.i8")->data[0]), -4);
  EXPECT_EQ(f.find("g.empty")->nbytes, 0u);
  EXPECT_EQ(f.find("g.empty")->n_elements(), 0);
  EXPECT_EQ(f.metadata().at("note"), "fixture");
  // Mapped, not copied: every tensor's bytes lie in the file's own mapping, at 8 + header + offset.
  for (const auto& t : f.tensors()) EXPECT_EQ(t.data, f.mapping() + 8 + f.header_bytes() + t.begin) << t.name;
}

TEST(Safetensors, ReadsAShardedCheckpointThroughItsIndex) {
  SafetensorsCheckpoint ck(fixture("sharded"));
  ASSERT_EQ(ck.shards().size(), 2u);
  ASSERT_EQ(ck.tensors().size(), 7u);
  SafetensorsFile single(fixture("single.safetensors"));
  for (const auto& t : single.tensors()) {
    const StTensor& s = ck.get(t.name);
    EXPECT_EQ(s.dtype, t.dtype);
    EXPECT_EQ(s.shape, t.shape);
    ASSERT_EQ(s.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(s.data, t.data, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(ck.get("f.f64").shard, 1);
  EXPECT_EQ(ck.data_bytes(), single.file_size() - 8 - single.header_bytes());
  EXPECT_EQ(ck.find("nope"), nullptr);
  try {
    ck.get("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
  }
}

TEST(Safetensors, RefusesEachHeaderDefectByName) {
  Scratch s;
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(refusal(s.write("ok.safetensors", st_bytes(ok, 16))), "");
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;
  };
  const Case cases[] = {
      {"short", std::string(5, '\0'), "shorter than the 8-byte header length"},
      {"len past end", st_bytes(ok, 16, 1000), "runs past the end of the file"},
      {"bad json", st_bytes(R"({"w":{"dtype":"F32",)", 16), "not valid JSON"},
      {"not object", st_bytes("[1,2]", 0), "not a JSON object"},
      {"unknown dtype", st_bytes(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1), "unknown dtype"},
      {"missing field", st_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", 4), "'w': missing 'data_offsets'"},
      {"negative dim", st_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "'w': shape"},
      {"size mismatch", st_bytes(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16),
       "'w': BF16 x [2,2] needs 8 bytes"},
      {"out of range", st_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16),
       "'w': data_offsets [8, 24] run past the data section"},
      {"reversed", st_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16), "end before they begin"},
      {"overlap",
       st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "tensor 'b' (bytes 4..12) overlaps tensor 'a'"},
      {"hole", st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "belong to no tensor"},
      {"trailing", st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "bytes 4..8"},
      {"metadata", st_bytes(R"({"__metadata__":{"k":1}})", 0), "__metadata__ 'k' must be a string"},
      {"count overflow", st_bytes(R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", 0),
       "'w': shape [2147483648,2147483648] is too large"},
  };
  for (const Case& c : cases) {
    const std::string msg = refusal(s.write("x.safetensors", c.bytes));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find("x.safetensors"), std::string::npos) << c.what << ": the message names the file";
  }
}

TEST(Safetensors, RefusesAnIndexThatDisagreesWithItsShards) {
  Scratch s;
  const std::string a = st_bytes(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4);
  const std::string b = st_bytes(R"({"y":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
  s.write("s1.safetensors", a);
  s.write("s2.safetensors", b);
  auto index = [&](const std::string& body) { s.write("model.safetensors.index.json", body); };
  index(R"({"metadata":{"total_size":6},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})");
  EXPECT_EQ(refusal(s.dir.string()), "");
  index(R"({"weight_map":{"x":"s1.safetensors","y":"s1.safetensors"}})");
  EXPECT_NE(refusal(s.dir.string()).find("tensor 'y' is named in the index under 's1.safetensors', which does not"),
            std::string::npos);
  index(R"({"weight_map":{"x":"s1.safetensors","y":"s3.safetensors"}})");
  EXPECT_NE(refusal(s.dir.string()).find("shard 's3.safetensors' named in the index is missing"), std::string::npos);
  index(R"({"weight_map":{"x":"s1.safetensors"}})");
  EXPECT_EQ(refusal(s.dir.string()), "");  // s2 is not named, so it is not read
  s.write("s1.safetensors", st_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                     R"("z":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4));
  EXPECT_NE(refusal(s.dir.string()).find("tensor 'z' in shard 's1.safetensors' is not in the index"),
            std::string::npos);
  index(R"({"weight_map":{"x":"../s1.safetensors"}})");
  EXPECT_NE(refusal(s.dir.string()).find("not a file in this folder"), std::string::npos);
  index(R"({"weight_map":)");
  EXPECT_NE(refusal(s.dir.string()).find("not valid JSON"), std::string::npos);
  index(R"({"metadata":{}})");
  EXPECT_NE(refusal(s.dir.string()).find("needs a 'weight_map'"), std::string::npos);
  fs::remove(s.dir / "model.safetensors.index.json");
  EXPECT_NE(refusal(s.dir.string()).find("no model.safetensors.index.json and no model.safetensors"),
            std::string::npos);
}

TEST(JsonConfig, TypedReadsNameTheKey) {
  const JsonConfig c = JsonConfig::parse(
      R"({"hidden_size": 64, "eps": 1e-6, "tie": false, "name": "x", "ratios": [0, 4, 128], "one": 3,
          "rope_scaling": {"type": "yarn", "factor": 16}, "nothing": null, "f": 2.0})",
      "config.json");
  EXPECT_EQ(c.get_int("hidden_size"), 64);
  EXPECT_EQ(c.get_int("f"), 2);
  EXPECT_DOUBLE_EQ(c.get_float("eps"), 1e-6);
  EXPECT_DOUBLE_EQ(c.get_float("hidden_size"), 64.0);
  EXPECT_FALSE(c.get_bool("tie"));
  EXPECT_EQ(c.get_ints("ratios"), (std::vector<int64_t>{0, 4, 128}));
  EXPECT_EQ(c.get_ints("one"), (std::vector<int64_t>{3}));
  EXPECT_FALSE(c.has("nothing"));
  EXPECT_FALSE(c.opt_int("absent").has_value());
  EXPECT_EQ(c.sub("rope_scaling").get_choice("type", {"yarn", "linear"}), "yarn");
  auto msg = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg([&] { c.get_int("vocab_size"); }), "config.json: 'vocab_size' is required but missing");
  EXPECT_EQ(msg([&] { c.get_int("nothing"); }), "config.json: 'nothing' is required but missing");
  EXPECT_EQ(msg([&] { c.get_int("eps"); }), "config.json: 'eps' must be an integer, found 1e-06");
  EXPECT_EQ(msg([&] { c.get_string("hidden_size"); }), "config.json: 'hidden_size' must be a string, found 64");
  EXPECT_EQ(msg([&] { c.get_ints("name"); }), "config.json: 'name' must be a list of integers, found \"x\"");
  EXPECT_EQ(msg([&] { c.get_ints("f"); }), "config.json: 'f' must be a list of integers, found 2.0");
  EXPECT_EQ(msg([&] { c.sub("rope_scaling").get_choice("type", {"linear"}); }),
            "config.json: 'rope_scaling.type' is 'yarn', which is not supported (known: linear)");
  EXPECT_EQ(msg([&] { c.sub("rope_scaling").get_int("original_max_position_embeddings"); }),
            "config.json: 'rope_scaling.original_max_position_embeddings' is required but missing");
  EXPECT_EQ(msg([&] { c.sub("name"); }), "config.json: 'name' must be an object, found \"x\"");
  EXPECT_NE(msg([] { JsonConfig::parse("{", "generation_config.json"); }).find("generation_config.json: not valid"),
            std::string::npos);
  EXPECT_NE(msg([] { JsonConfig::load("/nonexistent/config.json"); }).find("cannot read"), std::string::npos);
}
