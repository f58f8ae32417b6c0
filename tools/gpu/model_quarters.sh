#!/usr/bin/env bash
# Here: the default model in quarters (.mq/1..4), so that prebuilt binaries (a .gpubin pack of about 20 MB) and
# the model reach the GPU machine within the 64 MiB a call carries, in three calls while it stays warm:
#   1. carry [".gpu-deps", ".whlg", ".gpubin", ".mq/1"]: mkdir -p /tmp/tfm && cp .mq/1/part /tmp/tfm/1, then checks
#   2. carry [".mq/2", ".mq/3"]: cp .mq/2/part /tmp/tfm/2 && cp .mq/3/part /tmp/tfm/3
#   3. carry [".mq/4"]: PACK=NAME bash tools/gpu/gpu_greedy.sh (joins the model, runs that pack's test_cuda_model)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
rm -rf .mq && mkdir -p .mq/1 .mq/2 .mq/3 .mq/4
tmp=$(mktemp -d)
split -n 4 -d "$MODEL" "$tmp/q."
for i in 1 2 3 4; do mv "$tmp/q.0$((i - 1))" ".mq/$i/part"; done
rmdir "$tmp"
cmp <(cat .mq/1/part .mq/2/part .mq/3/part .mq/4/part) "$MODEL"
du -sh .mq/*
