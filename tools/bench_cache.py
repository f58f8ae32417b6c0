#!/usr/bin/env python3
"""Prefix-cache benefit: cold vs warm time to first token of the exact same long prompt.

For each target length (approximate prompt tokens) a prompt of varied text is built that starts with its own
random nonce, so no earlier request (this run's or another's) can have warmed the cache for it (--seed makes
the nonces reproducible). Each prompt is sent twice, streamed with stream_options.include_usage:
  cold: first time;  warm: the identical request again.
ttft_s is the arrival of the first content chunk; cached_tokens is usage.prompt_tokens_details.cached_tokens.
The token ids of the two replies (temperature 0, return_token_ids) must be equal: resumed == fresh.

The default endpoint is /v1/completions so the nonce is really the first thing in the prompt; with
--endpoint chat the chat template's head is shared by every request, so a cache may report it as cached.

Usage: python tools/bench_cache.py [URL] [--lengths 500,1000,1500,2000] [--require-cold] [--seed S] [--out FILE]
Exit codes: 0 ok; 1 a warm reply's tokens differ from the cold one's; 2 failure, or with --require-cold a cold
reply that shows cached_tokens > 0 (nothing is reported then but the error).
"""
import argparse
import os
import random
import sys

# oai_common.py sits next to this script; make it importable however this file is launched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oai_common import (add_client_args, add_server_args, emit, make_client, median_or_none,  # noqa: E402
                        run_and_emit, served_model, timed_stream)

# Rough English words-to-tokens ratio of BPE tokenizers; actual counts come back in usage.prompt_tokens.
TOKENS_PER_WORD = 1.43

TOPICS = {
    "harbour": "ship harbour tide rope gull lantern dock sailor cargo fog anchor mast crate pier storm".split(),
    "kitchen": "bread oven flour pepper garlic onion kettle spoon butter recipe soup basil lemon dough".split(),
    "forest": "pine moss fern owl creek trail badger acorn bark mushroom clearing ridge deer thicket".split(),
    "city": "tram bridge market tower alley bakery clock square pigeon cafe bus ledger window street".split(),
    "workshop": "lathe chisel solder circuit gear spring bolt drill clamp blueprint valve piston wire".split(),
    "library": "archive ledger manuscript index shelf quill atlas chapter margin folio catalogue scroll".split(),
}
VERBS = "carried watched repaired counted opened painted measured followed moved tested described hid".split()
ADJS = "old quiet narrow bright heavy careful distant green broken patient curious small crooked".split()
NAMES = "Ada Bram Cleo Dario Edith Farid Greta Hugo Ines Joon Kalani Lena Mateo Nadia Oskar Priya".split()
TEMPLATES = [
    "{name} {verb} the {adj} {n1} near the {n2}.",
    "Every morning the {n1} was {verb} by {name}, who never trusted the {adj} {n2}.",
    "In the {adj} light, {name} {verb} {count} {n1}s and wrote the number beside the {n2}.",
    "Nobody remembered why the {n2} had been {verb} twice, but {name} kept a {adj} {n1} for it.",
    "\"Bring the {n1},\" said {name}, \"and leave the {adj} {n2} where it is.\"",
    "By noon the {n1} and the {n2} were {verb}; {name} noted it as item {count}.",
]


def make_prompt(rng: random.Random, target_tokens: int) -> str:
    """A unique-nonce-first prompt of about target_tokens tokens, switching topic every paragraph."""
    # The nonce is the very first text, so no two prompts share even their first token (barring a ~1/1000 fluke).
    nonce = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(20))
    parts = [f"{nonce} record.", "\n\n"]
    words = 2
    budget = max(8, int(target_tokens / TOKENS_PER_WORD) - 12)
    while words < budget:
        nouns = TOPICS[rng.choice(sorted(TOPICS))]
        para = []
        for _ in range(rng.randint(3, 6)):
            s = rng.choice(TEMPLATES).format(name=rng.choice(NAMES), verb=rng.choice(VERBS), adj=rng.choice(ADJS),
                                             n1=rng.choice(nouns), n2=rng.choice(nouns), count=rng.randint(2, 999))
            para.append(s)
            words += len(s.split())
        parts.append(" ".join(para))
        parts.append("\n\n")
    # Ends mid-sentence so a raw completion starts with text, not with an end-of-turn token.
    parts.append("The first person named in this record is")
    return "".join(parts)


def timed_request(client, model: str, endpoint: str, prompt: str, max_tokens: int) -> dict:
    """One streamed request: TTFT, usage and the reply's token ids."""
    r = timed_stream(client, model, endpoint, prompt, max_tokens=max_tokens, temperature=0,
                     extra_body={"ignore_eos": True, "return_token_ids": True})
    usage, ext = r["usage"], r["ext"]
    details = usage.prompt_tokens_details
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:
        raise RuntimeError("usage.prompt_tokens_details.cached_tokens missing")
    return {"ttft_s": round(r["t_first"] - r["t_send"], 6), "prompt_tokens": usage.prompt_tokens, "cached_tokens": cached,
            "completion_tokens": usage.completion_tokens, "token_ids": ext.get("token_ids"),
            "token_sha": ext.get("token_sha")}


class ColdNotCold(Exception):
    pass


def bench(args) -> dict:
    client = make_client(args.url, args.api_key, args.timeout)
    model = served_model(client, args.model)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(63)
    rng = random.Random(seed)
    # Warm-up on a short unique prompt: connection setup stays out of the first cold figure.
    timed_request(client, model, args.endpoint, make_prompt(rng, 16), 1)
    rows = []
    for target in args.lengths:
        prompt = make_prompt(rng, target)
        cold = timed_request(client, model, args.endpoint, prompt, args.max_tokens)
        if args.require_cold and cold["cached_tokens"] > 0:
            raise ColdNotCold(f"cold request for target {target} tokens shows cached_tokens={cold['cached_tokens']} "
                              f"of {cold['prompt_tokens']}: the cache was already warm, refusing to report it as cold")
        warm = timed_request(client, model, args.endpoint, prompt, args.max_tokens)
        rows.append({
            "target_tokens": target, "prompt_tokens": cold["prompt_tokens"],
            "cold_ttft_s": cold["ttft_s"], "cold_cached_tokens": cold["cached_tokens"],
            "warm_ttft_s": warm["ttft_s"], "warm_cached_tokens": warm["cached_tokens"],
            "speedup": round(cold["ttft_s"] / warm["ttft_s"], 3) if warm["ttft_s"] > 0 else None,
            "cold_token_sha": cold["token_sha"], "warm_token_sha": warm["token_sha"],
            "tokens_equal": cold["token_ids"] == warm["token_ids"] and cold["token_ids"] is not None,
        })
    return {"url": args.url, "model": model, "endpoint": args.endpoint, "seed": seed, "max_tokens": args.max_tokens,
            "require_cold": args.require_cold, "prompts": rows,
            "cold_ttft_s_median": median_or_none(r["cold_ttft_s"] for r in rows),
            "warm_ttft_s_median": median_or_none(r["warm_ttft_s"] for r in rows),
            "speedup_median": median_or_none(r["speedup"] for r in rows),
            "warm_cached_tokens_median": median_or_none(r["warm_cached_tokens"] for r in rows),
            "tokens_equal_all": all(r["tokens_equal"] for r in rows)}


def parse_lengths(text: str):
    return [int(t) for t in text.split(",") if t.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--lengths", type=parse_lengths, default=[500, 1000, 1500, 2000],
                    help="approximate prompt lengths in tokens, comma list (default 500,1000,1500,2000)")
    ap.add_argument("--max-tokens", type=int, default=4, help="reply length of each request")
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--seed", type=int, help="fixes the prompts and nonces (default: fresh random each run)")
    ap.add_argument("--require-cold", action="store_true",
                    help="exit 2 instead of reporting a cold figure whose reply shows cached_tokens > 0")
    add_client_args(ap)
    args = ap.parse_args(argv)
    if not args.lengths or min(args.lengths) < 1 or args.max_tokens < 1:
        emit({"error": "--lengths must list positive numbers and --max-tokens be >= 1"}, args.out)
        return 2
    return run_and_emit(bench, args, lambda result: 0 if result["tokens_equal_all"] else 1,
                        plain_errors=(ColdNotCold,))


if __name__ == "__main__":
    sys.exit(main())
