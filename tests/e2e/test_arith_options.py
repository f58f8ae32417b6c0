"""tools/oracle/arith_options.py: its roundings against ml_dtypes and numpy, and llama_ref's hook at the products."""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "oracle"))
import arith_options  # noqa: E402
import llama_ref  # noqa: E402


def edge_values():
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.standard_normal(4096) * 10.0 ** rng.integers(-6, 6, 4096),
                        [0.0, -0.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, 1e-40, 3e38]])
    return v.astype(np.float32).astype(np.float64)


def test_bf16_is_round_to_nearest_even():
    v = edge_values()
    want = v.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(arith_options.bf16(v), want)


def test_hi_lo_keeps_about_16_bits():
    v = edge_values()[:-1]  # 3e38's hi rounds to infinity, which the kernels treat apart
    hi = v.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    lo = (v.astype(np.float32) - hi.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float64)
    got = arith_options.hi_lo(v)
    assert np.array_equal(got, hi + lo)
    normal = np.abs(v) > 1e-30
    assert np.all(np.abs(got - v)[normal] <= 2.0 ** -16 * np.abs(v)[normal])


def test_fp16_and_q8_blocks():
    v = edge_values()
    with np.errstate(over="ignore"):  # past 65504 both give infinity
        assert np.array_equal(arith_options.fp16(v), v.astype(np.float16).astype(np.float64))
    v = v[:4096]
    x = v.reshape(4, 1024)
    got = arith_options.q8_blocks(x).reshape(4, 32, 32)
    s = np.abs(x.reshape(4, 32, 32)).max(axis=-1, keepdims=True).astype(np.float32).astype(np.float64) / 127.0
    q = got / s
    assert np.allclose(q, np.rint(q), atol=1e-9) and np.abs(q).max() <= 127.0 + 1e-9
    assert np.all(np.abs(got - x.reshape(4, 32, 32)) <= s / 2 * (1 + 1e-12))


def test_hook_rounds_each_product_input_once(model_path):
    m = llama_ref.load(model_path)
    seen = []

    def record(v):
        seen.append(v.shape)
        return v

    ids = [1, 2, 3]
    h = llama_ref.hidden(m, ids, rnd=record)
    t, d, f, a = len(ids), m.n_embd, m.n_ff, m.n_head * m.head_dim
    assert seen == [(t, d), (t, a), (t, d), (t, f)] * m.n_layer
    assert np.array_equal(h, llama_ref.hidden(m, ids))
    assert not np.array_equal(llama_ref.hidden(m, ids, rnd=arith_options.bf16), h)
