#!/usr/bin/env bash
# On the GPU machine: a change's checks and its A/B in one run. NEW and BASE are .gpubin packs (`pack_bins.sh NAME`
# here; BASE may be TESTS="bench_cuda_gemm"); carry .gpu-deps, .whlg and .gpubin. Runs NEW's contract and
# test_cuda_prompt, checks NEW's 8B prompt logits bitwise against BASE's (1,500 tokens whole, and NEW's own in chunks
# of 97; 3,000 tokens in chunks of 512), times both builds' product benches (ATTN=1: both attention benches), then
# alternates their `tensorfold bench` (gpu_ab.sh, with GEMM=1 the cuBLAS peak first). Usage: NEW BASE [logs]
set -uo pipefail
cd "$(dirname "$0")/../.."
NEW=$1 BASE=$2
LOGS=${3:-${OUT:-gpu-logs}}
mkdir -p "$LOGS"
SKIP_BINS=1 bash tools/gpu/gpu_prebuilt.sh "$LOGS" > "$LOGS/prebuilt.txt" 2>&1
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for b in "$BASE" "$NEW"; do rm -rf "/tmp/ab/$b" && mkdir -p "/tmp/ab/$b" && tar -xJf ".gpubin/$b.tar.xz" -C "/tmp/ab/$b"; done
# RECORDS="name ...": only those contract records (the whole contract takes about four minutes)
timeout 420 "/tmp/ab/$NEW/contract_cuda_ctl" ${RECORDS:-} > "$LOGS/contract.txt" 2>&1
echo "contract rc $?"
grep -E "SUMMARY|FAIL|NOT CAUGHT" "$LOGS/contract.txt" | head -20
timeout 100 "/tmp/ab/$NEW/test_cuda_prompt" > "$LOGS/prompt.txt" 2>&1
echo "test_cuda_prompt rc $?"
if [ "${ATTN:-0}" = 1 ]; then
  for v in "$BASE" "$NEW" "$BASE" "$NEW"; do
    echo "== attention $v"
    timeout 100 "/tmp/ab/$v/bench_cuda_attention" 2>&1 | grep -E "fp16"
  done | tee "$LOGS/attn.txt"
fi
ids() { python3 -c "import random; r=random.Random($1); print(','.join(str(r.randrange(128256)) for _ in range($2)))"; }
logits() {  # BUILD OUT IDS [--chunk N]
  timeout 100 "/tmp/ab/$1/tensorfold" logits /tmp/q4.gguf --backend cuda --tokens "$3" --out "$2" "${@:4}" > /dev/null 2>&1 ||
    echo "logits of $1 failed"
}
a=$(ids 5 1500) b=$(ids 6 3000)
logits "$BASE" /tmp/l_base.npy "$a" && logits "$NEW" /tmp/l_new.npy "$a" && logits "$NEW" /tmp/l_c.npy "$a" --chunk 97
cmp -s /tmp/l_base.npy /tmp/l_new.npy && echo "BITS 1500 tokens: $BASE == $NEW" || echo "BITS 1500 tokens: DIFFER"
# where the bits differ (a change of arithmetic): how far each row's logits moved, and the argmaxes that changed
cmp -s /tmp/l_base.npy /tmp/l_new.npy || python3 tools/gpu/logits_moved.py /tmp/l_base.npy /tmp/l_new.npy
cmp -s /tmp/l_new.npy /tmp/l_c.npy && echo "BITS 1500 tokens: whole == chunks of 97" || echo "BITS chunked: DIFFER"
logits "$BASE" /tmp/l_base.npy "$b" --chunk 512 && logits "$NEW" /tmp/l_new.npy "$b" --chunk 512
cmp -s /tmp/l_base.npy /tmp/l_new.npy && echo "BITS 3000 tokens in chunks of 512: $BASE == $NEW" || echo "BITS 3000: DIFFER"
rm -f /tmp/l_base.npy /tmp/l_new.npy /tmp/l_c.npy
for v in "$BASE" "$NEW"; do  # PRODUCTS=0: a change that leaves the products alone
  [ "${PRODUCTS:-1}" = 1 ] || break
  echo "== gemm $v"
  timeout 150 "/tmp/ab/$v/bench_cuda_gemm" 2>&1 | grep -A40 "prompt image W" | grep -E "^\| [0-9]" | head -n 40
done
ATTN=0 CONTRACT=0 GEMV=0 GEMM=${GEMM:-0} PP=${PP:-512,4096} bash tools/gpu/gpu_ab.sh "$NEW $BASE $NEW $BASE" "$LOGS" > /dev/null 2>&1
cat "$LOGS/ab.txt"
