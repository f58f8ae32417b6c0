#!/usr/bin/env bash
# On the GPU machine after tools/gpu/gpu_test.sh has built cuda-release: writes the synthetic Llama-3-8B-shaped GGUFs
# (tools/fixtures/gen_llama_gguf.py, gguf-py) and runs `tensorfold bench --backend cuda` on them and on $TF_MODEL.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=${1:-${OUT:-gpu-logs}}
MIXES=${MIXES:-q4_k_m q8_0 bf16}
mkdir -p "$LOGS" /tmp/tf8b
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=build/cuda-release/tensorfold
if [ -n "${TF_MODEL:-}" ]; then
  $BIN bench "$TF_MODEL" --backend cuda -p 512 -n 128 --streams 1,8,32,128 2>&1 | tee "$LOGS/bench_smollm2.txt"
fi
# The first mix gets the full set (pp512 and pp4096, stream scaling); the others pp512 and decode.
first=1
for mix in $MIXES; do
  f=/tmp/tf8b/llama8b-$mix.gguf
  [ -f "$f" ] || python3 tools/fixtures/gen_llama_gguf.py --shape 8b --mix "$mix" --out "$f" || exit 1
  if [ $first = 1 ]; then extra="--pp-list ${PP_LIST:-512,4096} ${STREAMS:+--streams $STREAMS}"; else extra="--pp-list 512"; fi
  $BIN bench "$f" --backend cuda $extra -n 128 2>&1 | tee "$LOGS/bench_8b_$mix.txt"
  rm -f "$f"
  first=0
done
