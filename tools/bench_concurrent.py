#!/usr/bin/env python3
"""concurrent == solo (and == serial): N different requests at once, then each again alone, compared token by token.

N chat requests (mixed prompt lengths, each starting with a per-run nonce; even indices greedy, odd indices
sampled at temperature 1 with fixed seeds; ignore_eos; return_token_ids) are released together from N threads. Then, with --alone, each is re-run
by itself in order; with --serial, each solo run is done again with "draft": false. Replies are compared by
exact token ids; the server's token_sha is checked against the ids too.

Usage: python tools/bench_concurrent.py [URL] [--n 16] [--max-tokens 48] [--alone] [--serial] [--out FILE]
Output: {"n", "identical_alone", "identical_serial", "mismatches": [...], "concurrent_wall_s", "aggregate_tok_s", ...}
Solo runs follow the concurrent ones, so they may resume prompts from the prefix cache (cached_tokens is shown).
Exit codes: 0 all identical; 1 any mismatch; 2 failure (server error, missing token ids).
"""
import argparse
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# token_sha.py and oai_common.py sit next to this script; make them importable however this file is launched.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oai_common import (add_client_args, add_server_args, emit, make_client, run_and_emit,  # noqa: E402
                        served_model, tensorfold_ext)
from token_sha import token_sha  # noqa: E402

SUBJECTS = ["a lighthouse", "a bakery at dawn", "the moons of Jupiter", "a chess endgame", "river otters",
            "an old clock", "volcanic islands", "a night train", "honeybees", "a mountain village",
            "paper cranes", "a jazz trio", "desert rain", "a library fire", "glass blowing", "the first radio"]
FILLER = ("Consider the history, the people involved, the small details that are easy to miss, the sounds and the "
          "smells, and what someone visiting for the first time would notice before anything else. ")


def make_requests(n: int, max_tokens: int, max_filler: int, seed: int, nonce: str) -> list:
    """N distinct requests: prompt length grows with the index (mod 4), half greedy, half seeded sampling."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        repeats = (i % 4) * max_filler // 3
        text = f"[{nonce}] Request {i}. Write about {subject}. " + FILLER * repeats
        sampled = i % 2 == 1
        reqs.append({"index": i, "messages": [{"role": "user", "content": text.strip()}],
                     "temperature": 1.0 if sampled else 0.0, "seed": rng.randrange(1, 2**31) if sampled else None,
                     "max_tokens": max_tokens})
    return reqs


def run_one(client, model: str, req: dict, extra: dict) -> dict:
    body = {"ignore_eos": True, "return_token_ids": True}
    body.update(extra)
    kw = {"seed": req["seed"]} if req["seed"] is not None else {}
    t0 = time.perf_counter()
    resp = client.chat.completions.create(model=model, messages=req["messages"], max_tokens=req["max_tokens"],
                                          temperature=req["temperature"], extra_body=body, **kw)
    t1 = time.perf_counter()
    ext = tensorfold_ext(resp)
    if not isinstance(ext.get("token_ids"), list):
        raise RuntimeError(f"request {req['index']}: reply has no tensorfold.token_ids")
    ids = ext["token_ids"]
    details = resp.usage.prompt_tokens_details if resp.usage else None
    return {"ids": ids, "sha": token_sha(ids), "server_sha": ext.get("token_sha"),
            "completion_tokens": resp.usage.completion_tokens if resp.usage else len(ids),
            "prompt_tokens": resp.usage.prompt_tokens if resp.usage else None,
            "cached_tokens": getattr(details, "cached_tokens", None),
            "draft_tokens": ext.get("draft_tokens"), "accepted_tokens": ext.get("accepted_tokens"),
            "start": t0, "end": t1}


def first_diff(a: list, b: list):
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(kind: str, req: dict, ref: dict, other: dict):
    k = first_diff(ref["ids"], other["ids"])
    if k is None:
        return None
    return {"index": req["index"], "kind": kind, "temperature": req["temperature"], "seed": req["seed"],
            "first_diff": k, "concurrent_sha": ref["sha"], f"{kind}_sha": other["sha"],
            "concurrent_len": len(ref["ids"]), f"{kind}_len": len(other["ids"]),
            "concurrent_tok": ref["ids"][k] if k < len(ref["ids"]) else None,
            f"{kind}_tok": other["ids"][k] if k < len(other["ids"]) else None,
            # Solo runs may resume from the prefix cache: a mismatch there may be a cache bug, not a batching one.
            "concurrent_cached_tokens": ref["cached_tokens"], f"{kind}_cached_tokens": other["cached_tokens"]}


def sha_mismatches(kind: str, req: dict, rep: dict) -> list:
    if rep["server_sha"] == rep["sha"]:
        return []
    return [{"index": req["index"], "kind": f"{kind}_token_sha", "server_token_sha": rep["server_sha"],
             "computed_token_sha": rep["sha"]}]


def bench(args) -> dict:
    client = make_client(args.url, args.api_key, args.timeout)
    model = served_model(client, args.model)
    nonce = args.nonce if args.nonce is not None else "%08x" % random.SystemRandom().getrandbits(32)
    reqs = make_requests(args.n, args.max_tokens, args.max_filler, args.seed, nonce)
    # One unmeasured request first: connection setup stays out of the concurrent wall time.
    run_one(client, model, dict(reqs[0], max_tokens=1), {})

    barrier = threading.Barrier(args.n)

    def fire(req):
        barrier.wait()
        return run_one(client, model, req, {})

    with ThreadPoolExecutor(max_workers=args.n) as pool:
        conc = list(pool.map(fire, reqs))
    wall = max(r["end"] for r in conc) - min(r["start"] for r in conc)
    total = sum(r["completion_tokens"] for r in conc)

    mismatches = []
    for req, rep in zip(reqs, conc):
        mismatches += sha_mismatches("concurrent", req, rep)
    counts = {"alone": 0 if args.alone else None, "serial": 0 if args.serial else None}
    for req, rep in zip(reqs, conc):
        for kind, extra in (("alone", {}), ("serial", {"draft": False})):
            if counts[kind] is None:
                continue
            solo = run_one(client, model, req, extra)
            mismatches += sha_mismatches(kind, req, solo)
            bad = compare(kind, req, rep, solo)
            counts[kind] += bad is None
            mismatches += [bad] if bad else []
    identical_alone, identical_serial = counts["alone"], counts["serial"]

    return {"url": args.url, "model": model, "n": args.n, "max_tokens": args.max_tokens, "nonce": nonce,
            "identical_alone": identical_alone, "identical_serial": identical_serial, "mismatches": mismatches,
            "concurrent_wall_s": round(wall, 6), "aggregate_tok_s": round(total / wall, 3) if wall > 0 else None,
            "completion_tokens_total": total,
            "draft_tokens_total": sum(r["draft_tokens"] or 0 for r in conc),
            "accepted_tokens_total": sum(r["accepted_tokens"] or 0 for r in conc),
            "replies": [{"index": q["index"], "temperature": q["temperature"], "seed": q["seed"],
                         "prompt_tokens": r["prompt_tokens"], "cached_tokens": r["cached_tokens"],
                         "completion_tokens": r["completion_tokens"],
                         "token_sha": r["sha"]} for q, r in zip(reqs, conc)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--n", type=int, default=16, help="concurrent requests")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-filler", type=int, default=6,
                    help="longest prompt padding, in ~35-token filler sentences (index mod 4 picks 0..max)")
    ap.add_argument("--alone", action="store_true", help="re-run each request alone and compare")
    ap.add_argument("--serial", action="store_true", help='also re-run each alone with "draft": false and compare')
    ap.add_argument("--seed", type=int, default=20240611, help="derives the sampled requests' seeds")
    ap.add_argument("--nonce", help="text put at the start of every prompt (default: fresh random, so the "
                                    "concurrent run prefills cold instead of resuming an earlier run's prompts)")
    add_client_args(ap)
    args = ap.parse_args(argv)
    if args.n < 1 or args.max_tokens < 1 or args.max_filler < 0:
        emit({"error": "--n and --max-tokens must be >= 1, --max-filler >= 0"}, args.out)
        return 2
    return run_and_emit(bench, args, lambda result: 1 if result["mismatches"] else 0)


if __name__ == "__main__":
    sys.exit(main())
