#!/usr/bin/env bash
# On the GPU machine: unpack the carried packages into a prefix, build the cuda-release preset with every core, run
# `ctest -L cuda`, the e2e exactness, oracle, server and CLI tests against the CUDA binary, and the GEMV, attention
# and GEMM benchmarks; logs go to the folder given as argument (default $OUT or ./gpu-logs). The model: $TF_MODEL.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=${1:-${OUT:-gpu-logs}}
mkdir -p "$LOGS"
PREFIX=/opt/tfdeps
mkdir -p "$PREFIX"
for f in .gpu-deps/*.deb; do dpkg -x "$f" "$PREFIX"; done
export PKG_CONFIG_SYSROOT_DIR=$PREFIX
export PKG_CONFIG_PATH=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig
export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CPLUS_INCLUDE_PATH=$PREFIX/usr/include
{ nvidia-smi; nvcc --version; cmake --version; g++ --version; } > "$LOGS/machine.txt" 2>&1
cmake --preset cuda-release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DOPENSSL_ROOT_DIR="$PREFIX/usr" \
  -DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER= > "$LOGS/configure.txt" 2>&1 || { tail -40 "$LOGS/configure.txt"; exit 1; }
cmake --build build/cuda-release -j "$(nproc)" > "$LOGS/build.txt" 2>&1 || { grep -E "error" -A3 "$LOGS/build.txt" | head -60; exit 1; }
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "built"; exit 0; }
(cd build/cuda-release && ctest -L cuda --output-on-failure -V) > "$LOGS/ctest_cuda.txt" 2>&1
rc=$?
grep -E "SUMMARY|FAIL|NOT CAUGHT|tests passed|GREEDY|Failure|Expected|Which is" "$LOGS/ctest_cuda.txt" | head -60
if [ -n "${TF_MODEL:-}" ] && [ -f "$TF_MODEL" ]; then
  # The engine's exactness tests and the float64 oracle, served by the CUDA binary (--backend auto picks the GPU).
  TF_BIN=$PWD/build/cuda-release/tensorfold PYTHONUNBUFFERED=1 timeout 900 python3 -m pytest -q -x -rs \
    tests/e2e/test_engine_exactness.py tests/e2e/test_llama_oracle.py tests/e2e/test_server_api.py \
    tests/e2e/test_server_errors.py tests/e2e/test_cli.py \
    -p no:cacheprovider > "$LOGS/pytest_cuda.txt" 2>&1
  prc=$?
  tail -15 "$LOGS/pytest_cuda.txt"
  [ $prc -ne 0 ] && rc=$prc
fi
build/cuda-release/tests/bench_cuda_gemv > "$LOGS/bench_cuda_gemv.txt" 2>&1
tail -12 "$LOGS/bench_cuda_gemv.txt"
build/cuda-release/tests/bench_cuda_attention > "$LOGS/bench_cuda_attention.txt" 2>&1
cat "$LOGS/bench_cuda_attention.txt"
[ "${SKIP_GEMM:-0}" = 1 ] || { build/cuda-release/tests/bench_cuda_gemm > "$LOGS/bench_cuda_gemm.txt" 2>&1; cat "$LOGS/bench_cuda_gemm.txt"; }
exit $rc
