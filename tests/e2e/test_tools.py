"""The benchmark and exactness tools in tools/ run against the real server with tiny settings and emit sane JSON."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_util import MODEL_ID, post_json, token_sha as ref_token_sha

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"
TOOL_TIMEOUT_S = 180
SHA_LEN = 12


def run_tool(name: str, *args, stdin=None):
    """Runs tools/NAME with the venv's python; returns (exit code, parsed JSON stdout, stderr)."""
    proc = subprocess.run([sys.executable, str(TOOLS / name), *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=TOOL_TIMEOUT_S, cwd=REPO_ROOT)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        out = None
    return proc.returncode, out, proc.stderr


def shown(rc, out, err) -> str:
    return f"rc={rc}\nstdout={json.dumps(out, indent=1)[:3000]}\nstderr={err[-2000:]}"


@pytest.mark.parametrize("name", ["token_sha.py", "bench_openai.py", "bench_cache.py", "bench_concurrent.py"])
def test_help(name):
    proc = subprocess.run([sys.executable, str(TOOLS / name), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower()


def test_token_sha_args_and_import():
    rc, out, err = run_tool("token_sha.py", "1", "2,3")
    assert rc == 0, shown(rc, out, err)
    assert out == {"token_sha": ref_token_sha([1, 2, 3]), "count": 3}
    sys.path.insert(0, str(TOOLS))
    try:
        from token_sha import token_sha
    finally:
        sys.path.remove(str(TOOLS))
    assert token_sha([1, 2, 3]) == ref_token_sha([1, 2, 3]) == out["token_sha"]
    assert token_sha([]) == ref_token_sha([])


def test_token_sha_checks_server_reply(server, tmp_path):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "temperature": 0, "return_token_ids": True}
    status, reply, raw = post_json(server.base_url, "/v1/chat/completions", body)
    assert status == 200, raw[:300]
    ext = reply["tensorfold"]
    path = tmp_path / "reply.json"
    path.write_text(json.dumps(reply))
    rc, out, err = run_tool("token_sha.py", "--json", path)
    assert rc == 0, shown(rc, out, err)
    assert out["match"] is True and out["token_sha"] == ext["token_sha"] == out["reply_token_sha"]
    assert out["count"] == len(ext["token_ids"]) == reply["usage"]["completion_tokens"]
    # A reply whose token_sha does not fit its ids is reported with exit 1.
    ext["token_sha"] = "0" * SHA_LEN if ext["token_sha"] != "0" * SHA_LEN else "1" * SHA_LEN
    rc, out, err = run_tool("token_sha.py", "--json", "-", stdin=json.dumps(reply))
    assert rc == 1, shown(rc, out, err)
    assert out["match"] is False


def test_bench_openai(server):
    rc, out, err = run_tool("bench_openai.py", server.base_url + "/v1", "--reps", 1, "--max-tokens", 8,
                            "--warmup", 0)
    assert rc == 0, shown(rc, out, err)
    assert out["model"] == MODEL_ID and out["max_tokens"] == 8
    assert [r["temperature"] for r in out["results"]] == [0.0, 1.0]
    for res in out["results"]:
        assert res["decode_tok_s_median"] > 0 and res["ttft_s_median"] > 0, shown(rc, out, err)
        assert len(res["runs"]) == 1
        run = res["runs"][0]
        assert run["completion_tokens"] == 8, "ignore_eos must give exactly max_tokens tokens"
        assert len(run["token_sha"]) == SHA_LEN


def test_bench_cache_require_cold(server):
    # A fresh random seed gives fresh nonces, so the cold runs are cold even if other tests warmed the cache.
    seed = random.SystemRandom().getrandbits(48)
    args = (server.base_url, "--lengths", "60,120", "--max-tokens", 2, "--require-cold", "--seed", seed)
    rc, out, err = run_tool("bench_cache.py", *args)
    assert rc == 0, shown(rc, out, err)
    assert out["model"] == MODEL_ID and out["seed"] == seed and len(out["prompts"]) == 2
    for row in out["prompts"]:
        assert 0 < row["prompt_tokens"] < 512
        assert row["cold_cached_tokens"] == 0
        # Until the prefix cache lands the warm run reports 0 cached tokens; afterwards it should be most of the prompt.
        assert 0 <= row["warm_cached_tokens"] <= row["prompt_tokens"]
        assert row["cold_ttft_s"] > 0 and row["warm_ttft_s"] > 0 and row["speedup"] > 0
        assert row["tokens_equal"] is True, "resumed == fresh: the warm reply must repeat the cold one's tokens"
    for key in ("cold_ttft_s_median", "warm_ttft_s_median", "speedup_median", "warm_cached_tokens_median"):
        assert out[key] is not None and out[key] >= 0
    # The same seed again: with a prefix cache the "cold" runs are now warm and --require-cold must refuse them.
    rc2, out2, err2 = run_tool("bench_cache.py", *args)
    if rc2 == 2:
        assert "cached_tokens" in out2["error"], shown(rc2, out2, err2)
    else:
        # No prefix cache yet (cached_tokens always 0): the repeat is still a valid cold measurement.
        assert rc2 == 0 and all(r["cold_cached_tokens"] == 0 for r in out2["prompts"]), shown(rc2, out2, err2)


def test_bench_concurrent(server):
    n = 4
    rc, out, err = run_tool("bench_concurrent.py", server.base_url, "--n", n, "--max-tokens", 8, "--max-filler", 3,
                            "--alone", "--serial")
    assert rc == 0, shown(rc, out, err)
    # Holds before batching lands too: a server that ignores "draft" or serves one at a time is trivially exact.
    assert out["n"] == n and out["identical_alone"] == n and out["identical_serial"] == n
    assert out["mismatches"] == []
    assert out["concurrent_wall_s"] > 0 and out["aggregate_tok_s"] > 0
    assert out["completion_tokens_total"] == n * 8
    assert [r["index"] for r in out["replies"]] == list(range(n))
