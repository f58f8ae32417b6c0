#!/usr/bin/env bash
# On the GPU machine, third call of tools/gpu/model_quarters.sh: joins the default model and runs test_cuda_model
# (SmolLM2's greedy CPU vs CUDA on the foundation prompts, rounds, refusals) from pack PACK, unpacked by call 1 or
# here from .gpubin. Logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=${OUT:-gpu-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=/tmp/ab/$PACK
[ -x "$B/test_cuda_model" ] || { mkdir -p "$B" && tar -xJf ".gpubin/$PACK.tar.xz" -C "$B"; } || exit 2
cat /tmp/tfm/1 /tmp/tfm/2 /tmp/tfm/3 .mq/4/part > /tmp/tfm/smollm2.gguf || exit 2
TF_MODEL=/tmp/tfm/smollm2.gguf timeout 200 "$B/test_cuda_model" > "$LOGS/model.txt" 2>&1
echo "test_cuda_model rc $?"
grep -aE "GREEDY|PASSED|FAILED" "$LOGS/model.txt"
