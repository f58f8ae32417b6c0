#!/usr/bin/env bash
# On the GPU machine: where one kernel's warps stall, sampled every 32 cycles, by SASS line (kernel_stalls.py).
# Args: kernel name regex, logs folder. Env: BIN (tensorfold), MODEL (default /tmp/q4.gguf), SKIP (launches of that
# kernel to skip, default 40: past the two prefills and graph capture), PROMPT (prompt tokens, default 1; 512 with
# SKIP=4 takes the fifth wgmma product of the first, untimed prefill), BENCHARGS (more `tensorfold bench` options).
set -uo pipefail
cd "$(dirname "$0")/../.."
K=$1
LOGS=${2:-${OUT:-gpu-logs}}
BIN=${BIN:-build/cuda-release/tensorfold}
MODEL=${MODEL:-/tmp/q4.gguf}
mkdir -p "$LOGS"
. tools/gpu/ncu_env.sh
"$NCU" --set full --import-source yes --warp-sampling-interval 0 -k "regex:$K" --launch-skip "${SKIP:-40}" -c 1 \
  -o "$LOGS/stalls" "$BIN" bench "$MODEL" --backend cuda -p "${PROMPT:-1}" -n 4 -r 1 ${BENCHARGS:-} > "$LOGS/stalls.log" 2>&1
"$NCU" -i "$LOGS/stalls.ncu-rep" --page source --csv --print-source sass > "$LOGS/stalls_sass.csv" 2>&1
python3 tools/gpu/kernel_stalls.py "$LOGS/stalls_sass.csv" > "$LOGS/stalls.txt" 2>&1
head -60 "$LOGS/stalls.txt"
