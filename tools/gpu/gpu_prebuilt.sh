#!/usr/bin/env bash
# On the GPU machine, with binaries built here (same toolkit) instead of a 16-core build there: unpacks
# .gpubin/bins.tar.xz (made by `tools/gpu/pack_bins.sh`) into build/cuda-release, the carried .gpu-deps into
# /opt/tfdeps and gguf-py from .whlg, and writes the 8B Q4_K_M-like model. Then run the contract, benchmarks and
# profiles against it. Arg: logs folder. SKIP_BINS=1: only the deps, gguf-py and the model (tools/gpu/gpu_ab.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=${1:-${OUT:-gpu-logs}}
mkdir -p "$LOGS" build/cuda-release/tests /opt/tfdeps
for f in .gpu-deps/*.deb; do dpkg -x "$f" /opt/tfdeps; done
if [ "${SKIP_BINS:-0}" != 1 ]; then
  tar -xJf .gpubin/bins.tar.xz -C build/cuda-release
  # pack_bins.sh's TESTS
  for b in contract_cuda_ctl test_cuda_prompt test_cuda_model bench_cuda_gemv bench_cuda_attention bench_cuda_gemm; do
    mv "build/cuda-release/$b" build/cuda-release/tests/ 2>/dev/null
  done
fi
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlg/*.whl
[ -f /tmp/q4.gguf ] || PYTHONPATH=/tmp/site python3 tools/fixtures/gen_llama_gguf.py --shape 8b --mix q4_k_m \
  --out /tmp/q4.gguf > /dev/null
echo "prebuilt ready"
