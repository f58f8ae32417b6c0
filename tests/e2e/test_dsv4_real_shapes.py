"""V4-Flash's real shapes (2 layers: a CSA hash layer and an HCA layer, plus MTP; ~12 GB written to local disk):
`tensorfold info` reports the family, formats and parameters, the tensors' bytes match the files, and `run` on the
CPU produces tokens. Slow and disk-hungry: runs only with TF_REAL_SHAPES=1 (give TF_REAL_SHAPES_DIR to keep it)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("TF_REAL_SHAPES") != "1", reason="set TF_REAL_SHAPES=1 (~12 GB)")]


@pytest.fixture(scope="module")
def flash2(tmp_path_factory):
    out = Path(os.environ.get("TF_REAL_SHAPES_DIR") or tmp_path_factory.mktemp("flash2"))
    if not (out / "model.safetensors.index.json").exists():
        subprocess.run([sys.executable, str(ROOT / "tools/fixtures/gen_deepseek_v4.py"), "--shape", "flash2", "--out",
                        str(out)], check=True, timeout=1800)
    return out


def expected_params(cfg):
    """V4's parameter count from its config alone (spec section 3 inventory), scales not counted."""
    D, V, H, d, qr = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"], cfg["head_dim"], cfg["q_lora_rank"]
    G, ol, E, I, hc = cfg["o_groups"], cfg["o_lora_rank"], cfg["n_routed_experts"], cfg["moe_intermediate_size"], 4
    ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]

    def block(ratio, hash_layer):
        n = 2 * D + 2 * ((2 + hc) * hc * hc * D + (2 + hc) * hc + 3) + H + qr + d
        n += qr * D + H * d * qr + d * D + G * ol * (H * d // G) + D * G * ol
        if ratio:
            cw = 2 * d if ratio == 4 else d
            n += 2 * cw * D + ratio * cw + d
        if ratio == 4:
            n += ih * idim * qr + ih * D + 2 * 2 * idim * D + 4 * 2 * idim + idim
        n += E * D + (V * cfg["num_experts_per_tok"] if hash_layer else E)
        n += 3 * I * D + E * 3 * I * D
        return n

    n = 2 * V * D + D + 2 * (hc * hc * D + hc + 1)
    for L in range(cfg["num_hidden_layers"]):
        n += block(cfg["compress_ratios"][L], L < cfg["num_hash_layers"])
    return n + block(0, False) + 2 * D * D + 3 * D


def test_info_and_run_on_real_shapes(tf_bin, flash2):
    cfg = json.loads((flash2 / "config.json").read_text())
    proc = subprocess.run([tf_bin, "info", str(flash2)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    print(out)
    assert "family:        deepseek_v4" in out
    assert f"parameters:    {expected_params(cfg)} " in out, (expected_params(cfg), out)
    files = sum(p.stat().st_size for p in flash2.glob("*.safetensors"))
    m = re.search(r"weights ([\d.]+) MiB \(mapped from ([\d.]+) MiB of files\)", out)
    assert m and abs(float(m.group(2)) - files / 2**20) < 0.1, (files, out)
    assert float(m.group(1)) <= float(m.group(2)) and float(m.group(2)) - float(m.group(1)) < 16, out  # headers only
    assert "mxfp4 x2304" in out and "fp8_block/e8m0 x27" in out, out
    run = subprocess.run([tf_bin, "run", str(flash2), "-p", "Hello world", "-n", "4", "--context", "256"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "generated tokens: 4" in run.stdout + run.stderr, run.stdout + run.stderr
