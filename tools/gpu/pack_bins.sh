#!/usr/bin/env bash
# Here, after `cmake --build build/cuda-release`: the CUDA binaries a GPU run needs, stripped and packed small
# enough to carry (.gpubin/bins.tar.xz; tools/gpu/gpu_prebuilt.sh unpacks them there).
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
cp build/cuda-release/tensorfold build/cuda-release/tests/contract_cuda_ctl build/cuda-release/tests/bench_cuda_gemv "$tmp"
strip "$tmp"/*
mkdir -p .gpubin .whlg
tar -C "$tmp" -cf - tensorfold contract_cuda_ctl bench_cuda_gemv | xz -T2 -6 > .gpubin/bins.tar.xz
rm -rf "$tmp"
ls .whlg/*.whl > /dev/null 2>&1 || .venv/bin/python -m pip download -q --no-deps --dest .whlg gguf==0.19.0
ls -la .gpubin .whlg
