"""Per-kernel decode time from an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum).

Groups launches by kernel and grid and prints each group's launches and microseconds per decoded token, largest
first, so a decode token's time splits by kernel. Usage: kernel_times.py ncu.csv TOKENS
"""
import csv
import re
import sys
from collections import defaultdict

UNIT = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def short(name):
    name = re.sub(r"\(.*", "", name) if not name.startswith("void ") else re.sub(r"^void ", "", name)
    return re.sub(r"\(.*$", "", name).replace("tf::cuda::", "")[:70]


def main():
    path, tokens = sys.argv[1], int(sys.argv[2])
    groups = defaultdict(lambda: [0, 0.0])
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(row["Metric Value"].replace(",", "")) * UNIT.get(row["Metric Unit"], 1.0)
        g = groups[(short(row["Kernel Name"]), row["Grid Size"], row["Block Size"])]
        g[0] += 1
        g[1] += us
    total = sum(v[1] for v in groups.values())
    print(f"{'kernel':70} {'grid':>16} {'block':>12} {'n':>6} {'mean us':>8} {'us/token':>9}")
    for (name, grid, block), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:70} {grid:>16} {block:>12} {n:6d} {us / n:8.2f} {us / tokens:9.1f}")
    print(f"total {total / tokens:.1f} us per token over {tokens} tokens (launches serialised by the profiler)")


if __name__ == "__main__":
    main()
