#!/usr/bin/env python3
"""How far one build's logits moved from another's (two `tensorfold logits --out` files of the same tokens)."""
import sys

import numpy as np


def main() -> None:
    a, b = (np.load(p).astype(np.float64) for p in sys.argv[1:3])
    moved = np.abs(a - b).max(axis=-1)  # each row's largest change
    print(f"logits moved: rows {a.shape[0]}, largest {moved.max():.3g}, median row {np.median(moved):.3g}, "
          f"rows past 1: {int((moved > 1).sum())}, argmax changed: {int((a.argmax(-1) != b.argmax(-1)).sum())}, "
          f"row std (mean) {a.std(axis=-1).mean():.3g}")


if __name__ == "__main__":
    main()
