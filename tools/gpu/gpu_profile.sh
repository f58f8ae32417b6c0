#!/usr/bin/env bash
# On the GPU machine after tools/gpu/gpu_test.sh has built cuda-release: times every kernel of a short decode with
# Nsight Compute (clocks left alone) and splits the time per kernel (tools/gpu/kernel_times.py). Args: model, logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODEL=$1
LOGS=${2:-${OUT:-gpu-logs}}
TOKENS=${TOKENS:-8}
BIN=${BIN:-build/cuda-release/tensorfold}
mkdir -p "$LOGS"
. tools/gpu/ncu_env.sh
name=$(basename "$MODEL" .gguf)
"$NCU" --clock-control none --csv --metrics gpu__time_duration.sum \
  "$BIN" bench "$MODEL" --backend cuda -p 1 -n "$TOKENS" -r 1 > "$LOGS/ncu_$name.csv" 2> "$LOGS/ncu_$name.err"
# bench decodes TOKENS with graphs and TOKENS without after two one-token prefills (the first untimed)
python3 tools/gpu/kernel_times.py "$LOGS/ncu_$name.csv" $((2 * TOKENS + 2)) | tee "$LOGS/kernels_$name.txt" | head -40
