"""DeepSeek-V4 forward on the CPU against the float64 numpy reference (tools/oracle/dsv4_reference.py) on a tiny
release-layout checkpoint, and the engine's exactness for this family: chunked prefill equals the full forward bit
for bit, a concurrent stream equals its solo run, a resumed prompt equals a fresh one."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import MODEL_ID, launch_server
from engine_util import COMPLETIONS, describe_diff, generate, ids_of, cached_tokens

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "oracle"))
import dsv4_reference  # noqa: E402

N_TOKENS = 300  # two HCA windows of 128, 75 CSA windows, the 8-token attention window many times over


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("dsv4f") / "tiny"
    subprocess.run([sys.executable, str(ROOT / "tools/fixtures/gen_deepseek_v4.py"), "--out", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def ids():
    return [int(t) for t in np.random.default_rng(1).integers(0, 512, N_TOKENS)]


def logits(tf_bin, ck, ids, tmp_path, chunk=0, qat=False):
    out = tmp_path / f"logits_{chunk}_{qat}.npy"
    proc = subprocess.run([tf_bin, "logits", str(ck), "--tokens", ",".join(map(str, ids)), "--chunk", str(chunk),
                           "--out", str(out), *(["--qat"] if qat else [])], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(out)


def test_logits_match_the_float64_reference(tf_bin, tiny, ids, tmp_path):
    ref = dsv4_reference.Model(dsv4_reference.Checkpoint(str(tiny))).forward(ids)
    got = logits(tf_bin, tiny, ids, tmp_path).astype(np.float64)
    # float32 through 5 layers against float64, relative to the row's largest logit.
    rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert rel.max() < 1e-4, f"worst row {rel.argmax()}: {rel.max():.3g}"
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(ref).max(axis=1)
    assert clear.sum() > 0.9 * len(ids)
    assert (got.argmax(1) == ref.argmax(1))[clear].all()


def test_scale_blocks_smaller_than_the_matrices(tf_bin, ids, tmp_path):
    """weight_block_size 32: the FP8 matrices have several scale blocks each way, so the views of grouped rows
    (wo_a) and the edge blocks address the scale grid past its first block."""
    ck = tmp_path / "b32"
    subprocess.run([sys.executable, str(ROOT / "tools/fixtures/gen_deepseek_v4.py"), "--out", str(ck), "--block", "32"],
                   check=True, capture_output=True)
    c = dsv4_reference.Checkpoint(str(ck))
    assert c.t("layers.0.attn.wq_b.scale").shape[0] > 1 and c.t("layers.0.attn.wo_a.scale").shape[1] > 1
    ref = dsv4_reference.Model(c).forward(ids[:60])
    got = logits(tf_bin, ck, ids[:60], tmp_path).astype(np.float64)
    rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert rel.max() < 1e-4, f"worst position {rel.argmax()}: {rel.max():.3g}"


@pytest.mark.parametrize("chunk", [1, 37, 200])
def test_chunked_prefill_equals_the_full_forward(tf_bin, tiny, ids, tmp_path, chunk):
    full = logits(tf_bin, tiny, ids, tmp_path)
    part = logits(tf_bin, tiny, ids, tmp_path, chunk)
    diff = np.nonzero((full.view(np.uint32) != part.view(np.uint32)).any(axis=1))[0]
    assert diff.size == 0, f"chunk {chunk}: first differing position {diff[0]}"


def test_qat_roundings_match_the_reference_and_stay_exact(tf_bin, tiny, ids, tmp_path):
    """The release's FP8/FP4 activation roundings: chunked equals full bit for bit, and the float64 reference with
    the same roundings agrees (a value on a grid midpoint may round apart in f32 and f64, so a few rows drift more)."""
    full = logits(tf_bin, tiny, ids, tmp_path, 0, qat=True)
    part = logits(tf_bin, tiny, ids, tmp_path, 37, qat=True)
    assert np.array_equal(full.view(np.uint32), part.view(np.uint32))
    ref = dsv4_reference.Model(dsv4_reference.Checkpoint(str(tiny)), qat=True).forward(ids)
    rel = np.abs(full - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert np.mean(rel < 1e-4) > 0.95 and rel.max() < 1e-2, (np.mean(rel < 1e-4), rel.max())
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-2 * np.abs(ref).max(axis=1)
    assert clear.sum() > 0.9 * len(clear), clear.sum()
    assert (full.argmax(1) == ref.argmax(1))[clear].all()
    plain = logits(tf_bin, tiny, ids, tmp_path)
    assert not np.array_equal(plain, full), "--qat changed nothing"


@pytest.fixture(scope="module")
def server(tf_bin, tiny, tmp_path_factory):
    handle = launch_server(tf_bin, str(tiny), tmp_path_factory.mktemp("srv") / "server.log",
                           ["--parallel", "4", "--context", "512", "--chunk", "48"])
    try:
        yield handle
    finally:
        handle.stop()


def body(prompt, n=40, **extra):
    return {"model": MODEL_ID, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra}


PROMPTS = [" ".join(f"word{i * 7 + k}" for k in range(40 + 25 * i)) for i in range(4)]


def test_concurrent_equals_solo(server):
    solo = [ids_of(generate(server, COMPLETIONS, body(p, seed=i, temperature=0.8 if i % 2 else 0)))
            for i, p in enumerate(PROMPTS)]
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(lambda ip: ids_of(generate(server, COMPLETIONS, body(
            ip[1], seed=ip[0], temperature=0.8 if ip[0] % 2 else 0))), enumerate(PROMPTS)))
    for i, (a, b) in enumerate(zip(solo, together)):
        assert a == b, describe_diff(f"prompt {i}", a, b, "solo", "concurrent")


def test_resumed_equals_fresh(server):
    prompt = " ".join(f"token{k}" for k in range(45))  # ~200 tokens: past an HCA window of 128
    first = generate(server, COMPLETIONS, body(prompt))
    again = generate(server, COMPLETIONS, body(prompt))
    assert first["usage"]["prompt_tokens"] > 128, first["usage"]
    assert (cached_tokens(again) or 0) > 0, "the second request should reuse cached pages"
    assert ids_of(first) == ids_of(again), describe_diff("resumed", ids_of(first), ids_of(again), "fresh", "resumed")


@pytest.mark.parametrize("flag,mode", [(None, "thinking"), ("--no-thinking", "chat")])
def test_chat_encoding_matches_the_release_encoder(tf_bin, tiny, tmp_path, flag, mode):
    """/tokenize of chat messages equals the HF tokenizer's ids of the release encoder's string (both modes)."""
    import json
    import urllib.request

    from tokenizers import Tokenizer

    cases = json.loads((ROOT / "tests/fixtures/dsv4_chat/cases.json").read_text())
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    srv = launch_server(tf_bin, str(tiny), tmp_path / "server.log", [flag] if flag else [])
    try:
        for c in (c for c in cases if c["mode"] == mode):
            data = json.dumps({"messages": c["messages"]}).encode()
            req = urllib.request.Request(srv.base_url + "/tokenize", data=data,
                                         headers={"Content-Type": "application/json"})
            got = json.loads(urllib.request.urlopen(req, timeout=30).read())["tokens"]
            assert got == tok.encode(c["text"], add_special_tokens=False).ids, (c["name"], mode)
    finally:
        srv.stop()


def test_thinking_flag_refused_for_formats_without_it(tf_bin, model_path):
    proc = subprocess.run([tf_bin, "run", model_path, "-p", "hi", "-n", "1", "--no-thinking"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "--no-thinking: the chat format (chatml) has no thinking mode" in proc.stderr


def test_mtp_drafts_match_the_float64_reference(tf_bin, tiny, ids, tmp_path):
    """MTP (no transformers implementation): drafts and their logits against the numpy reference's mtp_drafts."""
    prompt = ids[:150]
    out = tmp_path / "mtp.npy"
    proc = subprocess.run([tf_bin, "logits", str(tiny), "--tokens", ",".join(map(str, prompt)), "--out",
                           str(tmp_path / "l.npy"), "--mtp-drafts", "4", "--mtp-out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got_ids = [int(t) for t in proc.stdout.split("mtp drafts:")[1].split()]
    ref_ids, ref = dsv4_reference.Model(dsv4_reference.Checkpoint(str(tiny))).mtp_drafts(prompt, 4)
    got = np.load(out).astype(np.float64)
    rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert rel.max() < 1e-4, rel
    assert got_ids == ref_ids


def test_mtp_drafts_refused_without_an_mtp_layer_or_with_one_token(tf_bin, tiny, model_path, tmp_path):
    cases = [(tiny, "5", "MTP drafts need at least two tokens"),
             (model_path, "1,2,3", "this model has no MTP layer to draft with")]
    for model, tokens, expect in cases:
        proc = subprocess.run([tf_bin, "logits", str(model), "--tokens", tokens, "--out", str(tmp_path / "l.npy"),
                               "--mtp-drafts", "2"], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and expect in proc.stderr, (model, proc.stderr)


def test_mtp_drafted_equals_serial(tf_bin, tiny, tmp_path):
    import urllib.request

    serial = launch_server(tf_bin, str(tiny), tmp_path / "serial.log",
                           ["--no-drafts", "--context", "512", "--no-qat"])
    drafted = launch_server(tf_bin, str(tiny), tmp_path / "mtp.log",
                            ["--drafter", "mtp", "--draft-max", "3", "--context", "512", "--no-qat"])
    try:
        # Sampled and greedy requests; the greedy ones are known to get some of their random-weight drafts accepted.
        cases = [body(p, n=48, seed=i, temperature=0.9) for i, p in enumerate(PROMPTS[:2])]
        cases += [body(f"word{i} word{i} word{i} the the the", n=60) for i in (1, 2, 3)]
        for i, b in enumerate(cases):
            a, d = ids_of(generate(serial, COMPLETIONS, b)), ids_of(generate(drafted, COMPLETIONS, b))
            assert a == d, describe_diff(f"request {i}", a, d, "serial", "mtp-drafted")
        text = urllib.request.urlopen(drafted.base_url + "/metrics", timeout=10).read().decode()
        count = {l.split()[0]: float(l.split()[-1]) for l in text.splitlines() if l.startswith("tensorfold_draft")}
        assert count.get("tensorfold_draft_tokens_total", 0) > 0, "the MTP drafter proposed nothing"
        accepted = count.get("tensorfold_draft_accepted_tokens_total", 0)
        assert accepted > 0, "no MTP draft accepted: the accept path went untested"
    finally:
        serial.stop()
        drafted.stop()


def test_mtp_drafter_refused_without_an_mtp_layer(tf_bin, model_path, tmp_path):
    proc = subprocess.run([tf_bin, "serve", model_path, "--drafter", "mtp", "--port", "1"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "drafter 'mtp' needs a model that ships one" in proc.stderr + proc.stdout


def test_tool_messages_refused_by_name(server):
    from e2e_util import post_json

    req = {"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"},
                                                              {"role": "tool", "content": "42"}]}
    status, got, raw = post_json(server.base_url, "/v1/chat/completions", req)
    assert status == 400 and got["error"]["param"] == "messages[1].role", raw
    assert "'tool' messages are not supported by the DeepSeek-V4 chat encoding" in got["error"]["message"], raw
    req = {"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"},
                                                              {"role": "assistant", "content": "a",
                                                               "reasoning_content": 7}]}
    status, got, raw = post_json(server.base_url, "/v1/chat/completions", req)
    assert status == 400 and got["error"]["param"] == "messages[1].reasoning_content", raw
    assert "'messages[1].reasoning_content' must be a string" in got["error"]["message"], raw
    assert ids_of(generate(server, COMPLETIONS, body("hello", n=2))), "the server keeps serving"


def test_generation_config_eos_ends_replies(tf_bin, tiny, tmp_path):
    """generation_config.json's eos_token_id (an id or a list) ends a reply; an id outside the vocabulary is refused
    at startup naming the key."""
    import json
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(tiny, ck)
    srv = launch_server(tf_bin, str(ck), tmp_path / "a.log")
    try:
        first = ids_of(generate(srv, COMPLETIONS, {"model": MODEL_ID, "prompt": "hello world", "max_tokens": 3,
                                                   "temperature": 0, "return_token_ids": True}))
    finally:
        srv.stop()
    assert len(first) == 3, first
    (ck / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, first[0]]}))
    srv = launch_server(tf_bin, str(ck), tmp_path / "b.log")
    try:
        got = generate(srv, COMPLETIONS, {"model": MODEL_ID, "prompt": "hello world", "max_tokens": 3,
                                          "temperature": 0, "return_token_ids": True})
        assert got["choices"][0]["finish_reason"] == "stop" and len(ids_of(got)) <= 1, got
    finally:
        srv.stop()
    (ck / "generation_config.json").write_text(json.dumps({"eos_token_id": 100000}))
    proc = subprocess.run([tf_bin, "run", str(ck), "-p", "hi", "-n", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "'eos_token_id' 100000 is outside the tokenizer's 512 ids" in proc.stderr
