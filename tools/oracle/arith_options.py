#!/usr/bin/env python3
"""How far other product arithmetics move a model's logits from the float64 reference: data for choosing one.

Each option rounds the input rows of every weight product (and, for some, the weights or attention's operands) the
way a kernel family would, then runs llama_ref's float64 forward; otherwise attention's own products stay exact.
Reported per option, over the prompts of tools/oracle/oracle_prompts.py (those of the oracle test) teacher-forced
along the exact greedy continuation: the largest logit error, that error over the product's conditioning
S = sum |w h|, positions whose argmax moves, and where a greedy run of its own first leaves the exact one.

Usage: python tools/oracle/arith_options.py MODEL [--greedy 64] [--tokenizer tests/fixtures/smollm2/tokenizer.json]
       [--only TEXT]
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_ref  # noqa: E402
from oracle_prompts import PROMPTS, prompt_ids  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def bf16(x):
    """Round to bfloat16 (nearest even), through float32 as the kernels hold activations."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def hi_lo(x):
    """The CUDA products' x: float32, split into bf16 hi + bf16 lo (about 16 bits kept)."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    hi = bf16(x32)
    return hi + bf16(x32 - hi)


def fp16(x):
    """Round to float16 (nearest even), through float32 as the kernels hold activations."""
    with np.errstate(over="ignore"):  # past 65504 a half is infinite, as the kernels would make it
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def groups32(x):
    """float32 activations as a kernel holds them, in groups of 32 values, with each group's max |x|."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    b = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    return x.shape, b, np.abs(b).max(axis=-1, keepdims=True)


def q8_blocks(x):
    """int8 per 32 values with a float32 scale max|x| / 127, as llama.cpp's q8_1 activations."""
    shape, b, mx = groups32(x)
    s = mx.astype(np.float32).astype(np.float64) / 127.0
    q = np.where(s > 0, np.rint(b / np.where(s > 0, s, 1.0)), 0.0)
    return (q * s).reshape(shape)


def fixed_blocks(bits):
    """Signed fixed point per 32 values under a power-of-two scale (max |x| below 2^(bits-1)), as int8 limbs hold it."""
    top = 2.0 ** (bits - 1)

    def rnd(x):
        shape, b, mx = groups32(x)
        e = np.floor(np.log2(np.where(mx > 0, mx, 1.0)))
        s = np.exp2(bits - 2 - e)  # max |x| * s < 2^(bits-1)
        q = np.clip(np.rint(b * s), -top, top - 1)
        return (q / s).reshape(shape)

    return rnd


def fp16_hi_lo_rows(x):
    """fp16 hi + fp16 lo of each row under its power of two (max |x| scaled into [2^14, 2^15)): about 22 bits kept."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    mx = np.abs(x).max(axis=-1, keepdims=True)
    s = np.exp2(14 - np.floor(np.log2(np.where(mx > 0, mx, 1.0))))
    xs = x * s
    hi = fp16(xs)
    return (hi + fp16(xs - hi)) / s


def fp16_rows(x):
    """fp16 of each row under its power of two (max |x| scaled into [2^14, 2^15)), as the CUDA prompt products."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    s = _row_scale(x)
    return fp16(x * s) / s


def _row_scale(x, down_only=False):
    mx = np.abs(x).max(axis=-1, keepdims=True)
    e = 14 - np.floor(np.log2(np.where(mx > 0, mx, 1.0)))
    return np.exp2(np.minimum(e, 0) if down_only else e)


class Fp16Attention:
    """The CUDA prompt rows' attention: Q per row and head, K and V per key row in fp16 under powers of two (V only
    scaled down), the unnormalised weights P times each key's 2^-ev in fp16."""

    @staticmethod
    def qkv(q, k, v):
        v32 = np.asarray(v, dtype=np.float32).astype(np.float64)
        sv = _row_scale(v32, down_only=True)
        return fp16_rows(q), fp16_rows(k), fp16(v32 * sv) / sv, sv[..., 0]

    @staticmethod
    def p(w):
        return fp16(w)


def fp16_weights(m):
    """The model with every product weight rounded to float16 (scales applied in half precision)."""
    layers = [replace(L, wq=fp16(L.wq), wk=fp16(L.wk), wv=fp16(L.wv), wo=fp16(L.wo), w_gate=fp16(L.w_gate),
                      w_up=fp16(L.w_up), w_down=fp16(L.w_down)) for L in m.layers]
    return replace(m, layers=layers, w_out=fp16(m.w_out))


OPTIONS = [  # (name, rounding of product inputs, weight transform, attention's rounding)
    ("float32 x as bf16 hi + lo (the CUDA products now)", hi_lo, None, None),
    ("bf16 x (one mma a step)", bf16, None, None),
    ("fp16 x", fp16, None, None),
    ("float32 x as fp16 hi + lo under a per-row power of two", fp16_hi_lo_rows, None, None),
    ("int8 x per 32 (q8_1-like)", q8_blocks, None, None),
    ("24-bit fixed-point x per 32 (three int8 limbs)", fixed_blocks(24), None, None),
    ("16-bit fixed-point x per 32 (two int8 limbs)", fixed_blocks(16), None, None),
    ("fp16 x and fp16 weights (Marlin-like)", fp16, fp16_weights, None),
    ("fp16 x per row and fp16 weights, attention exact", fp16_rows, fp16_weights, None),
    ("fp16 x per row and fp16 weights, fp16 attention (CUDA prompt rows)", fp16_rows, fp16_weights, Fp16Attention),
]


def study(m, prompts, n_greedy, only=""):
    exact = {}
    for name, ids in prompts.items():
        gen = llama_ref.greedy(m, ids, n_greedy)
        seq = ids + gen[:-1]
        ref, h = llama_ref.forward(m, seq)
        exact[name] = (gen, seq, ref, llama_ref.cond_term(m, h))
    rows = []
    for label, rnd, wt, att in OPTIONS:
        if only not in label:
            continue
        mm = wt(m) if wt else m
        worst_abs = worst_rel = 0.0
        moved = total = 0
        first = []
        for name, ids in prompts.items():
            gen, seq, ref, cond = exact[name]
            got, _ = llama_ref.forward(mm, seq, rnd=rnd, att=att)
            err = np.abs(got - ref)
            worst_abs = max(worst_abs, float(err.max()))
            worst_rel = max(worst_rel, float((err / cond).max()))
            moved += int((got.argmax(axis=1) != ref.argmax(axis=1)).sum())
            total += len(seq)
            own = llama_ref.greedy(mm, ids, n_greedy, rnd=rnd, att=att)
            d = next((i for i, (a, b) in enumerate(zip(own, gen)) if a != b), None)
            first.append("-" if d is None else str(d))
        rows.append((label, worst_abs, worst_rel, moved, total, first))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--greedy", type=int, default=64, help="greedy tokens per prompt (at least 1)")
    ap.add_argument("--tokenizer", default=str(REPO_ROOT / "tests" / "fixtures" / "smollm2" / "tokenizer.json"))
    ap.add_argument("--only", default="", help="run only the options whose name contains this text")
    a = ap.parse_args(argv)
    if a.greedy < 1:
        ap.error(f"--greedy {a.greedy}: at least one greedy token is needed")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    prompts = {k: prompt_ids(tok, v) for k, v in PROMPTS.items()}
    m = llama_ref.load(a.model)
    rows = study(m, prompts, a.greedy, a.only)
    print(f"| product arithmetic | max abs logit error | max error / S | argmax moved (teacher-forced) | "
          f"greedy first differs at ({', '.join(prompts)}) |")
    print("| --- | --- | --- | --- | --- |")
    for label, e_abs, e_rel, moved, total, first in rows:
        print(f"| {label} | {e_abs:.3g} | {e_rel:.3g} | {moved} of {total} | {', '.join(first)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
