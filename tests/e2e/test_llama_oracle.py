"""The tensorfold binary's logits and greedy ids against the float64 numpy reference (tools/oracle/llama_ref.py).

Uses the conftest fixtures `tf_bin` and `model_path`; the HF tokenizer in tests/fixtures/smollm2 makes the prompts.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "oracle"))
import llama_ref  # noqa: E402
from oracle_prompts import N_LOGIT_POS, PROMPTS, prompt_ids  # noqa: E402

TOKENIZER = REPO_ROOT / "tests" / "fixtures" / "smollm2" / "tokenizer.json"
N_GREEDY = 64
CHUNK = 5
EPS32 = 2.0 ** -24
RUN_TIMEOUT_S = 600


def error_factor(m, n_tok):
    # c = sum of the reduction lengths n along the longest chain of sequential float32 reductions (each adds at most gamma_n ~ n*eps32 relative error, carried to h and then to the logit through S): per block attn_norm, q/k/v, QK^T (head_dim), softmax sum and PV (T each), o-proj, ffn_norm, gate/up (5*n_embd + head_dim + 2T) plus down (n_ff), then output_norm and the output product (2*n_embd).
    return m.n_layer * (5 * m.n_embd + m.head_dim + 2 * n_tok + m.n_ff) + 2 * m.n_embd


class Oracle:
    """Lazily computed, cached float64 reference results for one model."""

    def __init__(self, path):
        from tokenizers import Tokenizer
        self.model = llama_ref.load(path)
        self.tok = Tokenizer.from_file(str(TOKENIZER))
        self.ids = {name: prompt_ids(self.tok, text) for name, text in PROMPTS.items()}
        self._logits, self._greedy = {}, {}

    def logits(self, name):
        """(logits [16, vocab], S [16, vocab]) float64 for the first N_LOGIT_POS tokens of the prompt."""
        if name not in self._logits:
            lg, h = llama_ref.forward(self.model, self.ids[name][:N_LOGIT_POS])
            self._logits[name] = (lg, llama_ref.cond_term(self.model, h))
        return self._logits[name]

    def greedy(self, name):
        if name not in self._greedy:
            self._greedy[name] = llama_ref.greedy(self.model, self.ids[name], N_GREEDY)
        return self._greedy[name]


# Module-level so the f64 model loads once per session whatever scope conftest gives model_path.
_ORACLES = {}


@pytest.fixture
def oracle(model_path):
    if not TOKENIZER.is_file():
        pytest.skip(f"tokenizer fixture missing: {TOKENIZER}")
    if model_path not in _ORACLES:
        _ORACLES[model_path] = Oracle(model_path)
    return _ORACLES[model_path]


def run_bin(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert p.returncode == 0, f"{' '.join(args)} exited {p.returncode}\nstdout:\n{p.stdout[-2000:]}\nstderr:\n{p.stderr[-4000:]}"
    return p


def bin_logits(tf_bin, model_path, ids, out, chunk=None):
    args = [str(tf_bin), "logits", str(model_path), "--tokens", ",".join(map(str, ids)), "--out", str(out)]
    if chunk is not None:
        args += ["--chunk", str(chunk)]
    run_bin(args)
    return np.load(out)


def test_prompts_are_long_enough(oracle):
    for name, ids in oracle.ids.items():
        assert len(ids) >= N_LOGIT_POS, f"{name}: {len(ids)} tokens"


@pytest.mark.parametrize("name", list(PROMPTS))
def test_logits_match_f64_reference(tf_bin, model_path, oracle, name, tmp_path):
    m = oracle.model
    ids = oracle.ids[name][:N_LOGIT_POS]
    y = bin_logits(tf_bin, model_path, ids, tmp_path / "full.npy")
    y_chunk = bin_logits(tf_bin, model_path, ids, tmp_path / "chunk.npy", chunk=CHUNK)
    want_shape = (N_LOGIT_POS, m.n_vocab)
    assert y.dtype == np.float32 and y.shape == want_shape, f"unchunked: {y.dtype} {y.shape}, want float32 {want_shape}"
    assert y_chunk.dtype == np.float32 and y_chunk.shape == want_shape, f"chunked: {y_chunk.dtype} {y_chunk.shape}"
    assert np.all(np.isfinite(y)), "non-finite logits"

    ref, S = oracle.logits(name)
    c = error_factor(m, N_LOGIT_POS)
    bound = c * EPS32 * S
    err = np.abs(y.astype(np.float64) - ref)
    ratio = err / bound
    t, v = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    units = err / (EPS32 * S)
    summary = (f"{name}: c={c}, max |y-y64|={err.max():.3e}, worst at t={t} v={v}: y={y[t, v]:.6f} y64={ref[t, v]:.6f} "
               f"S={S[t, v]:.3f} err/bound={ratio[t, v]:.3e}; max err/(eps32*S)={units.max():.1f}, "
               f"violations={int(np.sum(ratio > 1))}/{ratio.size}")
    print(summary)
    assert np.all(ratio <= 1.0), summary

    diff = np.argwhere(y != y_chunk)
    assert np.array_equal(y, y_chunk), (
        f"{name}: --chunk {CHUNK} logits differ from unchunked at {len(diff)} entries; first at (t, v)={tuple(diff[0])}: "
        f"{y[tuple(diff[0])]!r} vs {y_chunk[tuple(diff[0])]!r}; max abs diff {np.abs(y - y_chunk).max():.3e}")


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_matches_f64_reference(tf_bin, model_path, oracle, name, tmp_path):
    ids = oracle.ids[name]
    out = tmp_path / "ids.json"
    run_bin([str(tf_bin), "run", str(model_path), "--tokens", ",".join(map(str, ids)), "-n", str(N_GREEDY),
             "--temperature", "0", "--ignore-eos", "--ids-out", str(out)])
    got = json.loads(out.read_text())
    assert got.get("prompt_ids") == ids, f"{name}: binary echoed prompt_ids {got.get('prompt_ids')}, sent {ids}"
    gen = [int(i) for i in got.get("ids", [])]
    ref = oracle.greedy(name)
    if gen == ref:
        return
    k = next((i for i in range(min(len(gen), len(ref))) if gen[i] != ref[i]), min(len(gen), len(ref)))
    msg = f"{name}: binary gave {len(gen)} ids, reference {len(ref)}; first difference at generated position {k}"
    if k < len(ref):
        # Reference logits at the differing step, teacher-forced over the shared prefix.
        row = llama_ref.logits(oracle.model, ids + ref[:k])[-1]
        top, second, margin = llama_ref.top2_margin(row)
        tok = oracle.tok
        msg += (f" (absolute position {len(ids) + k}): reference top-2 {top} {tok.decode([top], skip_special_tokens=False)!r} vs {second} "
                f"{tok.decode([second], skip_special_tokens=False)!r}, margin {margin:.6g}")
        if k < len(gen):
            b = gen[k]
            msg += f"; binary chose {b} {tok.decode([b], skip_special_tokens=False)!r}, reference logit gap to it {row[top] - row[b]:.6g}"
        msg += f"\nreference: {tok.decode(ref, skip_special_tokens=False)!r}\nbinary:    {tok.decode(gen, skip_special_tokens=False)!r}"
    pytest.fail(msg)
