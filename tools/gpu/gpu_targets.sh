#!/usr/bin/env bash
# On the GPU machine: issue #4's figures for one build in one call (the cuBLAS peak, pp512 and pp4096 in 512-row and
# 4,096-row forwards, tg128), then its prompt and model tests and the whole contract. NAME is a .gpubin pack
# (`TESTS="contract_cuda_ctl test_cuda_prompt test_cuda_model bench_cuda_gemm" bash tools/gpu/pack_bins.sh NAME`
# here); carry .gpu-deps, .whlg and .gpubin. Usage: gpu_targets.sh NAME [logs]
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=$1
LOGS=${2:-${OUT:-gpu-logs}}
mkdir -p "$LOGS"
SKIP_BINS=1 bash tools/gpu/gpu_prebuilt.sh "$LOGS" > "$LOGS/prebuilt.txt" 2>&1 &
prep=$!
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=/tmp/ab/$NAME
rm -rf "$B" && mkdir -p "$B" && tar -xJf ".gpubin/$NAME.tar.xz" -C "$B" || exit 2
sleep 5  # the carried libraries unpacked before the first binary runs
for t in test_cuda_prompt test_cuda_model; do
  timeout 100 "$B/$t" > "$LOGS/$t.txt" 2>&1
  echo "$t rc $? (77: skipped)"
done
timeout 100 "$B/bench_cuda_gemm" 2>&1 | grep -E "TFLOP/s =" | tee "$LOGS/cublas.txt"
wait $prep
timeout 150 "$B/tensorfold" bench /tmp/q4.gguf --backend cuda -n 128 --pp-list 512,4096 2>&1 | tee "$LOGS/bench.txt" |
  grep -E "^pp|^tg|per token|rror"
timeout 60 "$B/tensorfold" bench /tmp/q4.gguf --backend cuda -n 4 --pp-list 4096 --ubatch 4096 2>&1 | grep -E "^pp|rror"
timeout 330 "$B/contract_cuda_ctl" > "$LOGS/contract.txt" 2>&1
echo "contract rc $?"
grep -E "SUMMARY|FAIL|NOT CAUGHT" "$LOGS/contract.txt" | head -20
