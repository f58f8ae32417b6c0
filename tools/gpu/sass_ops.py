#!/usr/bin/env python3
"""Counts a kernel's SASS instructions by opcode: `cuobjdump -sass OBJ > F.sass`, then `sass_ops.py NAME F.sass ...`.

NAME is a substring of the mangled function name (e.g. attention_wg_kernelILi128); one line per file, so two builds
of one translation unit compare without a GPU. cuobjdump and nvdisasm come in the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels.
"""
import collections
import re
import sys

SHOWN = "FMUL FFMA FADD MUFU SHFL FMNMX F2FP HGMMA ISETP FSETP VOTE STL LDL BRA".split()


def count(path: str, name: str) -> collections.Counter:
    ops: collections.Counter = collections.Counter()
    inside = False
    for line in open(path, encoding="utf-8", errors="replace"):
        if "Function :" in line:
            inside = name in line
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line) if inside else None
        if m:
            ins = re.sub(r"^@!?U?P[0-9T]\s+", "", m.group(1).strip())  # the predicate is not the opcode
            ops[ins.split()[0].split(".")[0]] += 1
    return ops


def main() -> None:
    name = sys.argv[1]
    for path in sys.argv[2:]:
        ops = count(path, name)
        print(path, "total", sum(ops.values()), " ".join(f"{k}={ops[k]}" for k in SHOWN))


if __name__ == "__main__":
    main()
