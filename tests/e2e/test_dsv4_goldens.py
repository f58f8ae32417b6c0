"""The V4 CPU forward against transformers' DeepseekV4ForCausalLM goldens (tests/fixtures/dsv4_goldens, made by
tools/fixtures/gen_dsv4_goldens.py, with transformers 5.24.0 and torch 2.9.1 on CPU, from the tiny checkpoint of
gen_deepseek_v4.py)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = ROOT / "tests" / "fixtures" / "dsv4_goldens"
sys.path.insert(0, str(ROOT / "tools" / "oracle"))
import dsv4_reference  # noqa: E402


def test_logits_match_transformers(tf_bin, tmp_path):
    meta = json.loads((GOLDENS / "goldens.json").read_text())
    gold = np.load(GOLDENS / "goldens.npz")
    ck = tmp_path / "tiny"
    subprocess.run([sys.executable, str(ROOT / "tools/fixtures/gen_deepseek_v4.py"), "--out", str(ck)], check=True)
    sha = dsv4_reference.checkpoint_sha256(str(ck))
    assert sha == meta["checkpoint_sha256"], "the fixture changed: regenerate the goldens"
    out = tmp_path / "logits.npy"
    ids = meta["tokens"]
    assert tuple(map(int, meta["transformers"].split(".")[:2])) >= (5, 17)
    ref = dsv4_reference.Model(dsv4_reference.Checkpoint(str(ck)))
    ref.forward(ids[:40])
    assert ref.clamped > 0, "the fixture's SwiGLU inputs never reach the clamp: the goldens would not test it"
    for chunk in (0, 1, 37, 200):
        proc = subprocess.run([tf_bin, "logits", str(ck), "--tokens", ",".join(map(str, ids)), "--chunk", str(chunk),
                               "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = np.load(out).astype(np.float64)
        full = gold["full"].astype(np.float64)
        rel = np.abs(got - full).max(axis=1) / np.abs(full).max(axis=1)
        assert rel.max() < 1e-4, f"chunk {chunk}: worst position {rel.argmax()}: {rel.max():.3g}"
        top2 = np.sort(full, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(full).max(axis=1)
        assert clear.mean() > 0.9  # the greedy check covers nearly every position
        assert (got.argmax(1) == full.argmax(1))[clear].all()
        for k in ("chunk1", "chunk37", "chunk200"):
            assert (got.argmax(1) == gold[k + "_argmax"])[clear].all(), k
