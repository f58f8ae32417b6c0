#!/usr/bin/env bash
# On the GPU machine: the same benchmarks for several builds in one run, so their figures compare (shared machines
# drift between runs). Builds are .gpubin/NAME.tar.xz from `tools/gpu/pack_bins.sh NAME` here; carry .gpu-deps,
# .whlg and .gpubin. The first build also runs the CUDA contract. Usage: gpu_ab.sh "NAME1 NAME2 ..." [logs]
# Env: CONTRACT=0 skips the contract, GEMV=0 the weight-kernel bench, ATTN=1 adds the attention bench, GEMM=1 the
# cuBLAS peak (first build, before the benches, so prefill's share of it is one run's ratio), PP (default
# 512) and BENCHARGS (e.g. "--depth 4096 --streams 1,32") go to `tensorfold bench`, PROFILE=NAME times every decode
# kernel of that build. NAME@VAR=VALUE runs build NAME's `tensorfold bench` with that one variable set (one binary,
# several switches; its gemv and attention benches, the contract and PROFILE run without it).
set -uo pipefail
cd "$(dirname "$0")/../.."
NAMES=$1
LOGS=${2:-${OUT:-gpu-logs}}
L=$LOGS/ab.txt
mkdir -p "$LOGS"
SKIP_BINS=1 bash tools/gpu/gpu_prebuilt.sh "$LOGS" > /dev/null
export LD_LIBRARY_PATH=/opt/tfdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
seen=" "
for run in $NAMES; do
  b=${run%%@*}
  if [ "$run" != "$b" ] && [[ "${run#*@}" != [A-Za-z_]*=* ]]; then
    echo "gpu_ab.sh: '$run' is not NAME@VAR=VALUE" >&2
    exit 2
  fi
  case "$seen" in *" $b "*) continue ;; esac
  seen="$seen$b "
  rm -rf "/tmp/ab/$b" && mkdir -p "/tmp/ab/$b" && tar -xJf ".gpubin/$b.tar.xz" -C "/tmp/ab/$b" || exit 2
done
first=${NAMES%% *}
first=${first%%@*}
if [ "${CONTRACT:-1}" = 1 ]; then
  echo "== contract $first" >> "$L"
  timeout 420 "/tmp/ab/$first/contract_cuda_ctl" > "$LOGS/contract_$first.txt" 2>&1
  grep -E "SUMMARY|FAIL|NOT CAUGHT|rror" "$LOGS/contract_$first.txt" | head -20 >> "$L"
fi
# optional_bench TITLE BUILD BINARY PATTERN: a bench older packs may lack, its lines matching PATTERN.
optional_bench() {
  echo "== $1 $2" >> "$L"
  if [ -x "/tmp/ab/$2/$3" ]; then
    timeout 120 "/tmp/ab/$2/$3" 2>&1 | grep -E "$4" >> "$L"
  else
    echo "(this pack has no $3)" >> "$L"
  fi
}
[ "${GEMM:-0}" = 1 ] && optional_bench cuBLAS "$first" bench_cuda_gemm "TFLOP|\| [0-9]"
for run in $NAMES; do
  v=${run%%@*}
  envs=()
  [ "$run" = "$v" ] || envs=("${run#*@}")
  if [ "${GEMV:-1}" = 1 ]; then
    echo "== weight kernels $v" >> "$L"
    timeout 120 "/tmp/ab/$v/bench_cuda_gemv" 2>&1 | grep -E "\| 1 \||copy" >> "$L"
  fi
  [ "${ATTN:-0}" = 1 ] && optional_bench attention "$v" bench_cuda_attention "^\| [dp]"
  echo "== bench $run" >> "$L"
  env ${envs[@]+"${envs[@]}"} timeout 300 "/tmp/ab/$v/tensorfold" bench /tmp/q4.gguf --backend cuda -n 128 \
    --pp-list "${PP:-512}" ${BENCHARGS:-} 2>&1 | grep -E "^pp|^tg|per token|streams|rror" >> "$L"
done
[ -z "${PROFILE:-}" ] ||
  BIN="/tmp/ab/${PROFILE%%@*}/tensorfold" TOKENS=4 bash tools/gpu/gpu_profile.sh /tmp/q4.gguf "$LOGS" >> "$L"
cat "$L"
