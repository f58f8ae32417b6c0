#include "backend/kernel_registry.h"

namespace tf {
namespace {

const char* kMatmulShapes = "n_in a multiple of max(32, block); any n_out >= 1; any rows >= 1 (tiles of 4)";
const char* kMatmulSweep = "n_in x n_out: 576x1536, 1536x576, 576x192, 256x33, 512x7; rows 1,2,3,5,7,16; NaN/inf rows";
const char* kDotBound = "|y - y64| <= (n_in/8 + 8) * 2^-24 * sum|w_i x_i| (8-lane f32 accumulation, exact decode)";

KernelRecord matmul(const char* fmt, std::vector<PlantedControl> ctl) {
  return {std::string("matmul.") + fmt, "cpu", {fmt}, kMatmulShapes, kMatmulSweep, kDotBound, std::move(ctl)};
}

std::vector<KernelRecord> make_records() {
  std::vector<KernelRecord> r;
  r.push_back(matmul("f32", {{1, "non-finite activation read as 0"}, {2, "last block's terms lost"}}));
  r.push_back(matmul("f16", {{3, "accumulator rounded to fp16 each block"}, {4, "write one row past the end"}}));
  r.push_back(matmul("bf16", {{5, "row reads its neighbour's activations"}, {6, "last block's terms lost"}}));
  r.push_back(matmul("q4_0", {{7, "low and high nibbles swapped"}, {8, "non-finite activation read as 0"}}));
  r.push_back(matmul("q4_1", {{9, "block minimum dropped"}, {10, "accumulator rounded to fp16 each block"}}));
  r.push_back(matmul("q8_0", {{11, "int8 quants read as unsigned"}, {12, "row reads its neighbour's activations"}}));
  r.push_back(matmul("q4_k", {{13, "sub-block scales 4..7 read from 0..3"}, {14, "write one row past the end"}}));
  r.push_back(matmul("q6_k", {{15, "sign of sub-block scale dropped"}, {16, "last block's terms lost"}}));
  r.push_back({"matmul.generic", "cpu", {"q5_0", "q5_1", "q2_k", "q3_k", "q5_k"}, kMatmulShapes,
               "576x64, 512x33 per format; rows 1,2,3,5,7,16; NaN rows", kDotBound,
               {{17, "last block skipped"}, {18, "non-finite activation read as 0"}}});
  r.push_back({"matmul.fp8_block", "cpu", {"fp8_block e8m0", "fp8_block f32"},
               "n_in a multiple of 32, B a multiple of 32 (partial edge blocks), any n_out, any rows",
               "B=128: 4096x1024 (V4 wq_a), 160x200 (partial right and bottom blocks); B=32: 5120x64 (V4.1 slice), "
               "96x33; f32 scales 256x40; rows 1,2,3,5,7 (1,5 for the big shapes); NaN rows, E8M0 255",
               "|y - y64| <= (n_in/8 + 8) * 2^-24 * sum|w_i x_i| (+ 2^-24 per term for f32 scales)",
               {{60, "E8M0 scale read with bias 128"}, {62, "every group takes the row's first scale"},
                {65, "accumulator rounded to fp16 each block (f32 scales)"}}});
  r.push_back({"matmul.mxfp4", "cpu", {"mxfp4"}, "n_in a multiple of 32, any n_out, any rows",
               "5120x2304 (V4.1 routed w1/w3), 2048x96, 64x7; rows 1,2,3,5,7 (1,5 for the big shape); NaN rows",
               "|y - y64| <= (n_in/8 + 8) * 2^-24 * sum|w_i x_i|",
               {{61, "high nibble read first"}, {63, "non-finite activation read as 0"}}});
  r.push_back({"matmul.experts", "cpu", {"mxfp4", "fp8_block e8m0"}, "experts sharing n_in x n_out; any pairs",
               "8 experts 256x96, 37 (row, expert) pairs over 11 rows incl. repeats, unused and lone experts",
               "each pair bit-equal to matmul_scaled of its row alone", {{64, "the neighbouring expert's weights"}}});
  r.push_back({"rmsnorm", "cpu", {"f32"}, "any n", "n = 576, 64, 1; rows 1,3,7",
               "|y - y64| <= 4 * 2^-24 * |y64| + 2^-126", {{20, "sum of squares lost"}, {21, "write past the end"}}});
  r.push_back({"rope", "cpu", {"f32"}, "even n_rot <= head_dim, NORM and NEOX pairings",
               "head_dim 64, n_rot 64 and 32, positions 0..8191 sampled, both pairings",
               "|y - y64| <= 8 * 2^-24 * (|x0| + |x1|)",
               {{22, "pairs taken with the other pairing"}, {23, "angles computed in f32 (base^x drift)"}}});
  r.push_back({"attention", "cpu", {"f32"}, "head_dim any, GQA groups n_head/n_kv, causal over [0, pos]",
               "head_dim 64, 9 heads / 3 kv, keys 1..300, rows 1,2,5 at mixed positions",
               "|o - o64| <= (2*head_dim + n_keys + 16) * 2^-24 * max|v|",
               {{30, "one key past the causal limit read"}, {31, "query head mapped to the wrong KV head"}}});
  r.push_back({"swiglu", "cpu", {"f32"}, "any n", "n = 1536, 7; values up to |x| = 30",
               "|y - y64| <= 4 * 2^-24 * |silu(g) * u| + 2^-140",
               {{40, "sigmoid sign slip"}, {41, "reads the neighbour's up value"}}});
  r.push_back({"embedding", "cpu", {"f32", "f16", "bf16", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k"},
               "any table the codecs decode", "vocab 300 x 256, ids incl. 0 and last", "bit-exact decode",
               {{42, "off-by-one row"}, {43, "first element lost"}}});
  r.push_back({"argmax", "cpu", {"f32"}, "any n", "n = 49152 with planted ties", "exact, ties to lower id",
               {{50, "ties to the higher id"}, {53, "element 1 never considered"}}});
  r.push_back({"topk", "cpu", {"f32"}, "any n, k <= n", "n = 49152, k 1..64 with planted ties",
               "exact order by (logit desc, id asc)", {{51, "ties left unordered"}, {54, "last id never considered"}}});
  r.push_back({"softmax", "cpu", {"f32"}, "any n", "n = 49152, 5", "|p - p64| <= 2n * 2^-52",
               {{52, "normalisation lost"}, {55, "max not subtracted (overflow)"}}});
  return r;
}

}  // namespace

const std::vector<KernelRecord>& kernel_records(std::string_view backend) {
  static const std::vector<KernelRecord> cpu = make_records();
  static const std::vector<KernelRecord> none;
  return backend == "cpu" ? cpu : none;
}

const KernelRecord* find_kernel(std::string_view backend, std::string_view name) {
  for (auto& r : kernel_records(backend))
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace tf
