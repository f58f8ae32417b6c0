#!/usr/bin/env bash
# Here, before a GPU run: the carried folders the GPU machine needs and cannot download. A run carries at most
# 64 MiB, so the default model travels in two halves (.mpart/a, .mpart/b) over two calls, and .whl holds gguf-py
# (fixtures) and the openai client (server API tests) as CPython 3.12 wheels for `pip install --no-index`.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -d .gpu-deps ] || bash tools/gpu/fetch_deps.sh
mkdir -p .mpart/a .mpart/b
half=$(( ($(stat -c %s "$MODEL") + 1) / 2 ))
head -c "$half" "$MODEL" > .mpart/a/part
tail -c +"$((half + 1))" "$MODEL" > .mpart/b/part
cmp <(cat .mpart/a/part .mpart/b/part) "$MODEL"
mkdir -p .whl
# gguf without its dependencies (numpy, yaml: the GPU machine has them), so call B stays under the carry limit.
pip_dl=(.venv/bin/python -m pip download -q --dest .whl --only-binary=:all: --python-version 3.12
        --platform manylinux2014_x86_64)
"${pip_dl[@]}" --no-deps gguf==0.19.0
"${pip_dl[@]}" openai==3.57.0 certifi distro
# Call A: carry [".gpu-deps", ".mpart/a"]: cp .mpart/a/part /tmp/tfm/a && BUILD_ONLY=1 bash tools/gpu/gpu_test.sh $OUT
# Call B (while warm): carry [".mpart/b", ".whl"]: cat /tmp/tfm/a .mpart/b/part > /tmp/tfm/smollm2.gguf, pip install
# --no-index --target /tmp/site .whl/*.whl, PYTHONPATH=/tmp/site TF_MODEL=... bash tools/gpu/gpu_test.sh $OUT, then
# tools/gpu/gpu_bench.sh $OUT.
ls .mpart/a .mpart/b .whl | wc -l
