#include "backend/kernel_registry.h"

namespace tf {
namespace {

std::vector<KernelRecord> make_records() {
  const char* shapes =
      "tiled layout (F32, F16, tables, rows not a multiple of 64): n_in whole blocks, 16-byte aligned activations; any "
      "n_out (tiles of 32); any rows (passes of 8, 4, 2, 1)";
  const char* sweep =
      "576x1536, 1536x576, 4096x64, 32x33, 4608x2056 (rows 1,3,16,32,40); rows 1,2,3,7,16,64; a NaN row; the "
      "in-place residual form";
  const char* bound =
      "|y - y64| <= (ceil(units/slices) * unit/2 + slices + 2) * 2^-24 * sum|w_i x_i| (two fused sums per lane, slices "
      "added in order)";
  std::vector<KernelRecord> r;
  for (const char* f : {"f32", "f16", "bf16", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k"})
    r.push_back({std::string("gemv.") + f,
                 "cuda",
                 {f},
                 shapes,
                 sweep,
                 bound,
                 {{101, "non-finite activation read as 0"}, {102, "row reads its neighbour's activations"}}});
  for (const char* f : {"q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "bf16"})
    r.push_back(
        {std::string("mma.") + f,
         "cuda",
         {f},
         "n_in a multiple of 64 (256 for K-quants), 16-byte aligned activations; any n_out (tiles of 16); any "
         "rows (up to 32: a block per 16 outputs adding its warps' slices in order when there are 128+ such tiles, "
         "else slices in separate blocks then added in order; more: on compute capability 9.0 warpgroup mma over 128 "
         "outputs x 64 rows a block, elsewhere or with TF_MMA_WGMMA=0 2x2 warps of 32x32)",
         "576x1536, 1536x576, 4096x64, 64x33 (K-quants 768, 512, 256); rows 1,2,3,7,16,24,32,40,64,100; 4608x2056 "
         "(129 tiles, 18 slices) with rows 1,3,16,32,40; a NaN row; the in-place residual form; many rows once on "
         "warpgroup mma and once on the register kernel",
         "|y - y64| <= (2^-16 + (2G+4) * 2^-22 + (2*256/G + slices + 34) * 2^-24) * sum (|w_i| + |min_i|)|x_i|: "
         "x = bf16 hi + lo, G-column scale groups summed exactly-in-product by the mma, fused scale and min",
         {{101, "non-finite activation read as 0"},
          {102, "row reads its neighbour's activations"},
          {103, "the activations' lo part dropped"},
          {104, "the block kernel adds a round's slices in reverse order"}}});
  r.push_back(
      {"mma_group",
       "cuda",
       {"q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "bf16"},
       "one row; two or three tensor-core matrices of one n_in (the model's Q, K and V) in one launch of "
       "mma_group_kernel, a block per 16 outputs of any of them run as mma_block_kernel runs one row; one "
       "format, or Q4_K with Q6_K; with RoPE (NORM pairs, Q, K and V of whole even heads) the blocks also do "
       "rope_store's work: Q rotated, K rotated and V into the row's page slot",
       "768 x 1536|256|256 (Q4_K, Q4_K, Q6_K), 512 x 200|328 (Q6_K|Q4_K, a partial tile before the join, "
       "a NaN), 4096 x 4096|1024|1024 (K and V alone take the split kernel), each other format three times; "
       "the row alone and as row 1 of three; RoPE of 64-wide heads with n_rot 64 and 32 into a three-page "
       "pool; x split by RMSNorm; x copied in by a kernel still idling 50 us when the products launch (PDL: one "
       "and three rows, a block per tile, the split kernel and the group, which load weights before the wait); "
       "two rows, a staged x, mixed lengths, a third format and one matrix refused",
       "bit-equal to each matrix's own gemv (mma.<format>), so its bound, checked against float64 too; RoPE "
       "and the store bit-equal to rope_store's float steps replayed on the host, the rest of the pool "
       "untouched",
       {{101, "non-finite activation read as 0"},
        {103, "the activations' lo part dropped"},
        {104, "the block kernel adds a round's slices in reverse order"},
        {132, "sin sign flipped"},
        {171, "K and V written one slot late"},
        {177, "a join's first block counted to the product before"},
        {178, "V written over the row's K"}}});
  for (const char* f : {"q4_k", "q6_k"})
    r.push_back(
        {std::string("prompt.") + f,
         "cuda",
         {f},
         "compute capability 9.0 only; n_in a multiple of 256; any n_out (tiles of 16); any rows (blocks of 128, or "
         "256 where the grid still fills the device twice)",
         "768x1536, 1536x520, 256x33, 4608x2056; rows 1,2,3,7,16,64,100,130,300; 256x16896 with rows 1,3,300 (blocks "
         "of 256 against rows alone in blocks of 128); a NaN row; the in-place residual form",
         "|y - y64| <= (3u + 3u^2 + (n_in/16 + 18) * 2^-22) * sum (|w_i| + 2|min_i|)|x_i| + 2^-24 * (2^-e_r sum "
         "(|w_i| + 2|min_i|) + 33 * 2^-e_w sum |x_i|), u = 2^-11: x and the weights' scales, mins and values each one "
         "fp16 rounding under powers of two, one f32 tensor-core chain",
         {{131, "non-finite activation read as 0"},
          {132, "row reads its neighbour's activations"},
          {133, "a step's terms lost"},
          {134, "a write past the end"}}});
  for (const char* f : {"q4_k", "q6_k"})
    r.push_back({std::string("prompt_image.") + f,
                 "cuda",
                 {f},
                 "as prompt." + std::string(f) +
                     " in blocks of 128 rows, the weights read from their prompt image (fp16 values decoded once by "
                     "f16_image_kernel, 16 KiB a 128-output block and 64 columns, beside x in shared memory), run by "
                     "f16_image_gemm_kernel (one producer thread, six stages, one block a SM)",
                 "the prompt." + std::string(f) +
                     " cases with every product on the image; each equal bit for bit to the decoding product; a "
                     "canary after the image",
                 "bit-equal to prompt." + std::string(f) + " (the same fragments, the same wgmma chain), so its bound",
                 {{131, "non-finite activation read as 0"},
                  {133, "a step's terms lost"},
                  {134, "a write past the end"},
                  {135, "a unit's fragments built from the neighbour tile"}}});
  for (const char* f : {"q4_k", "q6_k"})
    r.push_back(
        {std::string("prompt_image_wide.") + f,
         "cuda",
         {f},
         "as prompt_image." + std::string(f) +
             " with the image in blocks of 192, 224 or 256 outputs (f16_image_width: the fewest 512-row waves "
             "of one block a SM), run by f16_wide_gemm_kernel<W>: x as wgmma's A (64 rows a warpgroup), the "
             "image as B (W outputs), one producer thread, as many stages as fit",
         "the prompt." + std::string(f) +
             " cases at each of the three widths; each output equal bit for bit to the decoding product; the "
             "image's width checked; a canary after the image",
         "bit-equal to prompt." + std::string(f) + " (the same products and k order, A and B swapped), so its bound",
         {{131, "non-finite activation read as 0"},
          {133, "a step's terms lost"},
          {134, "a write past the end"},
          {135, "a unit's fragments built from the neighbour tile"}}});
  r.push_back({"prompt_image_stack",
               "cuda",
               {"q4_k", "q6_k"},
               "two or three Q4_K or Q6_K matrices of one n_in whose outputs lie side by side in one wide image (the "
               "model's Q|K|V), each 16-output tile one matrix's (all but the last n_out a multiple of 16), every "
               "output scaled by its own matrix's power of two: f16_wide_gemm_kernel<W>, W by f16_image_width",
               "768 x 1536|256|256 in blocks of 192 (blocks across both joins), 256 x 96|48|40 in one partial block "
               "of 256, 512 x 320|200 (Q6_K|Q4_K) in blocks of 224, 4096 x 4096|1024|1024 by the rule; rows 1,2,3,7,"
               "130,300; the second matrix 8x larger (its own power of two); each column equal bit for bit to its "
               "matrix's decoding product; rows alone; staged; the residual form; a canary after the image; the "
               "stacked matrix without its image refused",
               "bit-equal to prompt.q4_k and prompt.q6_k column by column, so their bounds",
               {{133, "a step's terms lost"},
                {134, "a write past the end"},
                {135, "a unit's fragments built from the neighbour tile"},
                {136, "the output before a join scaled by the next matrix's power of two"}}});
  // The SwiGLU stage's two block shapes, one record each, so that each shape's planted controls are caught on it.
  struct SwigluShape {
    const char *name, *shape, *cases;
    bool cluster;
  };
  for (auto [name, shape, cases, cluster] :
       {SwigluShape{"prompt_stage_swiglu", "256 threads a row, n_in up to 4,096",
                    "256x33 and 1536x520 (rows 1,2,3,7,16,64,100,130,300)", false},
        SwigluShape{"prompt_stage_swiglu_wide",
                    "a cluster of four 256-thread blocks a row, each a quarter of its chunks, the row's max shared "
                    "through the cluster's shared memory, n_in past 4,096",
                    "14336x160 and 28672x33 (rows 1,3,130; 28,672 past the 4,096 columns a block keeps in registers)",
                    true}}) {
    std::vector<PlantedControl> ctl = {{131, "non-finite activation read as 0"},
                                       {132, "row reads its neighbour's activations"},
                                       {138, "sigmoid sign slip"},
                                       {139, "SwiGLU takes the neighbour column's up value"}};
    if (cluster) ctl.push_back({175, "each block of the cluster scales by its own max"});
    r.push_back({name,
                 "cuda",
                 {"f32"},
                 std::string("as the prompt products' stage, for a down product whose x is SwiGLU of gate|up rows of "
                             "2 n_in: f16_stage_kernel<kN, kKeep, kStageSwiglu> (") +
                     shape +
                     ") makes swiglu_pairs' values (one shared device function) as it reads them, never "
                     "storing them",
                 std::string("Q6_K down ") + cases +
                     "; a NaN gate; each equal bit for bit to swiglu_pairs then the product staging its own x, and in "
                     "the residual form; each row alone; a staged product after another product's stage, or naming "
                     "another x, refused",
                 "bit-equal to swiglu then prompt.q6_k, so |y - y64| <= prompt.q6_k's bound over swiglu_pairs' "
                 "values s + sum |w_i| |s_i - s64_i| (s64: float64 SwiGLU, y64 its float64 product)",
                 ctl});
  }
  r.push_back({"prompt_stage_norm",
               "cuda",
               {"f32"},
               "as the prompt products' stage, for products whose x is RMSNorm of x rows (n_in a multiple of 256): "
               "f16_stage_kernel<kN, kKeep, kStageNorm> takes rmsnorm's row scale (one shared device function, the "
               "same fixed tree over 256 threads) and values as it reads x, never storing them",
               "Q4_K 256x33, 1536x520 (rows 1,2,3,7,16,64,100,130,300), 14336x160 and 28672x33 (rows 1,3,130); a "
               "NaN; each equal bit for bit to rmsnorm then the product staging its own x, and in the residual form; "
               "each row alone; the buffer its products name as x never written; a staged product after another "
               "product's stage, or naming another x, refused",
               "bit-equal to rmsnorm then prompt.q4_k, so |y - y64| <= prompt.q4_k's bound over rmsnorm's values h "
               "+ sum |w_i| |h_i - h64_i| (h64: float64 RMSNorm, y64 its float64 product)",
               {{131, "non-finite activation read as 0"},
                {132, "row reads its neighbour's activations"},
                {140, "the sum of squares lost"}}});
  r.push_back({"rmsnorm",
               "cuda",
               {"f32"},
               "any n, one block per row",
               "n 576, 4096, 64; rows 1,3,7; 70 rows with a split output against each row alone",
               "|y - y64| <= 4 * 2^-24 * |y64| + 2^-126",
               {{111, "sum of squares lost"}, {112, "write past the end"}}});
  r.push_back({"swiglu",
               "cuda",
               {"f32"},
               "any n; gate|up rows side by side",
               "n 14336, 7; |gate| up to 30; pairs of rows 1,3,7",
               "|y - y64| <= 8 * 2^-24 * |y64| + 2^-140",
               {{121, "sigmoid sign slip"}, {122, "reads the neighbour's up value"}}});
  r.push_back(
      {"attention",
       "cuda",
       {"f32"},
       "paged KV, GQA, causal over [0, pos], strided query rows, head_dim a multiple of 32 up to 256, keys <= 48K",
       "head_dim 64 and 128, 9/3 and 32/8 heads, keys 1..2000, rows at mixed positions of two sequences",
       "|o - o64| <= 4 * 2^-24 * sum p_j|v_j| * (head_dim * max_j scale*sum|q k_j| + n_keys + 8)",
       {{141, "one key past the causal limit read"}, {142, "query head mapped to the wrong KV head"}}});
  r.push_back(
      {"attention_mma",
       "cuda",
       {"f32"},
       "paged KV of pages a multiple of 16 tokens (others refused), head_dim 64 or 128, up to 16 query heads per KV "
       "head, causal over [0, pos], any rows of any sequences",
       "head_dim 64 and 128, 9/3, 32/8, 4/4 and 16/1 heads; decode rows of two sequences (up to 2000 keys: 8 "
       "chunks, a block each, then the combine; within one chunk, with a NaN value and one past bf16 too, the keys "
       "pulled into L2 before the wait, bit-equal to the run without the pull, a block a row, which must run; 40 "
       "such rows, past a wave of blocks a row, forced onto it); a 37-row prefill chunk (chunks walked in one "
       "block) with another sequence's rows inside; a NaN value, and one past bf16's range (3.4e38), inside the chunk "
       "(rows before it stay "
       "finite, rows after it NaN); pages of 16, 32 and 48 tokens; 8-token pages refused; every row against itself "
       "alone at its own key count; each case on every build (one tile a block at one or two blocks an SM, two "
       "tiles a block, a block a row at one or two blocks an SM where the keys fit one chunk, which must then run) on "
       "every path it takes",
       "|o - o64| <= sum p_j|v_j| * (2 max_s (4 * 2^-16 + 3 hd 2^-22) + 6 * 2^-16 + (n_keys/16 + 16) 2^-22 + (16 + "
       "3 n_chunks) * 2^-24)",
       {{141, "one key past the causal limit read"},
        {142, "query head mapped to the wrong KV head"},
        {143, "the split output taken before the division by L"},
        {145, "the combine folds the chunks in reverse order"},
        {148, "the one-row build's keys cut at 128"}}});
  r.push_back(
      {"attention_prompt",
       "cuda",
       {"f32"},
       "compute capability 9.0; paged KV of any page size, head_dim 64 or 128, any query heads per KV head, causal "
       "over [0, pos], any rows of any sequences; a key past 2^64, a value past 2^30 or a non-finite element makes "
       "the rows that attend it NaN",
       "head_dim 64 and 128, 9/3, 32/8, 4/4, 16/1 and 24/2 heads; decode-like rows of two sequences (up to 2000 keys); "
       "a 37-row prefill chunk with another sequence's rows inside and after; a 70-row prompt from position 0; a NaN "
       "value, a NaN key, a value of 2^31 and a key of 2^65 at key 520 (rows before it finite, rows after it NaN); K "
       "and V at 2^20 with Q at 2^-20, K at 2^-30 with Q at 2^30, V at 2^-20, K at 2^60 with Q at 2^-60 (each page "
       "scaled once, inputs checked finite); Q at 2^10 with K at 2^20 and both at 2^12 (scores past 2^24, a hard "
       "maximum that must stay finite); pages of 8, 16, 32 and 48 tokens; every row against itself alone; a "
       "canary after the output",
       "|o - o64| <= mag (expm1(2E) + 4u + (n_keys/8 + 64) 2^-22) + 2^-24 (sum_j |v_j| + 1) + 2^-37 max|v|, mag = "
       "sum p_j|v_j|, E = max_s (2u + (hd/16 + 6) 2^-22) + scale hd (q_step max|k| + k_step max|q|), x_step = "
       "max(2^-39 max|x|, 2^-151) (for Q: 2^-39 (1 + 2^-23) max|q|, 2^-151 / sl, sl = scale log2 e), u = 2^-11: Q "
       "times sl in f32, then Q, K, V and P each one fp16 rounding under powers of two, f32 tensor-core chains",
       {{201, "one key past the causal limit read"},
        {202, "query head mapped to the wrong KV head"},
        {203, "a key that cannot be used read as zeros"},
        {204, "a step's last 16 keys lost from P V"},
        {205, "the score chain kept in fp16"},
        {206, "the last row written one row late"},
        {207, "a row reads its neighbour's query"},
        {208, "P without its values' 2^-ev"}}});
  r.push_back({"attention_prompt_keys",
               "cuda",
               {"f32"},
               "as attention_prompt (the production path), its keys converted once a call by "
               "attention_wg_keys_kernel (convert_row, as the block kernel) into 32-key tiles of K and V^T laid out "
               "as wgmma operands, and attention_wg_kernel: two warpgroups of the block kernel's rows, a producer "
               "warpgroup bringing two tiles a step by bulk copy, both tiles' scores by one wgmma chain, then "
               "the softmax and P V of the step's 64 keys",
               "attention_prompt's cases, each sequence's keys at whole tiles in a scratch with room to spare; every "
               "output against the block kernel (attention_prompt without converted keys) bit for bit, and against "
               "the float64 reference; every row against itself alone; a canary after the output; slots of no "
               "whole tile pairs and no sequences refused before any launch",
               "bit-equal to attention_prompt (the same float steps and chain orders), so its bound",
               {{203, "a key that cannot be used read as zeros"},
                {209, "a key converted from the next position"},
                {210, "a tile's key and value factors swapped"},
                {211, "a step's last 16 keys lost from P V"},
                {212, "the score chain kept in fp16"},
                {213, "a row reads its neighbour's query"},
                {214, "the last row written one row late"}}});
  for (const char* f : {"q8_0", "q4_k", "q6_k", "bf16", "q4_1"})
    r.push_back({std::string("embedding.") + f,
                 "cuda",
                 {f},
                 "n_embd a whole number of blocks; any rows",
                 "512 x 300 tokens; rows 1,2,3,7,16,64; the second-last token",
                 "bit-equal to the codec's exact decode",
                 {{151, "reads the next token's row"}, {152, "an element lost"}}});
  r.push_back({"rope_store",
               "cuda",
               {"f32"},
               "rope on Q in place and on K, then the KV store, in one launch; K and V as strided rows or as their "
               "products' slice partials; 16 rows or more of whole rotated heads of 64 or 128, float4-aligned rows "
               "(no partials): a block a row, float4 tasks (rope_store_rows_kernel)",
               "head_dim 64 and 128, 4/2 heads, n_rot the head and half of it, NORM and NEOX; rows 1,3,7,16,32 of two "
               "sequences (16 and 32 of whole rotation without slices in the row form); rows or 5 slices",
               "bit-exact: the host's float steps (slices added in order, each rotation product and sum rounded once)",
               {{131, "pairs taken with the other pairing"},
                {132, "sin sign flipped"},
                {171, "written one slot late"},
                {172, "K stored as V"},
                {174, "K and V partials added in reverse order"}}});
  r.push_back({"residual_add",
               "cuda",
               {"f32"},
               "any n",
               "n 576; rows 1,3,7",
               "bit-equal to (x + b) + y, each sum rounded once",
               {{191, "the neighbouring column's bias"}, {192, "the residual term lost"}}});
  r.push_back({"split_producers",
               "cuda",
               {"f32"},
               "rmsnorm and swiglu_pairs writing their output also split for tensor-core products (rows of whole "
               "64-column steps)",
               "Q4_K 768x64 after rmsnorm, 512x64 after SwiGLU, SwiGLU from a 768x1024 product's partials; rows 1, "
               "7, 40",
               "the product's bits equal those of the product's own split of the same values; SwiGLU from partials "
               "equals SwiGLU after the product's reduction",
               {{113, "split taken from the unnormalised row"},
                {123, "split taken from the gate"},
                {124, "gate|up partials added in reverse order"}}});
  r.push_back({"gather_rows",
               "cuda",
               {"f32"},
               "any n, any index list",
               "n 320; 1, 3, 7 rows of 9",
               "bit-exact row copies",
               {{181, "reads the next row"}}});
  r.push_back(
      {"sample_candidates",
       "cuda",
       {"f32"},
       "vocabularies up to 819,200 entries, up to 65,535 rows; 256 candidates per row, a block per 4096-logit chunk "
       "then one merging block per row; rows asking no candidates (greedy, no logprobs) get the argmax alone",
       "V 819200 (the largest accepted), 128256, 49152, 1000, 100; 7 rows incl. ties across the cut (in one chunk "
       "and over all chunks), a tied maximum and a maximum in the last chunk; then argmax rows mixed with candidate "
       "rows, a NaN of either sign in each kind; each row alone",
       "candidates, greedy and keyed Gumbel pick exact; lse within V * 2^-52 * (|lse| + 1); argmax exact, the NaN "
       "flag set exactly on rows holding one; candidate rows beside argmax rows byte-equal",
       {{161, "lse summed from float exps"},
        {162, "ties go to the higher id"},
        {163, "the highest ids among ties at the cut"},
        {164, "an argmax row's NaN left unflagged"},
        {165, "argmax rows' merge skips the last chunk"}}});
  return r;
}

}  // namespace

const std::vector<KernelRecord>& cuda_kernel_records() {
  static const std::vector<KernelRecord> r = make_records();
  return r;
}

}  // namespace tf
