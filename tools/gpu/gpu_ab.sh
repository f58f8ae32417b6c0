#!/usr/bin/env bash
# On the GPU machine: the same benchmarks for several builds in one run, so their figures compare (shared machines
# drift between runs). Builds are .gpubin/NAME.tar.xz from `tools/gpu/pack_bins.sh NAME` here; carry .gpu-deps,
# .whlg and .gpubin. The first build also runs the CUDA contract. Usage: gpu_ab.sh "NAME1 NAME2 ..." [logs]
# Env: CONTRACT=0 skips the contract, GEMV=0 the weight-kernel bench, PP (default 512) and BENCHARGS (e.g.
# "--depth 4096 --streams 1,32") go to `tensorfold bench`, PROFILE=NAME times every decode kernel of that build.
set -uo pipefail
cd "$(dirname "$0")/../.."
NAMES=$1
LOGS=${2:-${OUT:-gpu-logs}}
L=$LOGS/ab.txt
mkdir -p "$LOGS" /opt/tfdeps
for f in .gpu-deps/*.deb; do dpkg -x "$f" /opt/tfdeps; done
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for v in $NAMES; do mkdir -p "/tmp/ab/$v" && tar -xJf ".gpubin/$v.tar.xz" -C "/tmp/ab/$v"; done
if [ ! -f /tmp/q4.gguf ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlg/*.whl
  PYTHONPATH=/tmp/site python3 tools/fixtures/gen_llama_gguf.py --shape 8b --mix q4_k_m --out /tmp/q4.gguf > /dev/null
fi
first=${NAMES%% *}
if [ "${CONTRACT:-1}" = 1 ]; then
  echo "== contract $first" >> "$L"
  timeout 300 "/tmp/ab/$first/contract_cuda_ctl" > "$LOGS/contract_$first.txt" 2>&1
  grep -E "SUMMARY|FAIL|NOT CAUGHT|rror" "$LOGS/contract_$first.txt" | head -20 >> "$L"
fi
for v in $NAMES; do
  if [ "${GEMV:-1}" = 1 ]; then
    echo "== weight kernels $v" >> "$L"
    timeout 120 "/tmp/ab/$v/bench_cuda_gemv" 2>&1 | grep -E "\| 1 \||copy" >> "$L"
  fi
  echo "== bench $v" >> "$L"
  timeout 300 "/tmp/ab/$v/tensorfold" bench /tmp/q4.gguf --backend cuda -n 128 --pp-list "${PP:-512}" ${BENCHARGS:-} \
    2>&1 | grep -E "^pp|^tg|per token|streams|rror" >> "$L"
done
if [ -n "${PROFILE:-}" ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 200 "$NCU" --clock-control none --csv --metrics gpu__time_duration.sum "/tmp/ab/$PROFILE/tensorfold" bench \
    /tmp/q4.gguf --backend cuda -p 1 -n 4 -r 1 > "$LOGS/ncu_$PROFILE.csv" 2> "$LOGS/ncu_$PROFILE.err"
  python3 tools/gpu/kernel_times.py "$LOGS/ncu_$PROFILE.csv" 9 > "$LOGS/kernels_$PROFILE.txt" 2>&1
  head -30 "$LOGS/kernels_$PROFILE.txt" >> "$L"
fi
cat "$L"
