#!/usr/bin/env bash
# On the GPU machine: unpack the carried packages into a prefix, build the cuda-release preset with every core, run
# `ctest -L cuda`, and write logs to the folder given as argument (default $OUT or ./gpu-logs).
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
(cd build/cuda-release && ctest -L cuda --output-on-failure -V) > "$LOGS/ctest_cuda.txt" 2>&1
rc=$?
grep -E "SUMMARY|FAIL|NOT CAUGHT|tests passed" "$LOGS/ctest_cuda.txt"
build/cuda-release/tests/bench_cuda_gemv > "$LOGS/bench_cuda_gemv.txt" 2>&1
cat "$LOGS/bench_cuda_gemv.txt"
exit $rc
