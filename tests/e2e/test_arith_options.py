"""tools/oracle/arith_options.py: its roundings against worked values and CPython's half packing; llama_ref's hook."""
import struct
import subprocess
import sys
from pathlib import Path

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


def test_bf16_known_roundings():
    # Worked by hand: bf16 keeps 7 bits after the point; ties go to the even mantissa.
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, 1 + 2.0 ** -8 + 2.0 ** -30, -3.0])
    want = np.array([1.0, 1 + 2.0 ** -6, 1 + 2.0 ** -7, 1.0, -3.0])  # the fourth is a tie once rounded to float32
    assert np.array_equal(arith_options.bf16(x), want)


def test_hi_lo_keeps_about_16_bits():
    v = edge_values()
    got = arith_options.hi_lo(v)
    assert np.all(np.isfinite(got))  # 3e38's hi is a finite bf16
    normal = np.abs(v) > 1e-30
    assert np.all(np.abs(got - v)[normal] <= 2.0 ** -16 * np.abs(v)[normal])
    # Worked by hand: hi 1 + 2^-6 and lo -2^-8 are exact; hi 1 + 2^-7 and lo -2^-8 lose the 2^-20.
    assert np.array_equal(arith_options.hi_lo(np.array([1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20])),
                          np.array([1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8]))


def half(x):
    """CPython's own IEEE half packing (nearest even), an independent oracle; past the range it is infinite."""
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def test_fp16_is_round_to_nearest_even_through_float32():
    ties = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65504.0, 65519.0, 65520.0, -65520.0, 2.0 ** -25, 3 * 2.0 ** -25]
    v = np.concatenate([edge_values(), ties])
    want = np.array([half(float(np.float32(x))) for x in v])
    assert np.array_equal(arith_options.fp16(v), want)
    # Rounded twice, as a float32 kernel would: 1 + 2^-11 + 2^-40 is a tie in float32 and goes to 1.0.
    assert arith_options.fp16(np.array([1 + 2.0 ** -11 + 2.0 ** -40]))[0] == 1.0


def test_q8_blocks():
    v = edge_values()[:4096]
    x = v.reshape(4, 1024)
    got = arith_options.q8_blocks(x).reshape(4, 32, 32)
    s = np.abs(x.reshape(4, 32, 32)).max(axis=-1, keepdims=True).astype(np.float32).astype(np.float64) / 127.0
    q = got / s
    assert np.allclose(q, np.rint(q), atol=1e-9) and np.abs(q).max() <= 127.0 + 1e-9
    assert np.all(np.abs(got - x.reshape(4, 32, 32)) <= s / 2 * (1 + 1e-12))


def test_fixed_blocks_known_values():
    # Worked by hand: the group max 3.0 has exponent 1, so 16 bits scale by 2^13 and 24 bits by 2^21.
    x = np.zeros(32)
    x[:5] = [3.0, 1 + 2.0 ** -13, 2.0 ** -14, -3 * 2.0 ** -14, 2.5 * 2.0 ** -13]
    f16, f24 = arith_options.fixed_blocks(16), arith_options.fixed_blocks(24)
    want16 = np.zeros(32)
    want16[:5] = [3.0, 1 + 2.0 ** -13, 0.0, -2.0 ** -12, 2.0 ** -12]  # ties 0.5, -1.5, 2.5 units go to even
    assert np.array_equal(f16(x), want16)
    assert np.array_equal(f24(x), x)  # every value is a multiple of 2^-21
    # 2 - 2^-23 is 2^23 - 0.5 units, a tie that rounds to 2^23, one past the range: clamped to 2^23 - 1 units.
    y = np.full(32, 2.0 - 2.0 ** -23)
    assert np.array_equal(f24(y), np.full(32, 2.0 - 2.0 ** -22))
    v = np.concatenate([edge_values(), np.zeros(32 - len(edge_values()) % 32)]).reshape(-1, 32)
    assert 0 < v[-1, 5] < 1e-39 and v[-1, 6] > 1e38  # the last group holds 1e-40 beside 3e38
    assert np.all(np.isfinite(f24(v))) and f24(v)[-1, 5] == 0.0 and f24(v)[-1, 6] == v[-1, 6]
    for bits in (16, 24):
        got = arith_options.fixed_blocks(bits)(v)
        mx = np.abs(v).max(axis=-1, keepdims=True)
        assert np.all(np.abs(got - v) <= 2.0 ** -(bits - 1) * mx)


def test_fp16_hi_lo_rows_keeps_about_22_bits_under_the_row_scale():
    # Worked by hand: max 2 scales the row by 2^13; 8192 + 4 + 2^-17 has hi 8192 (a tie, to even) and lo 4.
    got = arith_options.fp16_hi_lo_rows(np.array([[1 + 2.0 ** -11 + 2.0 ** -30, 2.0, -0.5]]))
    assert np.array_equal(got, np.array([[1 + 2.0 ** -11, 2.0, -0.5]]))
    assert np.array_equal(arith_options.fp16_hi_lo_rows(np.zeros((2, 32))), np.zeros((2, 32)))
    rows = edge_values()[:4096].reshape(32, 128)
    got = arith_options.fp16_hi_lo_rows(rows)
    mx = np.abs(rows).max(axis=-1, keepdims=True)
    err = np.abs(got - rows)
    # Every value: 22 bits of its own, or the lo part's subnormal step under the row scale for the smallest.
    assert np.all(err <= 2.0 ** -21 * np.abs(rows) + mx * 2.0 ** -37)
    big = np.abs(rows) >= mx * 2.0 ** -10
    assert np.all(err[big] <= 2.0 ** -21 * np.abs(rows)[big])  # hi alone would keep 11 bits
    hi_only = arith_options.fp16(rows * 2.0 ** 14 / mx) * mx / 2.0 ** 14
    assert np.any(np.abs(hi_only - rows)[big] > 2.0 ** -21 * np.abs(rows)[big])


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
    assert not np.array_equal(llama_ref.hidden(m, ids, rnd=arith_options.bf16), h)
    # Each site uses what it rounded: zeroing one site's input (first and last layer) changes the hidden state.
    sites = 4 * m.n_layer
    for k in (0, 1, 2, 3, sites - 4, sites - 3, sites - 2, sites - 1):
        calls = []

        def zero_at(v, k=k, calls=calls):
            calls.append(1)
            return np.zeros_like(v) if len(calls) - 1 == k else v

        assert not np.array_equal(llama_ref.hidden(m, ids, rnd=zero_at), h), f"site {k} ignores its rounded input"
    # greedy and forward also round the output product's input: the prompt, then each next token.
    seen.clear()
    llama_ref.greedy(m, ids, 2, rnd=record)
    layers = lambda n: [(n, d), (n, a), (n, d), (n, f)] * m.n_layer  # noqa: E731
    assert seen == layers(t) + [(1, d)] + layers(1) + [(1, d)]
    seen.clear()
    llama_ref.forward(m, ids, rnd=record)
    assert seen == layers(t) + [(t, d)]


def test_greedy_below_one_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "oracle" / "arith_options.py"),
                           str(tmp_path / "absent.gguf"), "--greedy", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--greedy 0: at least one greedy token is needed" in proc.stderr, proc.stderr


def test_fp16_rows_keeps_11_bits_under_the_row_scale():
    # Worked by hand: max 2 scales the row by 2^13; 1 + 2^-11 is a tie (to 1), 1 + 3 * 2^-11 one too (to 1 + 2^-9).
    got = arith_options.fp16_rows(np.array([[1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2.0]]))
    assert np.array_equal(got, np.array([[1.0, 1 + 2.0 ** -9, 2.0]]))
    # Rows past fp16's range or below its normals keep 11 bits where plain fp16 would overflow or flush.
    for row in (np.array([[1e6, -3e5, 7.0]]), np.array([[1e-30, -3e-30, 2e-31]])):
        got = arith_options.fp16_rows(row)
        assert np.all(np.abs(got - row) <= 2.0 ** -11 * np.abs(row))
        assert not np.all(np.abs(arith_options.fp16(row) - row) <= 2.0 ** -11 * np.abs(row))


def test_fp16_attention_scales_values_down_only():
    q, k = np.ones((1, 1, 4)), np.ones((2, 1, 4))
    v = np.array([[[7e4, 1.0, 2.0, 3.0]], [[0.5, 0.25, 1.0, 2.0]]])
    _, _, got, sv = arith_options.Fp16Attention.qkv(q, k, v)
    # Worked by hand: max 7e4 lies in [2^16, 2^17), so that row scales by 2^-2; the other keeps its own values.
    assert sv.shape == (2, 1) and sv[0, 0] == 0.25 and sv[1, 0] == 1.0
    assert np.all(np.isfinite(got)) and np.all(np.abs(got - v) <= 2.0 ** -11 * np.abs(v))
    assert arith_options.Fp16Attention.p(np.array([1 + 2.0 ** -11]))[0] == 1.0


def test_attention_hook_is_the_exact_attention_when_it_rounds_nothing(model_path):
    m = llama_ref.load(model_path)
    ids = [1, 2, 3, 4]

    class Same:
        @staticmethod
        def qkv(q, k, v):
            return q, k, v, np.ones(v.shape[:2])

        @staticmethod
        def p(w):
            return w

    h = llama_ref.hidden(m, ids)
    assert np.array_equal(llama_ref.hidden(m, ids, att=Same), h)
    assert not np.array_equal(llama_ref.hidden(m, ids, att=arith_options.Fp16Attention), h)
    assert llama_ref.greedy(m, ids, 2, att=Same) == llama_ref.greedy(m, ids, 2)
