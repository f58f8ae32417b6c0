"""DeepSeek-V4 checkpoints in the release layout (tools/fixtures/gen_deepseek_v4.py): `tensorfold info` reads the
config and every tensor, its parameter count matches one taken from the files with the `safetensors` library, and
each bad checkpoint is refused at startup naming the key or tensor."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
import gen_deepseek_v4  # noqa: E402


def tf(tf_bin, *args):
    return subprocess.run([str(tf_bin), *map(str, args)], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("dsv4") / "tiny"
    subprocess.run([sys.executable, str(ROOT / "tools/fixtures/gen_deepseek_v4.py"), "--out", str(out)], check=True)
    return out


def copy_of(tiny, tmp_path):
    dst = tmp_path / "ck"
    shutil.copytree(tiny, dst)
    return dst


def read_shard(path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}, meta


def write_shard(path, tensors):
    gen_deepseek_v4.write_safetensors(path, [(k, d, sh, b) for k, (d, sh, b) in tensors.items()])


def edit_tensor(folder, name, fn):
    """Applies fn(dtype, shape, bytes) -> (dtype, shape, bytes) or None (drop) to one tensor, index kept in step."""
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = folder / index["weight_map"][name]
    tensors, _ = read_shard(shard)
    new = fn(*tensors[name])
    if new is None:
        del tensors[name]
        del index["weight_map"][name]
        index_path.write_text(json.dumps(index))
    else:
        tensors[name] = new
    write_shard(shard, tensors)


def edit_config(folder, fn):
    cfg = json.loads((folder / "config.json").read_text())
    fn(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_info_reads_every_tensor(tf_bin, tiny):
    proc = tf(tf_bin, "info", tiny)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "family:        deepseek_v4" in out
    # The oracle: logical weights counted from the files by the safetensors library (E2M1 bytes hold two weights).
    index = json.loads((tiny / "model.safetensors.index.json").read_text())
    params, dtypes = 0, {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(tiny / shard), "np") as f:
            for k in f.keys():
                if k.endswith(".scale"):
                    continue
                sl = f.get_slice(k)
                n = 1
                for d in sl.get_shape():
                    n *= d
                params += n * (2 if sl.get_dtype() == "I8" else 1)
                dtypes[sl.get_dtype()] = dtypes.get(sl.get_dtype(), 0) + 1
    assert f"parameters:    {params} " in out, (params, out)
    assert f"mxfp4 x{dtypes['I8']}" in out and f"fp8_block/e8m0 x{dtypes['F8_E4M3']}" in out, (dtypes, out)
    assert f"i64 x{dtypes['I64']}" in out, (dtypes, out)
    assert "layers:        5, hidden 64, vocabulary 512" in out


def test_run_produces_tokens(tf_bin, tiny):
    proc = tf(tf_bin, "run", tiny, "-p", "Hello world", "-n", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), proc.stderr


CONFIG_CASES = [
    ("model_type", lambda c: c.update(model_type="deepseek_v9"), "model_type 'deepseek_v9' is not supported"),
    ("expert_dtype", lambda c: c.update(expert_dtype="int4"), "'expert_dtype' is 'int4', which is not supported"),
    ("block size", lambda c: c["quantization_config"].update(weight_block_size=[16, 16]),
     "'quantization_config.weight_block_size' 16 is not a multiple of 32"),
    ("block shape", lambda c: c["quantization_config"].update(weight_block_size=[64, 128]), "must be [B, B]"),
    ("scale format", lambda c: c["quantization_config"].update(scale_fmt="ue4m3"),
     "'quantization_config.scale_fmt' is 'ue4m3', which is not supported"),
    ("ratio", lambda c: c["compress_ratios"].__setitem__(2, 8), "'compress_ratios[2]' is 8"),
    ("missing key", lambda c: c.pop("hidden_size"), "'hidden_size' is required but missing"),
    ("wrong kind", lambda c: c.update(num_attention_heads="4"), "'num_attention_heads' must be an integer"),
    ("negative mtp", lambda c: c.update(num_nextn_predict_layers=-1, compress_ratios=c["compress_ratios"][:-2]),
     "'num_nextn_predict_layers' must not be negative"),
    ("index dim", lambda c: c.update(index_head_dim=4), "'index_head_dim' 4 is smaller than qk_rope_head_dim 8"),
    ("norm_topk", lambda c: c.update(norm_topk_prob=False), "'norm_topk_prob' false is not supported"),
    ("odd rope dim", lambda c: c.update(qk_rope_head_dim=7), "'qk_rope_head_dim' 7 must be even"),
    ("index dim power", lambda c: c.update(index_head_dim=12), "'index_head_dim' 12 is not a power of two"),
    ("rope type", lambda c: c["rope_scaling"].update(rope_type="linear"),
     "'rope_scaling.rope_type' is 'linear', which is not supported"),
    ("fp8 experts", lambda c: c.update(expert_dtype="fp8"),
     "'layers.0.ffn.experts.0.w1.weight' is I8; the release stores it as F8_E4M3"),
]


@pytest.mark.parametrize("what,edit,expect", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_refusals_name_the_key(tf_bin, tiny, tmp_path, what, edit, expect):
    ck = copy_of(tiny, tmp_path)
    edit_config(ck, edit)
    proc = tf(tf_bin, "info", ck)
    assert proc.returncode != 0 and expect in proc.stderr + proc.stdout, (what, proc.stdout + proc.stderr)


TENSOR_CASES = [
    ("missing", "layers.2.attn.compressor.ape", lambda d, s, b: None,
     "lacks tensor 'layers.2.attn.compressor.ape'"),
    ("mis-shaped", "layers.1.attn.wq_b.weight", lambda d, s, b: (d, [s[1], s[0]], b),
     "tensor 'layers.1.attn.wq_b.weight' is F8_E4M3 [32, 128], expected [128, 32]"),
    ("scale dtype", "layers.0.attn.wkv.scale", lambda d, s, b: ("U8", s, b),
     "'layers.0.attn.wkv.scale' is U8; FP8 block scales must be F8_E8M0 or F32"),
    ("scale grid", "layers.3.attn.wo_b.scale", lambda d, s, b: (d, [1, 1, 1], b),
     "'layers.3.attn.wo_b.scale' is [1, 1, 1], expected [1, 1]"),
    ("expert scale", "layers.4.ffn.experts.5.w1.scale", lambda d, s, b: ("F32", [s[0] // 4, s[1]], b),
     "MXFP4 scales must be F8_E8M0"),
    ("tid2eid", "layers.0.ffn.gate.tid2eid", lambda d, s, b: ("I32", [s[0], s[1] * 2], b), "expected I64"),
    ("scale fmt", "layers.0.attn.wkv.scale", lambda d, s, b: ("F32", s, b * 4),
     "'layers.0.attn.wkv.scale' is F32 but quantization_config.scale_fmt is 'ue8m0'"),
    ("fp8 weight", "layers.0.attn.wkv.weight", lambda d, s, b: ("U8", s, b),
     "'layers.0.attn.wkv.weight' is U8; the release stores it as F8_E4M3"),
    ("expert dtype", "layers.4.ffn.experts.5.w1.weight", lambda d, s, b: ("I16", [s[0], s[1] // 2], b),
     "'layers.4.ffn.experts.5.w1.weight' is I16; MXFP4 experts are stored as I8"),
    ("mtp", "mtp.0.e_proj.weight", lambda d, s, b: None, "lacks tensor 'mtp.0.e_proj.weight'"),
    ("tid2eid range", "layers.1.ffn.gate.tid2eid", lambda d, s, b: (d, s, (99).to_bytes(8, "little") + b[8:]),
     "'layers.1.ffn.gate.tid2eid' names expert 99 at entry 0, outside 0..7"),
]


@pytest.mark.parametrize("what,name,edit,expect", TENSOR_CASES, ids=[c[0] for c in TENSOR_CASES])
def test_tensor_refusals_name_the_tensor(tf_bin, tiny, tmp_path, what, name, edit, expect):
    ck = copy_of(tiny, tmp_path)
    edit_tensor(ck, name, edit)
    for cmd in (["info", ck], ["run", ck, "-p", "hi", "-n", "1"]):
        proc = tf(tf_bin, *cmd)
        assert proc.returncode != 0 and expect in proc.stderr + proc.stdout, (what, cmd[0], proc.stdout + proc.stderr)
