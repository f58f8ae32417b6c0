#!/usr/bin/env bash
# Here, no GPU needed, after `cmake --build build/cuda-release`: registers and spilled bytes of every product kernel
# instantiation (ptxas -v on the sm_90a objects), one line each, so a change's register cost shows before a GPU run;
# then ptxas's wgmma notes (C75xx: serialised wgmma, injected waits), which cost time without changing a bit.
# Args: the CUDA sources under src/backend/cuda to report (default: the two product-kernel files).
set -euo pipefail
cd "$(dirname "$0")/../../build/cuda-release"
for f in "${@:-mma_kernels_a.cu mma_kernels_b.cu}"; do
  for src in $f; do
    cmd=$(ninja -t commands "src/backend/CMakeFiles/tf_backend_cuda.dir/cuda/$src.o" 2>/dev/null | tail -1) || true
    [ -n "$cmd" ] || { echo "no compile command for $src (not a CUDA source of tf_backend_cuda?)" >&2; exit 2; }
    out=$(mktemp) log=$(mktemp)
    eval "${cmd/-c /-Xptxas -v -c } -o $out" > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
    grep -E "Compiling entry|spill|Used" "$log" | paste - - - |
      sed -E 's/.*Compiling entry function .(_Z[A-Za-z0-9_]+). for .(sm_[0-9a-z]+).*, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\2 regs=\4 spill=\3 \1/' |
      while read -r arch regs spill sym; do
        # The products' first template argument is the GGUF type number: named here.
        echo "$src $arch $regs $spill $(c++filt "$sym" | sed -E 's/tf::cuda::|\(tf::cuda::MmaArgs\)//g;
          s/<2,/<Q4_0,/; s/<3,/<Q4_1,/; s/<8,/<Q8_0,/; s/<12,/<Q4_K,/; s/<14,/<Q6_K,/; s/<30,/<BF16,/')"
      done
    # No notes is the good case: `|| true` below keeps pipefail from ending the script there.
    grep -E "\(C75[0-9]+\)" "$log" | sed -E "s/.*\((C75[0-9]+)\) (.*) in (the )?function '(_Z[A-Za-z0-9_]+)'.*/\1 \4 \2/" |
      while read -r code sym note; do echo "$src $code $(c++filt "$sym" | sed -E 's/\(anonymous namespace\):://g; s/tf::cuda:://g; s/\(.*//; s/^void //'): $note"; done || true
    rm -f "$out" "$log"
  done
done
