"""Where one kernel's warps stall, from Nsight Compute's SASS source page exported as CSV.

Export: ncu -i REPORT --page source --csv --print-source sass > sass.csv (the report taken with --set full
--import-source yes). Prints the samples per stall reason, the non-barrier samples along the program in equal
segments (which phase of the kernel the critical warp spends its time in) and the lines with the most non-barrier
samples. Usage: kernel_stalls.py sass.csv [segments]
"""
import csv
import sys


def main():
    path = sys.argv[1]
    segments = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = list(csv.reader(open(path, newline="")))
    head_at = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    hdr = rows[head_at]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    lines = []
    totals = {r: 0 for r in reasons}
    for r in rows[head_at + 1 :]:
        if r == hdr:  # the next kernel's table: a report of several launches is read for its first
            break
        if len(r) < len(hdr):
            continue
        v = {k: int(r[ix[k]] or 0) for k in reasons}
        for k in reasons:
            totals[k] += v[k]
        executed = int(r[ix["Instructions Executed"]] or 0) if "Instructions Executed" in ix else 0
        lines.append((sum(v.values()) - v.get("stall_barrier", 0), r[ix["Source"]].strip(), v, executed))
    all_samples = sum(totals.values())
    print(f"{all_samples} samples, {len(lines)} SASS lines, {sum(1 for l in lines if l[3])} executed")
    for k, n in sorted(totals.items(), key=lambda x: -x[1]):
        if n:
            print(f"  {k[6:]:<18} {n:7d}  {100.0 * n / max(all_samples, 1):5.1f}%")
    print("non-barrier samples along the program:")
    step = max(1, len(lines) // segments)
    for i in range(0, len(lines), step):
        part = lines[i : i + step]
        print(f"  {i:6d} {sum(l[0] for l in part):6d}  {part[0][1][:60]}")
    print("top lines:")
    for n, src, v, _ in sorted(lines, key=lambda x: -x[0])[:25]:
        if n == 0:
            break
        why = ", ".join(f"{k[6:]} {x}" for k, x in sorted(v.items(), key=lambda x: -x[1]) if x and k != "stall_barrier")
        print(f"  {n:5d}  {src[:60]:<60}  {why}")


if __name__ == "__main__":
    main()
