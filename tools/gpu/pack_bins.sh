#!/usr/bin/env bash
# Here, after `cmake --build build/cuda-release`: the CUDA binaries a GPU run needs, stripped and packed small
# enough to carry (.gpubin/NAME.tar.xz, NAME defaulting to bins: gpu_prebuilt.sh unpacks bins, gpu_ab.sh any).
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:-bins}
tmp=$(mktemp -d)
# gpu_prebuilt.sh moves these back; TESTS="" packs tensorfold alone (a base build for gpu_ab.sh)
TESTS=${TESTS-"contract_cuda_ctl test_cuda_prompt test_cuda_model bench_cuda_gemv bench_cuda_attention bench_cuda_gemm"}
cp build/cuda-release/tensorfold "$tmp"
for b in $TESTS; do cp "build/cuda-release/tests/$b" "$tmp"; done
strip "$tmp"/*
mkdir -p .gpubin .whlg
tar -C "$tmp" -cf - tensorfold $TESTS | xz -T2 -6 > ".gpubin/$NAME.tar.xz"
rm -rf "$tmp"
ls .whlg/*.whl > /dev/null 2>&1 || .venv/bin/python -m pip download -q --no-deps --dest .whlg gguf==0.19.0
ls -la .gpubin .whlg
